// Gemma 2 as data (Gemma2ForCausalLM, Hugging Face directories): LLaMA's
// attention and gated FFN with
//   - RMSNorms scaling by (1 + w), before and after each sublayer
//     (input_layernorm → attention → post_attention_layernorm, then
//     pre_feedforward_layernorm → FFN → post_feedforward_layernorm);
//   - GELU-tanh gating (hidden_activation gelu_pytorch_tanh);
//   - the embedding multiplied by √hidden_size (in float32);
//   - the attention logits scaled by query_pre_attn_scalar^-½ and capped,
//     c·tanh(s / c) with c = attn_logit_softcapping, and the final logits
//     capped with final_logit_softcapping;
//   - a sliding window of sliding_window keys on the even layers;
//   - head_dim from the config (not hidden_size / heads), a tied head.
// All of it is fields of the spec (src/modules/spec.hpp); this file is its
// config reader and name table.
#include <cmath>

#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
#include "models/arch.hpp"

namespace ffn::models {

namespace {
// LLaMA's Hugging Face names but three: Gemma 2's post_attention_layernorm is
// the norm after the attention, and the FFN has its own before and after.
const NameTable& gemma2_names() {
  static const NameTable t = [] {
    NameTable n = llama_names(Format::safetensors);
    n.names[size_t(LMTensor::ffn_norm)] = "model.layers.{L}.pre_feedforward_layernorm.weight";
    n.names[size_t(LMTensor::attn_post_norm)] = "model.layers.{L}.post_attention_layernorm.weight";
    n.names[size_t(LMTensor::ffn_post_norm)] = "model.layers.{L}.post_feedforward_layernorm.weight";
    return n;
  }();
  return t;
}

// A setting Gemma2Config defaults when config.json leaves it out (`fallback`)
// and turns off when it is null (0).
double optional_setting(const nlohmann::json& j, const char* key, double fallback, const std::filesystem::path& p) {
  if (!j.contains(key)) return fallback;
  return j[key].is_null() ? 0.0 : json_get<double>(j, key, p);
}
}  // namespace

Architecture gemma2_architecture() {
  Architecture a;
  a.name = "gemma2";
  a.from_hf = [](const nlohmann::json& j, const std::filesystem::path& p) {
    nlohmann::json k = j;  // LLaMA's reader on Gemma 2's keys: the activation is hidden_activation
    const std::string act = json_opt<std::string>(j, "hidden_activation", "gelu_pytorch_tanh", p);
    if (act != "gelu_pytorch_tanh")
      throw Error(p.string() + ": hidden_activation is \"" + act + "\"; expected \"gelu_pytorch_tanh\"");
    k["hidden_act"] = "silu";
    k["tie_word_embeddings"] = json_opt<bool>(j, "tie_word_embeddings", true, p);
    if (!k.contains("head_dim") || k["head_dim"].is_null()) k["head_dim"] = 256;  // Gemma2Config's default
    ArchConfig a = llama_arch_config(k, p);
    const CausalLMConfig& c = a.config;
    nn::StackSpec& s = a.spec;
    s.norm.kind = nn::NormKind::rmsnorm_one_plus;
    s.norm.sites = nn::NormSites::pre_and_post;
    s.ffn.unit = Activation::gelu_tanh;
    s.embedding.scale = float(std::sqrt(double(c.d_model)));
    s.attention.qkv_bias = s.attention.out_bias = json_opt<bool>(j, "attention_bias", false, p);
    const double q = json_opt<double>(j, "query_pre_attn_scalar", 256.0, p);
    if (!(q > 0)) throw Error(p.string() + ": query_pre_attn_scalar must be positive");
    s.attention.query_scale = float(std::pow(q, -0.5));
    s.attention.softcap = float(optional_setting(j, "attn_logit_softcapping", 50.0, p));
    s.embedding.final_softcap = float(optional_setting(j, "final_logit_softcapping", 30.0, p));
    if (!j.contains("sliding_window") || !j["sliding_window"].is_null()) {
      const int64_t w = j.contains("sliding_window") ? json_get<int64_t>(j, "sliding_window", p) : 4096;
      if (w < 1) throw Error(p.string() + ": sliding_window must be at least 1, got " + std::to_string(w));
      s.attention.window.assign(size_t(c.layers), 0);
      for (int64_t l = 0; l < c.layers; l += 2) s.attention.window[size_t(l)] = w;  // the even layers
    }
    return a;
  };
  a.hf_names = &gemma2_names();
  return a;
}

}  // namespace ffn::models
