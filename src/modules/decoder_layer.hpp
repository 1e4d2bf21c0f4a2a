// One decoder layer for generation (issue 46): self-attention on the paged
// KV cache (grouped-query, rotary where the layer's config says), optional
// cross-attention over an encoder's output, and the FFN sublayer:
//
//   a = SelfAttention(x)        (its norm and residual inside: attention_block.hpp)
//   h = CrossAttention(a)       (seq2seq decoders; otherwise h = a)
//   x = FFN sublayer(h)         (its norm and residual inside)
//
// The seq2seq decoder (Decoder::step: Marian, nn.TransformerDecoder) and the
// causal LM (CausalLM::extend: LLaMA and the families after it) run every
// layer through decoder_layer_step; the layer's settings come from the
// model's StackSpec (src/modules/spec.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/context.hpp"
#include "ffn/feed_forward.hpp"
#include "modules/attention_block.hpp"
#include "modules/ffn_sublayer.hpp"

namespace ffn::nn {

// A layer's parameters (views into the model's).
struct DecoderLayerView {
  AttentionBlockWeights self;
  const PackedAttention& self_packed;
  // Cross-attention (null: none): its weights, packed projections and the
  // memory's K|V already projected for this layer ([m, 2d], KeysValues::projected).
  const AttentionBlockWeights* cross = nullptr;
  const PackedAttention* cross_packed = nullptr;
  const float* cross_projected = nullptr;
  // The FFN sublayer: on any storage (ffn), or the float one of a training model (fused).
  const FfnSublayer* ffn = nullptr;
  const FeedForward* fused = nullptr;
};

// What one step gives every layer.
struct DecoderLayerStep {
  const std::vector<int64_t>* off = nullptr;  // the query rows' sequences (B + 1 offsets)
  int64_t S = 0;                              // the padded length (the cache's capacity)
  KeysValues* self = nullptr;                 // kind cache: the paged cache, rows written, lengths
  KeysValues* cross = nullptr;                // kind memory (with cross-attention)
  const std::vector<int64_t>* cross_off = nullptr;  // cross-attention's query groups (B' + 1 offsets)
  BlockRun run;                               // ctx, acts; causal is set per sublayer
  RunOptions ffn_opts;                        // the fused FFN's run options (threads, ISA, path)
};

// x [n, d] ← the layer applied to x; a and h: scratch [n, d] each (h unused
// without cross-attention).
void decoder_layer_step(const AttentionBlockConfig& cfg, const DecoderLayerView& w, int64_t layer, float* x, float* a,
                        float* h, int64_t n, DecoderLayerStep& step, AttentionSaved& scratch);

}  // namespace ffn::nn
