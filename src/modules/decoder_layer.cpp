// One decoder layer for generation (src/modules/decoder_layer.hpp).
#include "modules/decoder_layer.hpp"

#include "ffn/diagnostics.hpp"

namespace ffn::nn {

void decoder_layer_step(const AttentionBlockConfig& cfg, const DecoderLayerView& w, int64_t layer, float* x, float* a,
                        float* h, int64_t n, DecoderLayerStep& step, AttentionSaved& scratch) {
  if (!step.off || !step.self || (w.cross && (!step.cross || !step.cross_off)) || (!w.ffn && !w.fused))
    throw Error("decoder layer: the step lacks its sequences, cache, memory or FFN");
  BlockRun run = step.run;
  run.causal = true;
  step.self->layer = layer;
  attention_block_forward(cfg, w.self, w.self_packed, x, a, *step.off, step.S, *step.self, scratch, false, run);
  const float* in = a;
  if (w.cross) {
    run.causal = false;
    step.cross->projected = w.cross_projected;
    attention_block_forward(cfg, *w.cross, *w.cross_packed, a, h, *step.cross_off, step.S, *step.cross, scratch, false,
                            run);
    in = h;
  }
  if (w.ffn) w.ffn->forward(*run.ctx, step.ffn_opts, in, n, x, run.acts);  // x = in + FFN(in)
  else w.fused->forward(in, x, Shape::tokens(n), step.ffn_opts);
}

}  // namespace ffn::nn
