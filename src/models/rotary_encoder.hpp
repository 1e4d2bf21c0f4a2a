// An encoder stack the public Encoder (include/ffn/encoder.hpp: the settings
// of nn.TransformerEncoder) cannot hold: rotary positions with a base per
// layer, non-causal local attention windows, a first layer whose attention
// reads its input without a norm, a gated FFN, LayerNorm without β, no
// biases — ModernBERT's (src/models/encoder_family.cpp reads its config into
// the StackSpec this runs). Inference in float32; every layer goes through
// nn::layer_forward, as every other stack's does, with that layer's
// attention settings (nn::attention_config: its window, its norm) and the
// rotary table of its base.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ffn/encoder.hpp"
#include "models/checkpoint.hpp"
#include "modules/attention_block.hpp"
#include "modules/ffn_sublayer.hpp"
#include "modules/spec.hpp"
#include "ops/rope.hpp"

namespace ffn::models {

class RotaryEncoder {
 public:
  // The layers and final norm of spec (pre-norm, rotary) from f's tensors by
  // the name table (`prefix` before each name), rotary tables for
  // `positions` positions. Error naming the tensor if one is missing or of
  // another shape; Error naming the field if the spec is not such a stack.
  static RotaryEncoder load(const nn::StackSpec& spec, const TensorSource& f, const EncoderNameTable& names,
                            const std::string& prefix, int64_t positions);

  // y [B, S, d] (rows past each sequence's length left as they are) = the
  // stack applied to x [B, S, d], each sequence on its own (positions from
  // 0, keys its own rows), as Encoder::forward: threads, ISA, interrupted and
  // the observers from opts; no causal mask, cache, training or position bias.
  void forward(const float* x, float* y, const Shape& shape, const EncoderRunOptions& opts) const;

  const nn::StackSpec& spec() const { return spec_; }
  int64_t positions() const { return positions_; }

 private:
  struct Layer {
    std::vector<float> in_w, in_b, out_w, out_b, norm_w, norm_b;
    nn::PackedAttention packed;
    std::optional<nn::FfnSublayer> ffn;
  };
  nn::StackSpec spec_;
  int64_t positions_ = 0;
  std::vector<Layer> layers_;
  std::vector<float> final_w_, final_b_;
  std::vector<nn::RopeTable> ropes_;    // one per distinct base
  std::vector<size_t> rope_of_;     // layer → its table
};

}  // namespace ffn::models
