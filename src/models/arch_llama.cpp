// LLaMA as data: its config readers and name tables (src/models/arch.hpp).
#include <algorithm>

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
                               },
                               true};
}  // namespace

const NameTable& llama_names(Format format) { return format == Format::gguf ? kLlamaGguf : kLlamaHf; }

namespace {
std::vector<Architecture>& registry() {
  static std::vector<Architecture> r = [] {
    Architecture llama;
    llama.name = "llama";
    llama.from_hf = [](const nlohmann::json& j, const std::filesystem::path& p) { return llama_config(j, p); };
    llama.hf_names = &kLlamaHf;
    llama.from_gguf = [](const GgufFile& f) { return llama_config(f); };
    llama.gguf_names = &kLlamaGguf;
    return std::vector<Architecture>{llama};
  }();
  return r;
}
bool comes_in(const Architecture& a, Format format) {
  return format == Format::gguf ? a.from_gguf && a.gguf_names : a.from_hf && a.hf_names;
}
}  // namespace

const std::vector<Architecture>& architectures() { return registry(); }

void register_architecture(Architecture a) {
  for (const Architecture& b : registry())
    if (b.name == a.name) throw Error("register_architecture: \"" + a.name + "\" is registered already");
  registry().push_back(std::move(a));
}

const Architecture* find_architecture(const std::string& name, Format format) {
  for (const Architecture& a : registry())
    if (a.name == name && comes_in(a, format)) return &a;
  return nullptr;
}

std::string architecture_names(Format format) {
  std::string out;
  for (const Architecture& a : registry())
    if (comes_in(a, format)) out += (out.empty() ? "\"" : ", \"") + a.name + "\"";
  return out;
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
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw Error(cfg_path.string() + ": rope_scaling " + j["rope_scaling"].dump() + " is not supported");
  if (json_opt<bool>(j, "attention_bias", false, cfg_path) || json_opt<bool>(j, "mlp_bias", false, cfg_path))
    throw Error(cfg_path.string() + ": attention_bias/mlp_bias are not supported (LLaMA has no biases)");
  if (json_opt<std::string>(j, "hidden_act", "silu", cfg_path) != "silu")
    throw Error(cfg_path.string() + ": hidden_act is " + j["hidden_act"].dump() + "; expected \"silu\" (SwiGLU)");
  c.validate();
  return c;
}

CausalLMConfig llama_config(const GgufFile& f) {
  const std::string& path = f.path();
  CausalLMConfig c;
  auto u = [&](const std::string& k) { return int64_t(f.get_uint("llama." + k)); };
  c.d_model = u("embedding_length");
  c.layers = u("block_count");
  c.d_ff = u("feed_forward_length");
  c.heads = u("attention.head_count");
  c.kv_heads = f.find("llama.attention.head_count_kv") ? u("attention.head_count_kv") : c.heads;
  c.head_dim = f.find("llama.rope.dimension_count") ? u("rope.dimension_count") : c.d_model / std::max<int64_t>(c.heads, 1);
  c.rope_theta = f.find("llama.rope.freq_base") ? f.get_float("llama.rope.freq_base") : 10000.0;
  c.eps = float(f.get_float("llama.attention.layer_norm_rms_epsilon"));
  c.context = f.find("llama.context_length") ? u("context_length") : 0;
  if (f.find("llama.rope.scaling.type") && f.get_string("llama.rope.scaling.type") != "none")
    throw Error(path + ": llama.rope.scaling.type " + f.get_string("llama.rope.scaling.type") + " is not supported");
  const GgufTensor& te = f.tensor("token_embd.weight");
  if (te.ne.size() != 2 || te.ne[0] != c.d_model)
    throw_shape_error(path, "token_embd.weight", te.ne, "[" + std::to_string(c.d_model) + ", vocabulary]",
                      "ne[0] innermost");
  c.vocab = te.ne[1];
  c.tied = !f.has("output.weight");
  if (f.find("tokenizer.ggml.bos_token_id")) c.bos = int64_t(f.get_uint("tokenizer.ggml.bos_token_id"));
  if (f.find("tokenizer.ggml.eos_token_id")) c.eos = int64_t(f.get_uint("tokenizer.ggml.eos_token_id"));
  c.validate();
  return c;
}

}  // namespace ffn::models
