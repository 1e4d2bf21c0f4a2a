// SGD, Adam and AdamW with torch.optim's update rules (PyTorch 1.13,
// single-tensor implementations), so that the same gradients give the same
// parameters step for step.
#include <omp.h>

#include <cmath>

#include "ffn/diagnostics.hpp"
#include "ffn/train.hpp"
#include "core/thread_pool.hpp"

namespace ffn {

using nn::grain_for;
using nn::parallel_range;
namespace {
// Tensors smaller than this are updated on one thread (a team costs more).
constexpr size_t kParallelFrom = 1 << 16;
}  // namespace

std::string_view to_string(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
  }
  return "?";
}

OptimizerKind parse_optimizer(std::string_view s, std::string_view what) {
  for (OptimizerKind k : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw})
    if (s == to_string(k)) return k;
  throw Error(std::string(what) + ": unknown optimizer '" + std::string(s) + "', expected sgd, adam or adamw");
}

void OptimizerConfig::validate() const {
  auto in = [](double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; };
  if (!(in(lr, 0, 1e6) && lr > 0)) throw Error("learning rate: expected a number in (0, 1e6], got " + num(lr));
  if (!in(momentum, 0, 1) || momentum == 1) throw Error("momentum: expected a number in [0, 1), got " + num(momentum));
  if (!in(weight_decay, 0, 1e6)) throw Error("weight decay: expected a number in [0, 1e6], got " + num(weight_decay));
  if (!in(beta1, 0, 1) || beta1 == 1) throw Error("beta1: expected a number in [0, 1), got " + num(beta1));
  if (!in(beta2, 0, 1) || beta2 == 1) throw Error("beta2: expected a number in [0, 1), got " + num(beta2));
  if (!(in(eps, 0, 1) && eps > 0)) throw Error("adam eps: expected a number in (0, 1], got " + num(eps));
}

Optimizer::Optimizer(const OptimizerConfig& cfg) : cfg_(cfg) { cfg_.validate(); }

void Optimizer::step(std::span<const ParamRef> params, int threads) {
  if (m_.empty()) {
    m_.resize(params.size());
    v_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      m_[i].assign(params[i].size, 0.0f);
      if (cfg_.kind != OptimizerKind::sgd) v_[i].assign(params[i].size, 0.0f);
    }
  }
  if (params.size() != m_.size()) throw Error("optimizer: the parameter list changed between steps");
  ++t_;
  const float lr = float(cfg_.lr), wd = float(cfg_.weight_decay);

  const int team = resolve_threads(threads);
  if (cfg_.kind == OptimizerKind::sgd) {
    const float mu = float(cfg_.momentum);
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamRef& p = params[i];
      float* buf = m_[i].data();
      const int nt = p.size >= kParallelFrom ? team : 1;
      const int64_t size = int64_t(p.size);
      parallel_range(nt, size, grain_for(size, nt), [&](int64_t j0, int64_t j1, int) {
        for (size_t j = size_t(j0); j < size_t(j1); ++j) {
          float g = p.grad[j];
          if (wd != 0.0f) g += wd * p.value[j];
          if (mu != 0.0f) {
            buf[j] = t_ == 1 ? g : mu * buf[j] + g;  // torch: the first step copies the gradient
            g = buf[j];
          }
          p.value[j] -= lr * g;
        }
      });
    }
    return;
  }

  // Adam / AdamW.
  const float b1 = float(cfg_.beta1), b2 = float(cfg_.beta2);
  const float one_minus_b1 = float(1.0 - cfg_.beta1), one_minus_b2 = float(1.0 - cfg_.beta2);
  const float eps = float(cfg_.eps);
  const float decay = float(1.0 - cfg_.lr * cfg_.weight_decay);  // AdamW: p *= 1 - lr·wd
  const double bc1 = 1.0 - std::pow(cfg_.beta1, double(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, double(t_));
  const float step_size = float(cfg_.lr / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
  const bool decoupled = cfg_.kind == OptimizerKind::adamw;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamRef& p = params[i];
    float* m = m_[i].data();
    float* v = v_[i].data();
    const int nt = p.size >= kParallelFrom ? team : 1;
    const int64_t size = int64_t(p.size);
    parallel_range(nt, size, grain_for(size, nt), [&](int64_t j0, int64_t j1, int) {
      for (size_t j = size_t(j0); j < size_t(j1); ++j) {
        float g = p.grad[j];
        if (decoupled) p.value[j] *= decay;
        else if (wd != 0.0f) g += wd * p.value[j];
        m[j] = m[j] * b1 + one_minus_b1 * g;
        v[j] = v[j] * b2 + one_minus_b2 * g * g;
        const float denom = std::sqrt(v[j]) / bc2_sqrt + eps;
        p.value[j] -= step_size * (m[j] / denom);
      }
    });
  }
}

std::vector<ParamRef> param_refs(Weights& w, const Weights& g) {
  std::vector<ParamRef> refs;
  auto add = [&](std::vector<float>& v, const std::vector<float>& gv) {
    if (v.empty()) return;
    if (gv.size() != v.size()) throw Error("optimizer: a gradient's size differs from its parameter's");
    refs.push_back({v.data(), gv.data(), v.size()});
  };
  add(w.w1, g.w1);
  add(w.b1, g.b1);
  add(w.wg, g.wg);
  add(w.bg, g.bg);
  add(w.w2, g.w2);
  add(w.b2, g.b2);
  add(w.norm_weight, g.norm_weight);
  add(w.norm_bias, g.norm_bias);
  return refs;
}

}  // namespace ffn
