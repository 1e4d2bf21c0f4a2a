// The FFN sublayer on any weight storage (src/modules/ffn_sublayer.hpp).
#include "modules/ffn_sublayer.hpp"

#include <algorithm>
#include <string>

#include "backends/cpu/activation.hpp"
#include "core/buffer_pool.hpp"
#include "core/thread_pool.hpp"
#include "modules/ffn_access.hpp"
#include "ops/norm.hpp"

namespace ffn::nn {

FfnSublayer::FfnSublayer(FeedForward fused) : cfg_(fused.config()), fused_(std::move(fused)) {}

FfnSublayer::FfnSublayer(const Config& cfg, std::vector<float> norm_weight, std::vector<float> norm_bias,
                         Linear up_gate, Linear down, std::vector<float> post_norm_weight)
    : cfg_(cfg), norm_w_(std::move(norm_weight)), norm_b_(std::move(norm_bias)),
      post_norm_w_(std::move(post_norm_weight)), up_gate_(std::move(up_gate)), down_(std::move(down)) {
  cfg_.validate();
  const int64_t d = cfg_.d_model, F = cfg_.d_ff, parts = is_gated(cfg_.activation) ? 2 : 1;
  if (cfg_.norm != NormPlacement::pre)
    throw Error("FFN sublayer on separate products: norm placement " + std::string(to_string(cfg_.norm)) +
                ", expected pre");
  if (int64_t(norm_w_.size()) != d || (cfg_.norm_type == NormType::layernorm && int64_t(norm_b_.size()) != d))
    throw Error("FFN sublayer: the norm's weights have " + std::to_string(norm_w_.size()) + " values, expected " +
                std::to_string(d));
  if (!post_norm_w_.empty() && int64_t(post_norm_w_.size()) != d)
    throw Error("FFN sublayer: the post-norm's weights have " + std::to_string(post_norm_w_.size()) +
                " values, expected " + std::to_string(d));
  if (up_gate_.k() != d || up_gate_.m() != parts * F || down_.k() != F || down_.m() != d)
    throw Error("FFN sublayer: products [" + std::to_string(up_gate_.m()) + ", " + std::to_string(up_gate_.k()) +
                "] and [" + std::to_string(down_.m()) + ", " + std::to_string(down_.k()) + "], expected [" +
                std::to_string(parts * F) + ", " + std::to_string(d) + "] and [" + std::to_string(d) + ", " +
                std::to_string(F) + "]");
}

void FfnSublayer::forward(const Context& ctx, const RunOptions& opts, const float* x, int64_t n, float* y,
                          QActs* acts) const {
  if (fused_) {
    detail::FfnAccess::forward(*fused_, ctx, x, y, Shape::tokens(n), opts);  // on the caller's context
    return;
  }
  const int64_t d = cfg_.d_model, F = cfg_.d_ff;
  const bool gated = is_gated(cfg_.activation);
  const int64_t width = gated ? 2 * F : F;
  // One block from the buffer pool for the call's activations (a step of
  // generation asks for the same size again at every layer), each element
  // written before it is read.
  std::vector<float, PoolAllocator<float>> scratch(size_t(n * (2 + d + width + F)));
  float* const mean = scratch.data();
  float* const rstd = mean + n;
  float* const h = rstd + n;
  float* const ug = h + n * d;
  float* const hid = ug + n * width;
  norm_forward(ctx, cfg_.norm_type, cfg_.eps, x, n, d, norm_w_.data(), norm_b_.empty() ? nullptr : norm_b_.data(), h,
               mean, rstd);
  const Linear::Run run{.training = false, .acts = acts};
  up_gate_.forward(ctx, h, n, ug, run);
  const Unit unit = unit_of(cfg_.activation);
  const KernelConfig& kc = ctx.kernels();
  const auto rows = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      float* row = ug + i * width;
      kc.activate(unit, row, gated ? row + F : nullptr, F, nullptr, nullptr);  // up ← act(gate) · up
      std::copy_n(row, F, hid + i * F);
    }
  };
  const int threads = ctx.threads();
  if (n > 8) parallel_range(threads, n, grain_for(n, threads), rows);
  else rows(0, n, 0);
  down_.forward(ctx, hid, n, y, run);
  if (!post_norm_w_.empty())  // in place: each row's statistics before any of it is written
    norm_forward(ctx, cfg_.norm_type, cfg_.eps, y, n, d, post_norm_w_.data(), nullptr, y, mean, rstd);
  for (int64_t i = 0; i < n * d; ++i) y[i] += x[i];
}

size_t FfnSublayer::bytes() const {
  if (fused_) {
    const Weights& w = fused_->weights();
    return 2 * (w.w1.size() + w.wg.size() + w.w2.size()) * sizeof(float);  // values and packed panels
  }
  return (norm_w_.size() + norm_b_.size() + post_norm_w_.size()) * sizeof(float) + up_gate_.bytes() + down_.bytes();
}

}  // namespace ffn::nn
