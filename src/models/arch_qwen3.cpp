// Qwen3 as data (Qwen3ForCausalLM; GGUF general.architecture "qwen3"):
// Qwen2's stack without its Q|K|V biases (attention_bias, default false),
// with an RMSNorm of each head of Q and of K before the rotation
// (self_attn.q_norm / k_norm; GGUF attn_q_norm / attn_k_norm) and head_dim
// from the config (128 in the releases, not hidden_size / heads). Rows in
// transformers' order in both formats; the tokenizer is Qwen2's.
#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "models/arch.hpp"

namespace ffn::models {

Architecture qwen3_architecture() {
  Architecture a;
  a.name = "qwen3";
  a.from_hf = [](const nlohmann::json& j, const std::filesystem::path& p) {
    ArchConfig a = qwen2_architecture().from_hf(j, p);  // its window refusal too
    a.spec.attention.qkv_bias = a.spec.attention.out_bias = json_opt<bool>(j, "attention_bias", false, p);
    a.spec.attention.qk_norm = true;
    return a;
  };
  a.hf_names = &llama_names(Format::safetensors);
  a.from_gguf = [](const GgufFile& f) {
    const CausalLMConfig c = llama_config(f, "qwen3");
    nn::StackSpec s = llama_spec(c);
    read_gguf_rope(f, "qwen3", s);
    s.attention.qkv_bias = f.has("blk.0.attn_q.bias");
    s.attention.qk_norm = true;
    return ArchConfig{c, s};
  };
  a.gguf_names = qwen2_architecture().gguf_names;  // rows in transformers' order, as Qwen2's
  return a;
}

}  // namespace ffn::models
