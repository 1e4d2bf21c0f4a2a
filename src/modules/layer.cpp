// One transformer layer for every stack (src/modules/layer.hpp).
#include "modules/layer.hpp"

#include "core/philox.hpp"
#include "modules/ffn_access.hpp"
#include "ffn/diagnostics.hpp"

namespace ffn::nn {

namespace {

// Dropout seeds of layer l's sublayers.
uint64_t self_seed(uint64_t s, int64_t l) { return derive_seed(s, uint32_t(l), 0); }
uint64_t ffn_seed(uint64_t s, int64_t l) { return derive_seed(s, uint32_t(l), 1); }
uint64_t cross_seed(uint64_t s, int64_t l) { return derive_seed(s, uint32_t(l), 4); }

// Self-attention over the rows themselves.
const KeysValues& own_rows() {
  static const KeysValues none;
  return none;
}

}  // namespace

size_t LayerSaved::bytes() const { return self.bytes() + cross.bytes() + h.size() * sizeof(float) + ffn.bytes(); }

LayerRun layer_run(const std::vector<int64_t>& off, int64_t S, bool training, bool causal, uint64_t seed,
                   const Context& ctx, const RunOptions& opts) {
  LayerRun r;
  r.off = &off;
  r.S = S;
  r.run = BlockRun{training, causal, seed, &ctx, {}};
  r.run.bf16 = opts.compute == Compute::bf16;
  r.ffn_opts = opts;
  r.ffn_opts.threads = ctx.threads();
  return r;
}

void layer_forward(const AttentionBlockConfig& cfg, const LayerView& w, int64_t layer, const float* x, float* y,
                   float* a, float* h, int64_t n, const LayerRun& run, LayerSaved& s, bool save) {
  if (!run.off || (w.cross && !run.cross) || (!w.ffn && !w.fused) || (save && !w.fused) || !run.run.ctx)
    throw Error("layer: the call lacks its sequences, context, memory or FFN");
  const std::vector<int64_t>& off = *run.off;
  BlockRun br = run.run;
  br.seed = self_seed(run.run.seed, layer);
  if (run.attention_input) br.observe = [&](const float* v, int64_t rows) { run.attention_input(layer, v, rows); };
  if (run.ask) run.ask();
  if (run.self) run.self->layer = layer;
  attention_block_forward(cfg, w.self, w.self_packed, x, a, off, run.S, run.self ? *run.self : own_rows(), s.self,
                          save, br);
  const float* in = a;
  if (w.cross) {
    br.causal = false;
    br.seed = cross_seed(run.run.seed, layer);
    br.observe = nullptr;
    if (run.cross_attention_input)
      br.observe = [&](const float* v, int64_t rows) { run.cross_attention_input(layer, v, rows); };
    run.cross->projected = w.cross_projected;
    if (run.ask) run.ask();
    attention_block_forward(cfg, *w.cross, *w.cross_packed, a, h, run.cross_off ? *run.cross_off : off, run.S,
                            *run.cross, s.cross, save, br);
    in = h;
  }
  if (save) s.h.assign(in, in + n * cfg.d);
  if (run.ffn_input) run.ffn_input(layer, in, n);
  if (run.ask) run.ask();
  RunOptions fo = run.ffn_opts;
  fo.seed = ffn_seed(run.run.seed, layer);
  if (w.ffn) w.ffn->forward(*run.run.ctx, fo, in, n, y, run.run.acts);  // y = in + FFN(in)
  else detail::FfnAccess::forward(*w.fused, *run.run.ctx, in, y, Shape::tokens(n), fo, save ? &s.ffn : nullptr);
}

void layer_backward(const AttentionBlockConfig& cfg, const LayerView& w, int64_t layer, const LayerSaved& s, float* g,
                    float* gx, float* gh, float* dmemory, int64_t n, LayerGrads& grads, const LayerRun& run) {
  if (!run.off || !w.fused || (w.cross && (!run.cross || !grads.cross)) || !run.run.ctx)
    throw Error("layer backward: the call lacks its sequences, context, memory or float FFN");
  const std::vector<int64_t>& off = *run.off;
  float* ga = w.cross ? gh : gx;  // the gradient of the FFN sublayer's input
  detail::FfnAccess::backward(*w.fused, *run.run.ctx, s.h.data(), g, Shape::tokens(n), s.ffn, ga, grads.ffn,
                              run.ffn_opts);
  if (run.ask) run.ask();
  BlockRun br = run.run;
  if (w.cross) {
    br.causal = false;
    br.seed = cross_seed(run.run.seed, layer);
    attention_block_backward(cfg, *w.cross, run.cross_off ? *run.cross_off : off, run.S, *run.cross, s.cross, gh, gx,
                             dmemory, *grads.cross, br);
  }
  br.causal = run.run.causal;
  br.seed = self_seed(run.run.seed, layer);
  attention_block_backward(cfg, w.self, off, run.S, run.self ? *run.self : own_rows(), s.self, gx, g, nullptr,
                           grads.self, br);
}

}  // namespace ffn::nn
