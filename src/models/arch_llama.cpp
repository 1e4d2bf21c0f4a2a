// LLaMA as data: its config readers and name tables (src/models/arch.hpp).
#include <algorithm>
#include <cmath>

#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "models/arch.hpp"

namespace ffn::models {

namespace {
constexpr NameTable kLlamaHf{{
    "model.embed_tokens.weight",                        // embed
    "model.norm.weight",                                // norm
    "lm_head.weight",                                   // head
    "model.layers.{L}.input_layernorm.weight",          // attn_norm
    "model.layers.{L}.self_attn.q_proj.weight",         // q
    "model.layers.{L}.self_attn.k_proj.weight",         // k
    "model.layers.{L}.self_attn.v_proj.weight",         // v
    "model.layers.{L}.self_attn.o_proj.weight",         // o
    "model.layers.{L}.post_attention_layernorm.weight", // ffn_norm
    "model.layers.{L}.mlp.gate_proj.weight",            // gate
    "model.layers.{L}.mlp.up_proj.weight",              // up
    "model.layers.{L}.mlp.down_proj.weight",            // down
    "model.layers.{L}.self_attn.q_proj.bias",           // q_bias (attention_bias)
    "model.layers.{L}.self_attn.k_proj.bias",           // k_bias
    "model.layers.{L}.self_attn.v_proj.bias",           // v_bias
    "model.layers.{L}.self_attn.o_proj.bias",           // o_bias
    nullptr,                                            // attn_post_norm (Gemma 2's table)
    nullptr,                                            // ffn_post_norm
    "model.layers.{L}.self_attn.q_norm.weight",         // q_norm (qk_norm: Qwen3)
    "model.layers.{L}.self_attn.k_norm.weight",         // k_norm
}};
// llama.cpp's names (src/llama-arch.cpp); its converter permutes W_Q's and
// W_K's rows into its rotary order.
constexpr NameTable kLlamaGguf{{
                                   "token_embd.weight",         // embed
                                   "output_norm.weight",        // norm
                                   "output.weight",             // head
                                   "blk.{L}.attn_norm.weight",  // attn_norm
                                   "blk.{L}.attn_q.weight",     // q
                                   "blk.{L}.attn_k.weight",     // k
                                   "blk.{L}.attn_v.weight",     // v
                                   "blk.{L}.attn_output.weight",  // o
                                   "blk.{L}.ffn_norm.weight",   // ffn_norm
                                   "blk.{L}.ffn_gate.weight",   // gate
                                   "blk.{L}.ffn_up.weight",     // up
                                   "blk.{L}.ffn_down.weight",   // down
                                   "blk.{L}.attn_q.bias",       // q_bias
                                   "blk.{L}.attn_k.bias",       // k_bias
                                   "blk.{L}.attn_v.bias",       // v_bias
                                   "blk.{L}.attn_output.bias",  // o_bias
                                   nullptr,                     // attn_post_norm
                                   nullptr,                     // ffn_post_norm
                                   "blk.{L}.attn_q_norm.weight",  // q_norm
                                   "blk.{L}.attn_k_norm.weight",  // k_norm
                               },
                               true};
}  // namespace

const NameTable& llama_names(Format format) { return format == Format::gguf ? kLlamaGguf : kLlamaHf; }

nn::StackSpec llama_spec(const CausalLMConfig& c) {
  nn::StackSpec s;
  s.kind = nn::StackKind::causal_lm;
  s.d_model = c.d_model;
  s.layers = c.layers;
  s.norm = {nn::NormKind::rmsnorm, nn::NormSites::pre, c.eps};
  s.final_norm = true;
  s.attention.heads = c.heads;
  s.attention.kv_heads = c.kv_heads;
  s.attention.head_dim = c.head_dim;
  s.attention.causal = true;
  s.attention.rope.enabled = true;
  s.attention.rope.theta = c.rope_theta;
  s.ffn = {c.d_ff, Activation::silu, true, false};
  s.embedding.vocab = c.vocab;
  s.embedding.positions = nn::Positions::rotary;
  s.embedding.max_positions = c.context;
  s.embedding.tied_head = c.tied;
  return s;
}

CausalLMConfig llama_config(const nlohmann::json& j, const std::filesystem::path& cfg_path) {
  CausalLMConfig c;
  c.vocab = json_get<int64_t>(j, "vocab_size", cfg_path);
  c.d_model = json_get<int64_t>(j, "hidden_size", cfg_path);
  c.layers = json_get<int64_t>(j, "num_hidden_layers", cfg_path);
  c.heads = json_get<int64_t>(j, "num_attention_heads", cfg_path);
  c.kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                   ? json_get<int64_t>(j, "num_key_value_heads", cfg_path)
                   : c.heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? json_get<int64_t>(j, "head_dim", cfg_path)
                                                                  : (c.heads > 0 ? c.d_model / c.heads : 0);
  c.d_ff = json_get<int64_t>(j, "intermediate_size", cfg_path);
  c.rope_theta = json_opt<double>(j, "rope_theta", 10000.0, cfg_path);
  c.eps = float(json_opt<double>(j, "rms_norm_eps", 1e-6, cfg_path));
  c.tied = json_opt<bool>(j, "tie_word_embeddings", false, cfg_path);
  c.context = json_opt<int64_t>(j, "max_position_embeddings", 0, cfg_path);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos = j["bos_token_id"].get<int64_t>();
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos = e.get<int64_t>();
    else if (e.is_array() && !e.empty() && e[0].is_number_integer()) c.eos = e[0].get<int64_t>();
  }
  // The end ids: config.json's eos_token_id (one or a list), then
  // generation_config.json's, which transformers' generate stops at.
  add_end_id(c, c.eos);
  auto add_list = [&](const nlohmann::json& e) {
    if (e.is_number_integer()) add_end_id(c, e.get<int64_t>());
    else if (e.is_array())
      for (const auto& v : e)
        if (v.is_number_integer()) add_end_id(c, v.get<int64_t>());
  };
  if (j.contains("eos_token_id")) add_list(j["eos_token_id"]);
  const std::filesystem::path gen = cfg_path.parent_path() / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen, ec)) {
    const nlohmann::json g = read_json(gen);
    if (g.is_object() && g.contains("eos_token_id")) add_list(g["eos_token_id"]);
  }
  if (json_opt<bool>(j, "mlp_bias", false, cfg_path))
    throw Error(cfg_path.string() + ": mlp_bias is not supported (the FFN's products have no biases here)");
  if (json_opt<std::string>(j, "hidden_act", "silu", cfg_path) != "silu")
    throw Error(cfg_path.string() + ": hidden_act is " + j["hidden_act"].dump() + "; expected \"silu\" (SwiGLU)");
  c.validate();
  return c;
}

