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
// config readers and name tables.
//
// From GGUF (general.architecture "gemma2", as llama.cpp's converter writes
// it): the norms hold 1 + w already (a plain RMSNorm; the converter adds the
// 1 in float32, as transformers does), head_dim is attention.key_length, the
// soft-caps and the window are gemma2.* keys (llama.cpp's defaults 50 and 30
// where absent), and W_Q's and W_K's rows are in transformers' order. The
// file has no query_pre_attn_scalar: like llama.cpp, the query scale is
// head_dim^-½, or (d_model / heads)^-½ for the 46-layer 27B, whose
// query_pre_attn_scalar is that.
#include <cmath>

#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
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

// llama.cpp's names (src/llama-arch.cpp's LLM_ARCH_GEMMA2).
const NameTable& gemma2_gguf_names() {
  static const NameTable t = [] {
    NameTable n = llama_names(Format::gguf);
    n.qk_rows_interleaved = false;
    n.names[size_t(LMTensor::attn_post_norm)] = "blk.{L}.post_attention_norm.weight";
    n.names[size_t(LMTensor::ffn_post_norm)] = "blk.{L}.post_ffw_norm.weight";
    return n;
  }();
  return t;
}

// Gemma 2's stack beyond LLaMA's: the settings both formats share.
void gemma2_stack(const CausalLMConfig& c, nn::StackSpec& s, double softcap, double final_softcap, int64_t window) {
  s.norm.sites = nn::NormSites::pre_and_post;
  s.ffn.unit = Activation::gelu_tanh;
  s.embedding.scale = float(std::sqrt(double(c.d_model)));
  s.attention.softcap = float(softcap);
  s.embedding.final_softcap = float(final_softcap);
  if (window > 0) {
    s.attention.window.assign(size_t(c.layers), 0);
    for (int64_t l = 0; l < c.layers; l += 2) s.attention.window[size_t(l)] = window;  // the even layers
  }
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
    s.attention.qkv_bias = s.attention.out_bias = json_opt<bool>(j, "attention_bias", false, p);
    const double q = json_opt<double>(j, "query_pre_attn_scalar", 256.0, p);
    if (!(q > 0)) throw Error(p.string() + ": query_pre_attn_scalar must be positive");
    s.attention.query_scale = float(std::pow(q, -0.5));
    int64_t w = 0;
    if (!j.contains("sliding_window") || !j["sliding_window"].is_null()) {
      w = j.contains("sliding_window") ? json_get<int64_t>(j, "sliding_window", p) : 4096;
      if (w < 1) throw Error(p.string() + ": sliding_window must be at least 1, got " + std::to_string(w));
    }
    gemma2_stack(c, s, optional_setting(j, "attn_logit_softcapping", 50.0, p),
                 optional_setting(j, "final_logit_softcapping", 30.0, p), w);
    return a;
  };
  a.hf_names = &gemma2_names();
  a.from_gguf = [](const GgufFile& f) {
    const CausalLMConfig c = llama_config(f, "gemma2");
    nn::StackSpec s = llama_spec(c);
    read_gguf_rope(f, "gemma2", s);
    auto real = [&](const char* k, double fallback) {
      const std::string key = std::string("gemma2.") + k;
      return f.find(key) ? f.get_float(key) : fallback;
    };
    const int64_t w = f.find("gemma2.attention.sliding_window") ? int64_t(f.get_uint("gemma2.attention.sliding_window")) : 0;
    gemma2_stack(c, s, real("attn_logit_softcapping", 50.0), real("final_logit_softcapping", 30.0), w);
    const int64_t q = c.layers == 46 ? c.d_model / c.heads : c.head_dim;
    s.attention.query_scale = float(std::pow(double(q), -0.5));
    return ArchConfig{c, s};
  };
  a.gguf_names = &gemma2_gguf_names();
  return a;
}

}  // namespace ffn::models
