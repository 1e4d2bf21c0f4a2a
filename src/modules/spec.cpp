// The transformer stack as data (src/modules/spec.hpp).
#include "modules/spec.hpp"

#include <cmath>
#include <numbers>

#include "ops/rope.hpp"

#include "ffn/diagnostics.hpp"

namespace ffn::nn {

std::string_view to_string(NormKind k) {
  switch (k) {
    case NormKind::layernorm: return "layernorm";
    case NormKind::layernorm_no_bias: return "layernorm without bias";
    case NormKind::rmsnorm: return "rmsnorm";
    case NormKind::rmsnorm_one_plus: return "rmsnorm (1 + w)";
  }
  return "?";
}

std::string_view to_string(StackKind k) {
  switch (k) {
    case StackKind::encoder: return "encoder";
    case StackKind::seq2seq_decoder: return "seq2seq decoder";
    case StackKind::causal_lm: return "causal LM";
  }
  return "?";
}

namespace {
[[noreturn]] void bad(const std::string& what) { throw Error("model spec: " + what); }
void at_least(int64_t v, int64_t lo, const char* name) {
  if (v < lo) bad(std::string(name) + " must be at least " + std::to_string(lo) + ", got " + std::to_string(v));
}
bool positive_finite(double v) { return v > 0 && std::isfinite(v); }
}  // namespace

void StackSpec::validate() const {
  at_least(d_model, 1, "d_model");
  at_least(layers, 1, "layers");
  at_least(attention.heads, 1, "attention.heads");
  at_least(attention.kv_heads, 0, "attention.kv_heads");
  at_least(attention.head_dim, 0, "attention.head_dim");
  at_least(ffn.d_ff, 1, "ffn.d_ff");
  at_least(embedding.vocab, 0, "embedding.vocab");
  if (attention.head_dim == 0 && d_model % attention.heads != 0)
    bad("d_model " + std::to_string(d_model) + " is not a multiple of attention.heads " +
        std::to_string(attention.heads));
  if (attention.heads % kv_heads() != 0)
    bad(std::to_string(attention.heads) + " query heads cannot share " + std::to_string(kv_heads()) +
        " key/value heads evenly");
  if (!(norm.eps > 0)) bad("norm.eps must be positive");
  if (!(dropout >= 0 && dropout < 1)) bad("dropout must be in [0, 1)");
  const RopeSpec& r = attention.rope;
  if (r.enabled) {
    if (!positive_finite(r.theta)) bad("attention.rope.theta must be positive");
    for (double t : r.layer_theta)
      if (!positive_finite(t)) bad("attention.rope.layer_theta must be positive");
    if (!r.layer_theta.empty() && int64_t(r.layer_theta.size()) != layers)
      bad("attention.rope.layer_theta has " + std::to_string(r.layer_theta.size()) + " entries for " +
          std::to_string(layers) + " layers");
    if (!(r.fraction > 0 && r.fraction <= 1)) bad("attention.rope.fraction must be in (0, 1]");
    if (int64_t(std::lround(head_dim() * r.fraction)) % 2 != 0)
      bad("the rotated part of a head must be even, got " + std::to_string(head_dim()) + " · " +
          std::to_string(r.fraction));
    if (!positive_finite(r.factor)) bad("attention.rope.factor must be positive");
    if (r.scaling == RopeScaling::llama3 &&
        (!positive_finite(r.low_freq_factor) || !(r.high_freq_factor > r.low_freq_factor) || r.original_context < 1))
      bad("attention.rope: llama3 scaling needs 0 < low_freq_factor < high_freq_factor and original_context >= 1");
    if (!r.freq_factors.empty() && int64_t(r.freq_factors.size()) != head_dim() / 2)
      bad("attention.rope.freq_factors has " + std::to_string(r.freq_factors.size()) + " values, expected head_dim / 2 = " +
          std::to_string(head_dim() / 2));
    for (float f : r.freq_factors)
      if (!positive_finite(f)) bad("attention.rope.freq_factors must be positive");
    if (r.scaling == RopeScaling::longrope) {
      const auto half = size_t(std::lround(head_dim() * r.fraction)) / 2;
      if (r.long_factors.size() != half || r.short_factors.size() != half)
        bad("attention.rope: longrope needs " + std::to_string(half) + " long and short factors (the rotated width / 2), got " +
            std::to_string(r.long_factors.size()) + " and " + std::to_string(r.short_factors.size()));
      for (const auto* v : {&r.long_factors, &r.short_factors})
        for (float f : *v)
          if (!positive_finite(f)) bad("attention.rope: longrope factors must be positive");
      if (r.original_context < 1) bad("attention.rope: longrope needs original_context >= 1");
    }
    if (!positive_finite(r.attention_factor)) bad("attention.rope.attention_factor must be positive");
  }
  if (r.enabled != (embedding.positions == Positions::rotary))
    bad("attention.rope.enabled and embedding.positions = rotary go together");
  if (!attention.window.empty() && int64_t(attention.window.size()) != layers)
    bad("attention.window has " + std::to_string(attention.window.size()) + " entries for " +
        std::to_string(layers) + " layers");
  for (int64_t w : attention.window)
    if (w < 0) bad("attention.window must be at least 0 (0: no window)");
  if (!attention.local.empty() && int64_t(attention.local.size()) != layers)
    bad("attention.local has " + std::to_string(attention.local.size()) + " entries for " + std::to_string(layers) +
        " layers");
  for (int64_t w : attention.local)
    if (w < 0) bad("attention.local must be at least 0 (0: global attention)");
  if (!attention.rope.layer_theta.empty() && int64_t(attention.rope.layer_theta.size()) != layers)
    bad("attention.rope.layer_theta has " + std::to_string(attention.rope.layer_theta.size()) + " entries for " +
        std::to_string(layers) + " layers");
  for (double t : attention.rope.layer_theta)
    if (!(t > 0) || !std::isfinite(t)) bad("attention.rope.layer_theta must be positive");
  if (!norm.first_attention_norm && norm.sites != NormSites::pre)
    bad("norm.first_attention_norm = false is for pre-norm stacks");
  if (!(attention.softcap >= 0) || !std::isfinite(attention.softcap)) bad("attention.softcap must be at least 0");
  if (!(attention.query_scale >= 0) || !std::isfinite(attention.query_scale))
    bad("attention.query_scale must be at least 0");
  if (!(embedding.final_softcap >= 0) || !std::isfinite(embedding.final_softcap))
    bad("embedding.final_softcap must be at least 0");
  if (!(embedding.scale > 0) || !std::isfinite(embedding.scale)) bad("embedding.scale must be positive");
  if (ffn.unit != Activation::relu && ffn.unit != Activation::gelu && ffn.unit != Activation::gelu_tanh &&
      ffn.unit != Activation::silu)
    bad("ffn.unit must be relu, gelu, gelu_tanh or silu (gating is ffn.gated), got " +
        std::string(ffn::to_string(ffn.unit)));
  if (attention.cross && kind != StackKind::seq2seq_decoder) bad("cross-attention is a seq2seq decoder's");
  if (kind == StackKind::causal_lm && !attention.causal) bad("a causal LM's self-attention is causal");
}

void StackSpec::check_supported(const std::string& who) const {
  auto refuse = [&](const std::string& what) {
    throw Error(who + ": " + what + " is not supported yet (the model's spec needs it; ffn's blocks do not run it)");
  };
  if (norm.sites == NormSites::pre_and_post && kind != StackKind::causal_lm)
    refuse("a norm after each sublayer as well as before it outside a causal LM");
  const RopeSpec& r = attention.rope;
  if (r.enabled) {
    if (r.scaling == RopeScaling::yarn) refuse("yarn rotary scaling");
    if (!r.layer_theta.empty() && kind != StackKind::encoder) refuse("a rotary base per layer outside an encoder");
    if (r.fraction != 1.0) refuse("partial rotary positions");
  }
  if (attention.qk_norm && kind != StackKind::causal_lm) refuse("per-head q/k norm outside a causal LM");
  const bool inference = kind == StackKind::causal_lm;  // the window, soft-cap and scale: generation's attention
  for (int64_t w : attention.window)
    if (w > 0 && !inference) refuse("a sliding attention window outside a causal LM");
  for (int64_t w : attention.local)
    if (w > 0 && (kind != StackKind::encoder || attention.causal)) refuse("a local attention window outside an encoder");
  if (attention.softcap > 0 && !inference) refuse("an attention logit soft-cap outside a causal LM");
  if (attention.query_scale > 0 && !inference) refuse("a query scale outside a causal LM");
  if (attention.relative_buckets > 0 && kind != StackKind::encoder) refuse("a relative position bias outside an encoder");
}

AttentionBlockConfig attention_config(const StackSpec& s, int64_t layer) {
  AttentionBlockConfig c;
  c.d = s.d_model;
  c.heads = s.attention.heads;
  c.norm = s.norm.sites == NormSites::post ? NormPlacement::post : NormPlacement::pre;
  c.norm_type = s.norm.kind == NormKind::rmsnorm || s.norm.kind == NormKind::rmsnorm_one_plus ? NormType::rmsnorm
                                                                                               : NormType::layernorm;
  c.eps = s.norm.eps;
  c.dropout = s.dropout;
  if (s.kind == StackKind::causal_lm) {
    c.head_dim = s.head_dim();
    c.kv_heads = s.kv_heads();
  }
  c.window = s.attention.window.empty() ? 0 : s.attention.window.at(size_t(layer));
  c.local = s.attention.local.empty() ? 0 : s.attention.local.at(size_t(layer));
  if (layer == 0 && !s.norm.first_attention_norm) c.norm = NormPlacement::none;
  c.softcap = s.attention.softcap;
  c.query_scale = s.attention.query_scale;
  return c;
}

Config ffn_config(const StackSpec& s) {
  Config c;
  c.d_model = s.d_model;
  c.d_ff = s.ffn.d_ff;
  switch (s.ffn.unit) {
    case Activation::silu: c.activation = s.ffn.gated ? Activation::swiglu : Activation::silu; break;
    case Activation::gelu: c.activation = s.ffn.gated ? Activation::geglu : Activation::gelu; break;
    case Activation::relu: c.activation = s.ffn.gated ? Activation::reglu : Activation::relu; break;
    case Activation::gelu_tanh: c.activation = s.ffn.gated ? Activation::geglu_tanh : Activation::gelu_tanh; break;
    default: throw Error("model spec: ffn.unit must be relu, gelu, gelu_tanh or silu");
  }
  c.bias = s.ffn.bias;
  c.norm = s.norm.sites == NormSites::post ? NormPlacement::post : NormPlacement::pre;
  c.norm_type = s.norm.kind == NormKind::rmsnorm || s.norm.kind == NormKind::rmsnorm_one_plus ? NormType::rmsnorm
                                                                                             : NormType::layernorm;
  c.eps = s.norm.eps;
  c.dropout_hidden = s.dropout;
  c.dropout_output = s.dropout;
  return c;
}

std::vector<float> rope_frequencies(const StackSpec& s) {
  const RopeSpec& r = s.attention.rope;
  std::vector<float> inv = RopeTable::frequencies(s.head_dim(), r.theta);
  const float factor = float(r.factor);
  if (r.scaling == RopeScaling::linear) {
    for (float& f : inv) f = f / factor;
  } else if (r.scaling == RopeScaling::llama3) {
    // transformers' _compute_llama3_parameters, its float32 tensor arithmetic with Python scalars as float
    const double low_wavelen = double(r.original_context) / r.low_freq_factor,
                 high_wavelen = double(r.original_context) / r.high_freq_factor;
    const float two_pi = float(2 * std::numbers::pi), old = float(r.original_context), low = float(r.low_freq_factor),
                span = float(r.high_freq_factor - r.low_freq_factor);
    for (float& f : inv) {
      const float wavelen = two_pi / f;
      const float scaled = double(wavelen) > low_wavelen ? f / factor : f;
      if (!(double(wavelen) < high_wavelen) && !(double(wavelen) > low_wavelen)) {
        const float smooth = (old / wavelen - low) / span;
        f = (1.0f - smooth) * scaled / factor + smooth * scaled;
      } else {
        f = scaled;
      }
    }
  }
  for (size_t i = 0; i < r.freq_factors.size() && i < inv.size(); ++i) inv[i] = inv[i] / r.freq_factors[i];
  return inv;
}

RopeTable rope_table(const StackSpec& s, int64_t positions) {
  const RopeSpec& r = s.attention.rope;
  if (r.scaling != RopeScaling::longrope) return RopeTable::make(positions, rope_frequencies(s));
  // transformers' Phi3LongRoPEScaledRotaryEmbedding: 1 / (factor · θ^(2i/dh)) in
  // float32; cos and sin × the attention factor; the long factors for a
  // forward pass whose last position is past the original context
  // (RopeTable::long_for; keys already in the cache keep their rotation).
  const int64_t dh = s.head_dim();
  auto inv = [&](const std::vector<float>& f) {
    std::vector<float> v(f.size());
    for (size_t i = 0; i < f.size(); ++i) v[i] = 1.0f / (f[i] * std::pow(float(r.theta), float(2 * i) / float(dh)));
    return v;
  };
  RopeTable t = RopeTable::make(positions, inv(r.short_factors));
  t.original = r.original_context;
  if (positions > r.original_context) {
    RopeTable l = RopeTable::make(positions, inv(r.long_factors));
    t.long_cos = std::move(l.cos);
    t.long_sin = std::move(l.sin);
  }
  const float m = float(r.attention_factor);
  if (m != 1.0f)
    for (auto* v : {&t.cos, &t.sin, &t.long_cos, &t.long_sin})
      for (float& x : *v) x *= m;
  return t;
}

}  // namespace ffn::nn
