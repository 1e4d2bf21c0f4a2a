// One training step: forward (training mode), loss, backward, optimizer
// update of the layer's parameters and the head's.
#include <cmath>
#include <string>
#include <utility>

#include "ffn/train.hpp"

namespace ffn {

Trainer::Trainer(FeedForward& layer, std::optional<OutputHead> head, LossKind loss, const OptimizerConfig& opt,
                 int threads, Isa isa)
    : layer_(layer), head_(std::move(head)), loss_(loss), opt_(opt), threads_(threads), isa_(isa) {
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

void Trainer::set_team(const Team* team) {
  if (team && (team->size() < 1 || kTokenSlices % team->size() != 0))
    throw Error("data parallel: " + std::to_string(team ? team->size() : 0) + " ranks do not divide the " +
                std::to_string(kTokenSlices) + " token slices of a batch; use 1, 2 or 4 ranks");
  team_ = team;
}

namespace {

// Adds parts[lo + 1 .. hi) into parts[lo] over the slices' tree (split in the middle).
void tree_add(std::vector<std::vector<float>*>& parts, size_t lo, size_t hi) {
  if (hi - lo < 2) return;
  const size_t mid = (lo + hi) / 2;
  tree_add(parts, lo, mid);
  tree_add(parts, mid, hi);
  std::vector<float>& a = *parts[lo];
  const std::vector<float>& b = *parts[mid];
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

double tree_sum(const std::vector<double>& v, size_t lo, size_t hi) {
  if (hi - lo == 1) return v[lo];
  const size_t mid = (lo + hi) / 2;
  return tree_sum(v, lo, mid) + tree_sum(v, mid, hi);
}

}  // namespace

double Trainer::step(const Batch& b, uint64_t dropout_seed) {
  diverged_.clear();
  const int64_t d = layer_.config().d_model;
  if (b.labels)
    for (int64_t i = 0; i < b.n; ++i)
      if (b.labels[i] < 0 || (head_ && b.labels[i] >= head_->vocab))
        throw Error("label " + std::to_string(b.labels[i]) + " of token " + std::to_string(i) + " is outside 0.." +
                    std::to_string(head_ ? head_->vocab - 1 : 0) + " (vocab " + std::to_string(head_ ? head_->vocab : 0) +
                    ")");
  // This rank's slices [k0, k1) of the batch, rows [r0, r1).
  const int P = team_ ? team_->size() : 1, rank = team_ ? team_->rank() : 0;
  const int64_t k0 = kTokenSlices * rank / P, k1 = kTokenSlices * (rank + 1) / P;
  auto bound = [&](int64_t k) { return b.n * k / kTokenSlices; };
  const int64_t r0 = bound(k0), r1 = bound(k1), n = r1 - r0;
  const size_t rows = size_t(n * d);
  y_.resize(rows);
  dy_.resize(rows);
  dx_.resize(rows);
  RunOptions ro;
  ro.training = true;
  ro.seed = dropout_seed;
  ro.threads = threads_;
  ro.isa = isa_;
  ro.partition.position_offset = r0;
  for (int64_t k = k0; k <= k1; ++k) ro.partition.token_slices.push_back(bound(k) - r0);
  const Shape shape = Shape::tokens(n);
  const float* x = b.x + r0 * d;
  layer_.forward(x, y_.data(), shape, ro, &cache_);

  // The loss: each slice's sum, the slices' sums added over their tree on
  // every rank, divided by the batch's elements (mse) or tokens (xent).
  std::vector<double> sums;
  if (loss_ == LossKind::xent) {
    if (!head_grads_) head_grads_ = head_->zeros_like();
    head_slice_grads_.resize(size_t(k1 - k0 - 1));
  }
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t s0 = bound(k) - r0, m = bound(k + 1) - bound(k);
    if (loss_ == LossKind::mse) {
      sums.push_back(mse_sum(y_.data() + s0 * d, b.targets + (r0 + s0) * d, m * d, b.n * d, dy_.data() + s0 * d));
    } else {
      OutputHead* g = k == k0 ? &*head_grads_ : &head_slice_grads_[size_t(k - k0 - 1)];
      sums.push_back(head_->cross_entropy_sum(y_.data() + s0 * d, b.labels + r0 + s0, m, b.n, dy_.data() + s0 * d, g,
                                              threads_));
    }
  }
  if (team_) sums = team_->all_gather(sums);
  const double loss = tree_sum(sums, 0, sums.size()) / double(loss_ == LossKind::mse ? b.n * d : b.n);
  if (!std::isfinite(loss)) {
    diverged_ = std::string("loss is ") + nonfinite_kind(loss);
    return loss;
  }
  layer_.backward(x, dy_.data(), shape, cache_, dx_.data(), grads_, ro);
  // The head's gradients: this rank's slices' added over their subtree.
  std::vector<std::vector<float>*> head_w, head_b;
  if (head_) {
    head_w.push_back(&head_grads_->weight), head_b.push_back(&head_grads_->bias);
    for (OutputHead& g : head_slice_grads_) head_w.push_back(&g.weight), head_b.push_back(&g.bias);
    tree_add(head_w, 0, head_w.size());
    tree_add(head_b, 0, head_b.size());
  }
  // Every rank's sums added over the ranks' tree, one tensor (bucket) at a time.
  if (team_) {
    for (std::vector<float>* g : grads_.all())
      if (!g->empty()) team_->sum_tree(g->data(), int64_t(g->size()));
    if (head_) {
      team_->sum_tree(head_grads_->weight.data(), int64_t(head_grads_->weight.size()));
      team_->sum_tree(head_grads_->bias.data(), int64_t(head_grads_->bias.size()));
    }
  }
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
  ro.isa = isa_;
  layer_.forward(b.x, y.data(), Shape::tokens(b.n), ro);
  if (loss_ == LossKind::mse) return mse_loss(y.data(), b.targets, b.n * d, nullptr);
  return head_->cross_entropy(y.data(), b.labels, b.n, nullptr, nullptr, threads_);
}

}  // namespace ffn
