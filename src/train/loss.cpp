// Losses: mean squared error, and the output head's softmax cross-entropy
// computed with log-sum-exp (the largest logit is subtracted before exp, so no
// finite logit overflows and the loss is exact to float rounding).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "ffn/diagnostics.hpp"
#include "ffn/train.hpp"
#include "core/thread_pool.hpp"
#include "core/init.hpp"

namespace ffn {

using nn::grain_for;
using nn::parallel_range;

std::string_view to_string(LossKind k) { return k == LossKind::mse ? "mse" : "xent"; }

LossKind parse_loss(std::string_view s, std::string_view what) {
  if (s == "mse") return LossKind::mse;
  if (s == "xent") return LossKind::xent;
  throw Error(std::string(what) + ": unknown loss '" + std::string(s) + "', expected mse or xent");
}

double mse_sum(const float* y, const float* target, int64_t n, int64_t mean_over, float* dy) {
  if (n <= 0) return 0.0;
  if (mean_over < n)
    throw Error("mse_sum: mean_over " + std::to_string(mean_over) + " is less than the " + std::to_string(n) +
                " elements");
  double sum = 0.0;
  const float scale = 2.0f / float(mean_over);
  for (int64_t i = 0; i < n; ++i) {
    const float e = y[i] - target[i];
    sum += double(e) * double(e);
    if (dy) dy[i] = scale * e;
  }
  return sum;
}

double mse_loss(const float* y, const float* target, int64_t n, float* dy) {
  if (n <= 0) return 0.0;
  return mse_sum(y, target, n, n, dy) / double(n);
}

OutputHead OutputHead::init(int64_t vocab, int64_t d_model, uint64_t seed) {
  if (vocab < 1) throw Error("vocab: expected a positive integer, got " + std::to_string(vocab));
  if (d_model < 1) throw Error("d_model: expected a positive integer, got " + std::to_string(d_model));
  OutputHead h;
  h.vocab = vocab;
  h.d_model = d_model;
  h.weight.resize(size_t(vocab * d_model));
  h.bias.resize(size_t(vocab));
  const float bound = 1.0f / std::sqrt(float(d_model));
  nn::fill_uniform(h.weight.data(), h.weight.size(), bound, seed, /*tensor_id=*/200);
  nn::fill_uniform(h.bias.data(), h.bias.size(), bound, seed, /*tensor_id=*/201);
  return h;
}

OutputHead OutputHead::zeros_like() const {
  OutputHead g;
  g.vocab = vocab;
  g.d_model = d_model;
  g.weight.assign(weight.size(), 0.0f);
  g.bias.assign(bias.size(), 0.0f);
  return g;
}

namespace {

int team(int threads) { return resolve_threads(threads); }

// logits[t, v] = y[t] · W[v] + b[v]
void compute_logits(const OutputHead& h, const float* y, int64_t t, float* logits, int threads) {
  const int64_t V = h.vocab, d = h.d_model;
  parallel_range(team(threads), t, grain_for(t, team(threads)), [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* yi = y + i * d;
      for (int64_t v = 0; v < V; ++v) {
        const float* wv = h.weight.data() + v * d;
        float s = 0.0f;
        for (int64_t j = 0; j < d; ++j) s += yi[j] * wv[j];
        logits[i * V + v] = s + h.bias[size_t(v)];
      }
    }
  });
}

}  // namespace

double OutputHead::cross_entropy(const float* y, const int64_t* labels, int64_t t, float* dy, OutputHead* grads,
                                 int threads, float* logits_out) const {
  return cross_entropy_impl(y, labels, t, t, dy, grads, threads, logits_out) / double(std::max<int64_t>(t, 1));
}

double OutputHead::cross_entropy_sum(const float* y, const int64_t* labels, int64_t t, int64_t mean_over, float* dy,
                                     OutputHead* grads, int threads) const {
  if (mean_over < t) throw Error("cross_entropy_sum: mean_over " + std::to_string(mean_over) + " is less than the " +
                                 std::to_string(t) + " tokens");
  return cross_entropy_impl(y, labels, t, mean_over, dy, grads, threads, nullptr);
}

