// One transformer layer for every stack (issue 63): the encoder (BERT,
// nn.TransformerEncoder, Marian's encoder), the seq2seq decoder (training's
// forward and generation's step: Marian, nn.TransformerDecoder) and the
// causal LM (CausalLM::extend: LLaMA and the families after it) run each of
// their layers through layer_forward, and training runs its gradient back
// through layer_backward, beside it:
//
//   a = SelfAttention(x)        (its norm and residual inside: attention_block.hpp)
//   h = CrossAttention(a)       (with cross-attention: seq2seq decoders; otherwise h = a)
//   y = FFN sublayer(h)         (its norm and residual inside)
//
// The stack's StackSpec (src/modules/spec.hpp) gives the sublayers'
// settings; the call says the rest: whether self-attention is causal
// (BlockRun::causal), where its keys come from (the rows themselves, or the
// paged KV cache) and whether there is cross-attention (LayerView::cross).
// Dropout's seeds are the call's, derived per layer and sublayer (self 0,
// FFN 1, cross 4), so a layer's randomness does not depend on the stack.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backends/context.hpp"
#include "ffn/feed_forward.hpp"
#include "modules/attention_block.hpp"
#include "modules/ffn_sublayer.hpp"

namespace ffn::nn {

// A layer's parameters (views into the model's).
struct LayerView {
  AttentionBlockWeights self;
  const PackedAttention& self_packed;
  // Cross-attention (null: none): its weights, packed projections and, in
  // generation, the memory's K|V already projected for this layer ([m, 2d],
  // KeysValues::projected; null: projected from the memory rows).
  const AttentionBlockWeights* cross = nullptr;
  const PackedAttention* cross_packed = nullptr;
  const float* cross_projected = nullptr;
  // The FFN sublayer: on any storage (ffn), or the float one of a training model (fused).
  const FfnSublayer* ffn = nullptr;
  const FeedForward* fused = nullptr;
};

// What a layer's forward keeps for its backward (save = true).
struct LayerSaved {
  AttentionSaved self, cross;
  std::vector<float> h;  // [n, d] the FFN sublayer's input
  ForwardCache ffn;
  size_t bytes() const;
};

// What one call gives every layer.
struct LayerRun {
  const std::vector<int64_t>* off = nullptr;  // the query rows' sequences (B + 1 offsets)
  int64_t S = 0;                              // the padded length (the cache's capacity in generation)
  KeysValues* self = nullptr;                 // null: the rows themselves; kind cache: the paged cache
  KeysValues* cross = nullptr;                // kind memory (with cross-attention)
  const std::vector<int64_t>* cross_off = nullptr;  // cross-attention's query groups (null: off)
  // ctx, acts, training, the self-attention's causal flag and the call's
  // dropout seed (each sublayer's is derived from it and the layer).
  BlockRun run;
  RunOptions ffn_opts;  // the FFN sublayer's run options (threads, ISA, path; seed: derived)
  // Observers (null: none), called from the calling thread with each
  // sublayer's input rows: the self-attention's and cross-attention's
  // projection inputs and the FFN sublayer's input.
  std::function<void(int64_t layer, const float*, int64_t n)> attention_input, cross_attention_input, ffn_input;
  // Asked before each sublayer, forward and backward (RunOptions::interrupted): throws to stop.
  std::function<void()> ask;
};

// A stack's call over the rows of `off` (padded length S): training, the
// self-attention's causal flag and the call's seed in run (ctx: the call's
// context), the FFN's options from opts with the context's threads.
LayerRun layer_run(const std::vector<int64_t>& off, int64_t S, bool training, bool causal, uint64_t seed,
                   const Context& ctx, const RunOptions& opts);

// y [n, d] ← the layer applied to x [n, d] (y may be x); a and h: scratch
// [n, d] each (h unused without cross-attention). save: keep in s what
// layer_backward needs (otherwise s is scratch, reused by the next layer).
void layer_forward(const AttentionBlockConfig& cfg, const LayerView& w, int64_t layer, const float* x, float* y,
                   float* a, float* h, int64_t n, const LayerRun& run, LayerSaved& s, bool save);

// A layer's gradients (the FFN's into ffn; cross: with cross-attention).
struct LayerGrads {
  AttentionBlockGrads self;
  AttentionBlockGrads* cross = nullptr;
  Weights& ffn;
};

// g [n, d]: on entry the gradient of the layer's output, on return of its
// input, from what a saving layer_forward kept in s (run as it was given:
// training, causal, seed, the memory's keys). gx, gh: scratch [n, d] each
// (gh unused without cross-attention); dmemory [m, d] gets the memory's
// gradient added. The gradients are overwritten.
void layer_backward(const AttentionBlockConfig& cfg, const LayerView& w, int64_t layer, const LayerSaved& s, float* g,
                    float* gx, float* gh, float* dmemory, int64_t n, LayerGrads& grads, const LayerRun& run);

}  // namespace ffn::nn
