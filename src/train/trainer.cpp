// One training step: forward (training mode), loss, backward, optimizer
// update of the layer's parameters and the head's.
#include <cmath>
#include <string>
#include <utility>

#include "ffn/train.hpp"

namespace ffn {

Trainer::Trainer(Layer& layer, std::optional<OutputHead> head, LossKind loss, const OptimizerConfig& opt,
                 int threads)
    : layer_(layer), head_(std::move(head)), loss_(loss), opt_(opt), threads_(threads) {
  if (loss_ == LossKind::xent) {
    if (!head_) throw Error("loss xent: needs an output head (vocab)");
    if (head_->d_model != layer_.config().d_model)
      throw Error("output head: d_model " + std::to_string(head_->d_model) + " differs from the layer's " +
                  std::to_string(layer_.config().d_model));
  } else {
    head_.reset();
  }
}

namespace {

const char* nonfinite_kind(double v) { return std::isnan(v) ? "nan" : "inf"; }

// The first non-finite element of v, as " is nan" / " is inf"; empty if none.
std::string first_nonfinite(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return std::string(" is ") + nonfinite_kind(v[i]);
  return "";
}

}  // namespace

double Trainer::step(const Batch& b, uint64_t dropout_seed) {
  diverged_.clear();
  const int64_t d = layer_.config().d_model;
  const size_t n = size_t(b.n * d);
  y_.resize(n);
  dy_.resize(n);
  dx_.resize(n);
  RunOptions ro;
  ro.training = true;
  ro.seed = dropout_seed;
  ro.threads = threads_;
  const Shape shape = Shape::tokens(b.n);
  layer_.forward(b.x, y_.data(), shape, ro, &cache_);

  double loss;
  if (loss_ == LossKind::mse) {
    loss = mse_loss(y_.data(), b.targets, int64_t(n), dy_.data());
  } else {
    if (!head_grads_) head_grads_ = head_->zeros_like();
    loss = head_->cross_entropy(y_.data(), b.labels, b.n, dy_.data(), &*head_grads_, threads_);
  }
  if (!std::isfinite(loss)) {
    diverged_ = std::string("loss is ") + nonfinite_kind(loss);
    return loss;
  }
  layer_.backward(b.x, dy_.data(), shape, cache_, dx_.data(), grads_, ro);
  for (size_t t = 0; t < 8; ++t) {
    const std::vector<float>& g = *grads_.all()[t];
    if (const std::string bad = first_nonfinite(g.data(), g.size()); !bad.empty()) {
      diverged_ = "gradient of " + *layer_.names().all()[t] + bad;
      return loss;
    }
  }
  if (head_) {
    for (const auto& [v, name] : {std::pair{&head_grads_->weight, "head.weight"}, std::pair{&head_grads_->bias, "head.bias"}}) {
      if (const std::string bad = first_nonfinite(v->data(), v->size()); !bad.empty()) {
        diverged_ = std::string("gradient of ") + name + bad;
        return loss;
      }
    }
  }

  layer_.update_weights([&](Weights& params) {
    std::vector<ParamRef> refs = param_refs(params, grads_);
    if (head_) {
      refs.push_back({head_->weight.data(), head_grads_->weight.data(), head_->weight.size()});
      refs.push_back({head_->bias.data(), head_grads_->bias.data(), head_->bias.size()});
    }
    opt_.step(refs, threads_);
  });
  return loss;
}

double Trainer::evaluate(const Batch& b) const {
  const int64_t d = layer_.config().d_model;
  std::vector<float> y(size_t(b.n * d));
  RunOptions ro;
  ro.threads = threads_;
  layer_.forward(b.x, y.data(), Shape::tokens(b.n), ro);
  if (loss_ == LossKind::mse) return mse_loss(y.data(), b.targets, b.n * d, nullptr);
  return head_->cross_entropy(y.data(), b.labels, b.n, nullptr, nullptr, threads_);
}

}  // namespace ffn
