// The FFN sublayer of a model's block, whatever its weights are stored as
// (issue 45), so that a model writes its FFN once:
//   - float weights (fp32, or converted to bf16/fp16/int8): ffn::FeedForward,
//     the fused products (src/ops/fused_forward.cpp);
//   - a native quant type's blocks: the same sublayer on nn::Linear products,
//       h = Norm(x)                        (pre-norm: the placement these models use)
//       u = h [W_up | W_gate]ᵀ             (one product, the rows stacked; W_up alone when not gated)
//       z = act(gate + b_g) ⊙ (up + b_1)   (the kernel set's activation epilogue, the one the fused path uses)
//       y = x + z W_downᵀ (+ b_2)
//     the biases being the products' own (nn::Linear).
// Both read the layer's Config (activation, gating, norm type and eps), so a
// new family's FFN (GELU-tanh gating, a bias) is data, not code.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backends/context.hpp"
#include "ffn/feed_forward.hpp"
#include "ops/linear.hpp"

namespace ffn::nn {

class FfnSublayer {
 public:
  // Float weights: the fused sublayer.
  explicit FfnSublayer(FeedForward fused);
  // Products on Linear layers: up_gate [(gated ? 2 : 1) · d_ff, d_model] (W_up's rows, then W_gate's),
  // down [d_model, d_ff]; norm_weight [d_model] (γ; β for LayerNorm in norm_bias).
  // post_norm_weight (Gemma 2; empty: none): a second norm of cfg's type on
  // the product's output before the residual sum, y = x + PostNorm(z W_downᵀ).
  // Error unless cfg is pre-norm and the shapes agree with it.
  FfnSublayer(const Config& cfg, std::vector<float> norm_weight, std::vector<float> norm_bias, Linear up_gate,
              Linear down, std::vector<float> post_norm_weight = {});

  // y[n, d_model] = the sublayer of x (y must not overlap x). opts: the fused path's
  // run options (threads, ISA, path); ctx: the same, for the Linear path.
  // acts: the block products' activation scratch (may be null).
  void forward(const Context& ctx, const RunOptions& opts, const float* x, int64_t n, float* y, QActs* acts) const;

  const Config& config() const { return cfg_; }
  // The fused sublayer, when the weights are float.
  const FeedForward* fused() const { return fused_ ? &*fused_ : nullptr; }
  // Whether a product holds quantized blocks.
  bool blocks() const { return up_gate_.blocks() || down_.blocks(); }
  // The bytes a token's products read (panels, scales, norm).
  size_t bytes() const;

 private:
  Config cfg_;
  std::optional<FeedForward> fused_;
  std::vector<float> norm_w_, norm_b_, post_norm_w_;
  Linear up_gate_, down_;
};

}  // namespace ffn::nn