void add_end_id(CausalLMConfig& c, int64_t id) {
  if (id >= 0 && std::find(c.end_ids.begin(), c.end_ids.end(), id) == c.end_ids.end()) c.end_ids.push_back(id);
}

ArchConfig llama_arch_config(const nlohmann::json& j, const std::filesystem::path& p) {
  ArchConfig a{llama_config(j, p), {}};
  a.spec = llama_spec(a.config);
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return a;
  // transformers' rope_scaling: {"rope_type" (or "type"): ..., its parameters}
  const nlohmann::json& r = j["rope_scaling"];
  auto bad = [&](const std::string& what) {
    throw Error(p.string() + ": rope_scaling " + r.dump() + ": " + what);
  };
  if (!r.is_object()) bad("expected an object");
  const char* type_key = r.contains("rope_type") ? "rope_type" : r.contains("type") ? "type" : nullptr;
  if (type_key && !r[type_key].is_string()) bad(std::string(type_key) + " is not a string");
  const std::string type = type_key ? r[type_key].get<std::string>() : "";
  nn::RopeSpec& rope = a.spec.attention.rope;
  auto num = [&](const char* key, double fallback) {
    if (!r.contains(key)) return fallback;
    if (!r[key].is_number()) bad(std::string(key) + " is not a number");
    return r[key].get<double>();
  };
  if (type == "default") return a;
  if (type == "linear") {
    rope.scaling = nn::RopeScaling::linear;
    rope.factor = num("factor", 1.0);
  } else if (type == "llama3") {
    rope.scaling = nn::RopeScaling::llama3;
    rope.factor = num("factor", 8.0);
    rope.low_freq_factor = num("low_freq_factor", 1.0);
    rope.high_freq_factor = num("high_freq_factor", 4.0);
    const double ctx = num("original_max_position_embeddings", 8192);
    if (!(ctx >= 1 && ctx <= double(int64_t(1) << 40))) bad("original_max_position_embeddings is out of range");
    rope.original_context = int64_t(ctx);
  } else if (type == "yarn") {
    rope.scaling = nn::RopeScaling::yarn;
  } else if (type == "longrope" || type == "su") {
    // Phi-3's: per-frequency factors, the original context (config.json's
    // original_max_position_embeddings, or the rope_scaling's), and the
    // attention factor (given, or √(1 + ln(max / original) / ln original)).
    rope.scaling = nn::RopeScaling::longrope;
    for (auto [key, v] : {std::pair{"short_factor", &rope.short_factors}, std::pair{"long_factor", &rope.long_factors}}) {
      if (!r.contains(key) || !r[key].is_array()) bad(std::string(key) + " is missing or not a list");
      for (const auto& x : r[key]) {
        if (!x.is_number()) bad(std::string(key) + " holds a non-number");
        v->push_back(x.get<float>());
      }
    }
    const double orig = j.contains("original_max_position_embeddings")
                            ? json_get<double>(j, "original_max_position_embeddings", p)
                            : num("original_max_position_embeddings", 0);
    if (!(orig >= 1 && orig <= double(int64_t(1) << 40))) bad("original_max_position_embeddings is missing or out of range");
    rope.original_context = int64_t(orig);
    const double scale = double(a.config.context) / orig;
    rope.attention_factor = r.contains("attention_factor") ? num("attention_factor", 1.0)
                            : scale <= 1.0                 ? 1.0
                                                           : std::sqrt(1.0 + std::log(scale) / std::log(orig));
  } else {
    bad("rope_type \"" + type + "\" is not one of default, linear, llama3, yarn, longrope");
  }
  return a;
}

