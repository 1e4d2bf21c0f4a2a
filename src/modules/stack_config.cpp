// The public stacks' configs and the spec, both ways (src/modules/stack_config.hpp).
#include "modules/stack_config.hpp"

#include <string>

#include "ffn/diagnostics.hpp"

namespace ffn::nn {

StackSpec stack_spec(const EncoderConfig& c, StackKind kind) {
  StackSpec s;
  s.kind = kind;
  s.d_model = c.d_model;
  s.layers = c.layers;
  s.norm.kind = c.norm_type == NormType::rmsnorm ? NormKind::rmsnorm : NormKind::layernorm;
  s.norm.sites = c.norm == NormPlacement::pre ? NormSites::pre : NormSites::post;
  s.norm.eps = c.eps;
  s.final_norm = c.final_norm;
  s.attention.heads = c.heads;
  s.attention.qkv_bias = s.attention.out_bias = c.bias;
  s.attention.causal = kind == StackKind::seq2seq_decoder;
  s.attention.cross = kind == StackKind::seq2seq_decoder;
  s.ffn.d_ff = c.d_ff;
  switch (c.activation) {
    case Activation::swiglu: s.ffn.unit = Activation::silu, s.ffn.gated = true; break;
    case Activation::geglu: s.ffn.unit = Activation::gelu, s.ffn.gated = true; break;
    case Activation::reglu: s.ffn.unit = Activation::relu, s.ffn.gated = true; break;
    case Activation::geglu_tanh: s.ffn.unit = Activation::gelu_tanh, s.ffn.gated = true; break;
    default: s.ffn.unit = c.activation;
  }
  s.ffn.bias = c.bias;
  s.dropout = c.dropout;
  return s;
}

EncoderConfig encoder_config(const StackSpec& s) {
  auto refuse = [](const std::string& what) {
    throw Error("the stack has " + what + ", which an encoder or seq2seq decoder layer does not hold");
  };
  const AttentionSpec& a = s.attention;
  if (a.kv_heads != 0 && a.kv_heads != a.heads) refuse("grouped key/value heads (attention.kv_heads)");
  if (a.head_dim != 0 && a.head_dim * a.heads != s.d_model) refuse("heads · head_dim ≠ d_model (attention.head_dim)");
  if (a.rope.enabled) refuse("rotary positions (attention.rope)");
  if (a.qk_norm) refuse("a per-head q/k norm (attention.qk_norm)");
  for (int64_t w : a.window)
    if (w != 0) refuse("a sliding window (attention.window)");
  for (int64_t w : a.local)
    if (w != 0) refuse("a local window (attention.local)");
  if (!s.norm.first_attention_norm) refuse("a first layer without its attention norm (norm.first_attention_norm)");
  if (a.softcap != 0.0f) refuse("an attention logit soft-cap (attention.softcap)");
  if (a.query_scale != 0.0f) refuse("a query scale (attention.query_scale)");
  if (a.relative_buckets != 0) refuse("a relative position bias (attention.relative_buckets)");
  if (s.norm.kind != NormKind::layernorm && s.norm.kind != NormKind::rmsnorm)
    refuse("the norm kind " + std::string(to_string(s.norm.kind)) + " (norm.kind)");
  if (s.norm.sites == NormSites::pre_and_post) refuse("norms before and after each sublayer (norm.sites)");
  if (a.qkv_bias != a.out_bias || a.qkv_bias != s.ffn.bias) refuse("biases on some projections only");
  if (a.causal != (s.kind == StackKind::seq2seq_decoder) || a.cross != (s.kind == StackKind::seq2seq_decoder))
    refuse("causal or cross-attention settings other than its kind's (attention.causal, attention.cross)");
  EncoderConfig c;
  c.d_model = s.d_model;
  c.heads = a.heads;
  c.d_ff = s.ffn.d_ff;
  c.layers = s.layers;
  c.activation = s.ffn.unit;
  if (s.ffn.gated) switch (s.ffn.unit) {
      case Activation::silu: c.activation = Activation::swiglu; break;
      case Activation::gelu: c.activation = Activation::geglu; break;
      case Activation::relu: c.activation = Activation::reglu; break;
      case Activation::gelu_tanh: c.activation = Activation::geglu_tanh; break;
      default: refuse("a gated FFN of unit " + std::string(to_string(s.ffn.unit)) + " (ffn.unit)");
    }
  c.norm = s.norm.sites == NormSites::pre ? NormPlacement::pre : NormPlacement::post;
  c.norm_type = s.norm.kind == NormKind::rmsnorm ? NormType::rmsnorm : NormType::layernorm;
  c.eps = s.norm.eps;
  c.bias = a.qkv_bias;
  c.dropout = s.dropout;
  c.final_norm = s.final_norm;
  return c;
}

}  // namespace ffn::nn
