// Qwen2 as data (Qwen2ForCausalLM; GGUF general.architecture "qwen2"):
// LLaMA's stack with biases on the Q, K and V projections (not on W_O),
// under LLaMA's tensor names. llama.cpp's converter leaves Qwen2's W_Q and
// W_K rows in transformers' order (its qwen2 graph rotates NeoX-style), so
// the GGUF table does not reorder them. The tokenizer: tokenizer.json's
// (NFC, a Split with Qwen2's expression) or a GGUF's tokenizer.ggml.pre
// "qwen2" (src/text/bpe.cpp's table, the same).
#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "models/arch.hpp"

namespace ffn::models {

Architecture qwen2_architecture() {
  Architecture a;
  a.name = "qwen2";
  a.from_hf = [](const nlohmann::json& j, const std::filesystem::path& p) {
    ArchConfig a = llama_arch_config(j, p);
    a.spec.attention.qkv_bias = true;
    // Qwen2Config's use_sliding_window has two meanings in transformers
    // 4.46: its flash-attention path windows the layers from
    // max_window_layers on, its eager and SDPA paths every layer. Refused
    // rather than guessed (Qwen2 releases ship it false).
    if (json_opt<bool>(j, "use_sliding_window", false, p))
      throw Error(p.string() + ": use_sliding_window is true, which transformers runs two ways (every layer, or the "
                  "layers from max_window_layers on); not supported");
    return a;
  };
  a.hf_names = &llama_names(Format::safetensors);
  a.from_gguf = [](const GgufFile& f) {
    const CausalLMConfig c = llama_config(f, "qwen2");
    nn::StackSpec s = llama_spec(c);
    read_gguf_rope(f, "qwen2", s);
    s.attention.qkv_bias = true;
    return ArchConfig{c, s};
  };
  static const NameTable kQwen2Gguf{llama_names(Format::gguf).names, false};
  a.gguf_names = &kQwen2Gguf;
  return a;
}

}  // namespace ffn::models