double OutputHead::cross_entropy_impl(const float* y, const int64_t* labels, int64_t t, int64_t mean_over, float* dy,
                                      OutputHead* grads, int threads, float* logits_out) const {
  const int64_t V = vocab, d = d_model;
  for (int64_t i = 0; i < t; ++i) {
    if (labels[i] < 0 || labels[i] >= V)
      throw Error("label " + std::to_string(labels[i]) + " of token " + std::to_string(i) + " is outside 0.." +
                  std::to_string(V - 1) + " (vocab " + std::to_string(V) + ")");
  }
  if (grads) {  // zeroed in place: a trainer passes the same head every step
    grads->vocab = vocab;
    grads->d_model = d_model;
    grads->weight.assign(weight.size(), 0.0f);
    grads->bias.assign(bias.size(), 0.0f);
  }
  if (t == 0) return 0.0;
  std::vector<float> own;
  float* logits = logits_out;
  if (!logits) {
    own.resize(size_t(t * V));
    logits = own.data();
  }
  compute_logits(*this, y, t, logits, threads);

  // Per token: loss = lse(z) - z[label]; dL/dz = (softmax(z) - onehot) / t.
  std::vector<double> token_loss(static_cast<size_t>(t));
  std::vector<float> dz(dy || grads ? size_t(t * V) : 0);
  const float inv_t = 1.0f / float(mean_over);
  parallel_range(team(threads), t, grain_for(t, team(threads)), [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* z = logits + i * V;
      const float zmax = *std::max_element(z, z + V);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v] - zmax));
      const double lse = double(zmax) + std::log(sum);
      token_loss[size_t(i)] = lse - double(z[labels[i]]);
      if (!dz.empty()) {
        float* g = dz.data() + i * V;
        for (int64_t v = 0; v < V; ++v) g[v] = float(std::exp(double(z[v]) - lse)) * inv_t;
        g[labels[i]] -= inv_t;
      }
    }
  });
  double loss = 0.0;
  for (double l : token_loss) loss += l;  // in token order: the same for any thread count

  if (dy) {  // dL/dy[t] = Σ_v dz[t, v] W[v]
    parallel_range(team(threads), t, grain_for(t, team(threads)), [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        float* out = dy + i * d;
        std::fill(out, out + d, 0.0f);
        for (int64_t v = 0; v < V; ++v) {
          const float g = dz[size_t(i * V + v)];
          const float* wv = weight.data() + v * d;
          for (int64_t j = 0; j < d; ++j) out[j] += g * wv[j];
        }
      }
    });
  }
  if (grads) {  // dW[v] = Σ_t dz[t, v] y[t], db[v] = Σ_t dz[t, v], summed in token order
    parallel_range(team(threads), V, grain_for(V, team(threads)), [&](int64_t v0, int64_t v1, int) {
      for (int64_t v = v0; v < v1; ++v) {
        float* gw = grads->weight.data() + v * d;
        float gb = 0.0f;
        for (int64_t i = 0; i < t; ++i) {
          const float g = dz[size_t(i * V + v)];
          const float* yi = y + i * d;
          for (int64_t j = 0; j < d; ++j) gw[j] += g * yi[j];
          gb += g;
        }
        grads->bias[size_t(v)] = gb;
      }
    });
  }
  return loss;
}

std::vector<int64_t> OutputHead::predict(const float* y, int64_t t, int threads) const {
  std::vector<float> logits(size_t(t * vocab));
  compute_logits(*this, y, t, logits.data(), threads);
  std::vector<int64_t> out(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    const float* z = logits.data() + i * vocab;
    out[size_t(i)] = std::max_element(z, z + vocab) - z;
  }
  return out;
}

}  // namespace ffn