void read_gguf_rope(const GgufFile& f, const std::string& arch, nn::StackSpec& s) {
  nn::RopeSpec& rope = s.attention.rope;
  // A rotary width below the head's (Phi-4-mini, NeoX): partial rotation,
  // which the spec refuses by name until the rotation runs it.
  if (f.find(arch + ".rope.dimension_count")) {
    const int64_t dims = int64_t(f.get_uint(arch + ".rope.dimension_count"));
    if (dims != s.head_dim() && s.head_dim() > 0) rope.fraction = double(dims) / double(s.head_dim());
  }
  const std::string key = arch + ".rope.scaling.type";
  const std::string type = f.find(key) ? f.get_string(key) : "none";
  if (type == "linear") {
    rope.scaling = nn::RopeScaling::linear;
    rope.factor = f.get_float(arch + ".rope.scaling.factor");
  } else if (type == "yarn") {
    rope.scaling = nn::RopeScaling::yarn;
  } else if (type != "none") {
    throw Error(f.path() + ": " + key + " is \"" + type + "\"; expected none, linear or yarn");
  }
  // llama.cpp's converter writes Llama 3's rule as a factor per frequency.
  if (f.has("rope_freqs.weight")) {
    const GgufTensor& t = f.tensor("rope_freqs.weight");
    const int64_t half = s.head_dim() / 2;
    if (t.ne.size() != 1 || t.ne[0] != half)
      throw_shape_error(f.path(), "rope_freqs.weight", t.ne, "[" + std::to_string(half) + "] (head_dim / 2)",
                        "ne[0] innermost");
    rope.freq_factors = f.read_f32("rope_freqs.weight");
  }
}

CausalLMConfig llama_config(const GgufFile& f, const std::string& arch) {
  const std::string& path = f.path();
  const std::string pre = arch + ".";
  CausalLMConfig c;
  auto u = [&](const std::string& k) { return int64_t(f.get_uint(pre + k)); };
  c.d_model = u("embedding_length");
  c.layers = u("block_count");
  c.d_ff = u("feed_forward_length");
  c.heads = u("attention.head_count");
  c.kv_heads = f.find(pre + "attention.head_count_kv") ? u("attention.head_count_kv") : c.heads;
  // A head's width: attention.key_length (Gemma's head_dim ≠ d_model / heads),
  // else the rotary width (LLaMA's converter writes only that), else
  // d_model / heads; phi3's reader takes d_model / heads (its rotary width
  // may be a part of the head).
  c.head_dim = f.find(pre + "attention.key_length")                       ? u("attention.key_length")
               : arch != "phi3" && f.find(pre + "rope.dimension_count") ? u("rope.dimension_count")
                                                                          : c.d_model / std::max<int64_t>(c.heads, 1);
  c.rope_theta = f.find(pre + "rope.freq_base") ? f.get_float(pre + "rope.freq_base") : 10000.0;
  c.eps = float(f.get_float(pre + "attention.layer_norm_rms_epsilon"));
  c.context = f.find(pre + "context_length") ? u("context_length") : 0;
  const GgufTensor& te = f.tensor("token_embd.weight");
  if (te.ne.size() != 2 || te.ne[0] != c.d_model)
    throw_shape_error(path, "token_embd.weight", te.ne, "[" + std::to_string(c.d_model) + ", vocabulary]",
                      "ne[0] innermost");
  c.vocab = te.ne[1];
  c.tied = !f.has("output.weight");
  if (f.find("tokenizer.ggml.bos_token_id")) c.bos = int64_t(f.get_uint("tokenizer.ggml.bos_token_id"));
  if (f.find("tokenizer.ggml.eos_token_id")) c.eos = int64_t(f.get_uint("tokenizer.ggml.eos_token_id"));
  add_end_id(c, c.eos);
  for (const char* k : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (f.find(k)) add_end_id(c, int64_t(f.get_uint(k)));
  c.validate();
  return c;
}

}  // namespace ffn::models

namespace ffn::models {

Architecture llama_architecture() {
  Architecture llama;
  llama.name = "llama";
  llama.from_hf = [](const nlohmann::json& j, const std::filesystem::path& p) {
    ArchConfig a = llama_arch_config(j, p);
    // LlamaConfig.attention_bias: Q, K, V and O projections with biases.
    a.spec.attention.qkv_bias = a.spec.attention.out_bias = json_opt<bool>(j, "attention_bias", false, p);
    return a;
  };
  llama.hf_names = &kLlamaHf;
  llama.from_gguf = [](const GgufFile& f) {
    const CausalLMConfig c = llama_config(f);
    nn::StackSpec s = llama_spec(c);
    read_gguf_rope(f, "llama", s);
    // llama.cpp's llama graph adds bq, bk, bv and bo where the file has them.
    s.attention.qkv_bias = f.has("blk.0.attn_q.bias");
    s.attention.out_bias = f.has("blk.0.attn_output.bias");
    return ArchConfig{c, s};
  };
  llama.gguf_names = &kLlamaGguf;
  return llama;
}

}  // namespace ffn::models
