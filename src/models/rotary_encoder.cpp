// ModernBERT's stack (src/models/rotary_encoder.hpp).
#include "models/rotary_encoder.hpp"

#include <algorithm>

#include "backends/context.hpp"
#include "core/positions.hpp"
#include "ffn/feed_forward.hpp"
#include "modules/layer.hpp"
#include "ops/norm.hpp"

namespace ffn::models {

RotaryEncoder RotaryEncoder::load(const nn::StackSpec& s, const TensorSource& f, const EncoderNameTable& names,
                                  const std::string& pre, int64_t positions) {
  s.validate();
  if (s.kind != nn::StackKind::encoder || !s.attention.rope.enabled || s.norm.sites != nn::NormSites::pre ||
      !s.final_norm || !s.ffn.gated || s.attention.causal || s.head_dim() * s.attention.heads != s.d_model ||
      s.kv_heads() != s.attention.heads || s.attention.qk_norm || s.attention.relative_buckets > 0 ||
      (s.norm.kind != nn::NormKind::layernorm && s.norm.kind != nn::NormKind::layernorm_no_bias))
    throw Error(f.path() + ": the rotary encoder runs pre-LayerNorm encoders with rotary positions, a gated FFN, a "
                "final norm and d_model / heads wide heads (ModernBERT's)");
  RotaryEncoder e;
  e.spec_ = s;
  e.positions_ = positions;
  const int64_t d = s.d_model, F = s.ffn.d_ff;
  const bool norm_bias = s.norm.kind == nn::NormKind::layernorm;
  using T = EncTensor;
  auto get = [&](T t, int64_t layer, std::vector<int64_t> shape) { return f.read(pre + names.name(t, layer), shape); };
  // γ and β of a norm; β zeros where the model has none (x̂·γ + 0 is x̂·γ, bit for bit).
  auto norm = [&](T w, T b, int64_t layer, std::vector<float>& gw, std::vector<float>& gb) {
    gw = get(w, layer, {d});
    gb = norm_bias ? get(b, layer, {d}) : std::vector<float>(size_t(d), 0.0f);
  };
  const Config fc = nn::ffn_config(s);
  for (int64_t l = 0; l < s.layers; ++l) {
    Layer L;
    L.in_w = get(T::qkv, l, {3 * d, d});
    if (s.attention.qkv_bias) L.in_b = get(T::qkv_bias, l, {3 * d});
    L.out_w = get(T::o, l, {d, d});
    if (s.attention.out_bias) L.out_b = get(T::o_bias, l, {d});
    if (l > 0 || s.norm.first_attention_norm) norm(T::attn_norm, T::attn_norm_bias, l, L.norm_w, L.norm_b);
    L.packed = nn::PackedAttention::self({L.in_w, L.in_b, L.out_w, L.out_b, L.norm_w, L.norm_b}, d);
    // Wi's rows: the activation's input (transformers' `input`), then the gate it multiplies; ffn's gated FFN
    // is act(x W_gate) ⊙ (x W_1), so W_gate takes the first half and W_1 the second.
    const std::vector<float> wi = get(T::up_gate, l, {2 * F, d});
    Weights w;
    w.wg.assign(wi.begin(), wi.begin() + F * d);
    w.w1.assign(wi.begin() + F * d, wi.end());
    if (s.ffn.bias) {
      const std::vector<float> bi = get(T::up_gate_bias, l, {2 * F});
      w.bg.assign(bi.begin(), bi.begin() + F);
      w.b1.assign(bi.begin() + F, bi.end());
      w.b2 = get(T::down_bias, l, {d});
    }
    w.w2 = get(T::down, l, {d, F});
    norm(T::ffn_norm, T::ffn_norm_bias, l, w.norm_weight, w.norm_bias);
    L.ffn.emplace(FeedForward(fc, std::move(w)));
    e.layers_.push_back(std::move(L));
  }
  norm(T::final_norm, T::final_norm_bias, -1, e.final_w_, e.final_b_);
  // A rotary table per distinct base (ModernBERT: the global layers' and the local layers').
  const auto& r = s.attention.rope;
  std::vector<double> bases;
  for (int64_t l = 0; l < s.layers; ++l) {
    const double theta = r.layer_theta.empty() ? r.theta : r.layer_theta[size_t(l)];
    const size_t k = size_t(std::find(bases.begin(), bases.end(), theta) - bases.begin());
    if (k == bases.size()) {
      nn::StackSpec one = s;
      one.attention.rope.theta = theta;
      one.attention.rope.layer_theta.clear();
      bases.push_back(theta);
      e.ropes_.push_back(nn::rope_table(one, positions));
    }
    e.rope_of_.push_back(k);
  }
  return e;
}

void RotaryEncoder::forward(const float* x, float* y, const Shape& shape, const EncoderRunOptions& opts) const {
  if (shape.layout != Layout::tokens) throw Error("layout: the encoder takes the tokens layout [B, S, d_model]");
  if (opts.training || opts.causal || opts.position_bias)
    throw Error("forward: a rotary encoder (ModernBERT) runs inference only, without a causal mask or position bias");
  if (opts.compute != Compute::fp32) throw Error("forward: this encoder (rotary positions) computes in fp32 only (compute bf16 is the FFN's and BERT-style encoders')");
  if (shape.seq > positions_)
    throw Error("forward: sequences of " + std::to_string(shape.seq) + " positions, past the rotary table's " +
                std::to_string(positions_));
  std::vector<int64_t> off;
  const std::vector<int64_t> pos = nn::valid_positions(shape, &off);
  const int64_t n = int64_t(pos.size()), d = spec_.d_model;
  if (shape.positions() > 0 && (!x || !y)) throw Error("forward: x and y must not be null");
  const nn::Context ctx(opts);
  std::vector<float> cur(size_t(n * d)), next(cur.size()), a(cur.size());
  const nn::Addressing addr{d, shape.seq, Layout::tokens};
  nn::gather(x, addr, pos, cur.data());
  nn::KeysValues self;  // the rows themselves, each at its position in its sequence
  self.positions.resize(size_t(n));
  for (size_t b = 0; b + 1 < off.size(); ++b)
    for (int64_t i = off[b]; i < off[b + 1]; ++i) self.positions[size_t(i)] = i - off[b];
  nn::LayerRun lr = nn::layer_run(off, shape.seq, false, false, 0, ctx, opts);
  lr.self = &self;
  lr.attention_input = opts.attention_input;
  lr.ffn_input = opts.ffn_input;
  lr.ask = [&] {
    if (opts.interrupted && opts.interrupted()) throw Interrupted();
  };
  nn::LayerSaved scratch;
  for (int64_t l = 0; l < spec_.layers; ++l) {
    const Layer& L = layers_[size_t(l)];
    nn::AttentionBlockConfig bc = nn::attention_config(spec_, l);
    bc.rope = &ropes_[rope_of_[size_t(l)]];
    const nn::LayerView view{{L.in_w, L.in_b, L.out_w, L.out_b, L.norm_w, L.norm_b}, L.packed, nullptr, nullptr,
                             nullptr, &*L.ffn, nullptr};
    nn::layer_forward(bc, view, l, cur.data(), next.data(), a.data(), nullptr, n, lr, scratch, false);
    std::swap(cur, next);
  }
  std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
  nn::norm_forward(ctx, NormType::layernorm, spec_.norm.eps, cur.data(), n, d, final_w_.data(), final_b_.data(),
                   next.data(), mean.data(), rstd.data());
  nn::scatter(next.data(), addr, pos, shape.positions(), y);
}

}  // namespace ffn::models
