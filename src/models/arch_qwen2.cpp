// Qwen2 as data (Qwen2ForCausalLM, Hugging Face directories): LLaMA's stack
// with biases on the Q, K and V projections (not on W_O), under LLaMA's
// tensor names. Its tokenizer.json (a Split pre-tokenizer with Qwen2's
// expression) is read as written.
//
// Not yet from GGUF: the stack would load (llama.cpp's converter leaves
// Qwen2's Q and K rows in transformers' order, so the table would not
// reorder them), but ffn's GGUF tokenizer splits text with GPT-2's
// expression, not the one tokenizer.ggml.pre = "qwen2" names, and would
// give wrong ids without a word. The GGUF entry comes with the pre-tokenizers
// (issue 48).
#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
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
  return a;
}

}  // namespace ffn::models
