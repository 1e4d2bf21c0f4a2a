// Mistral as data (MistralForCausalLM, Hugging Face directories): LLaMA's
// stack and names, every layer's self-attention over a sliding window of
// config.json's sliding_window keys (null: none). llama.cpp's converter
// writes Mistral files as architecture "llama", which the LLaMA entry reads.
#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
#include "models/arch.hpp"

namespace ffn::models {

Architecture mistral_architecture() {
  Architecture a;
  a.name = "mistral";
  a.from_hf = [](const nlohmann::json& j, const std::filesystem::path& p) {
    ArchConfig a = llama_arch_config(j, p);
    const CausalLMConfig& c = a.config;
    nn::StackSpec& s = a.spec;
    // MistralConfig's default is 4096 when the key is left out; null: no window.
    if (!j.contains("sliding_window") || !j["sliding_window"].is_null()) {
      const int64_t w = j.contains("sliding_window") ? json_get<int64_t>(j, "sliding_window", p) : 4096;
      if (w < 1) throw Error(p.string() + ": sliding_window must be at least 1, got " + std::to_string(w));
      s.attention.window.assign(size_t(c.layers), w);
    }
    return a;
  };
  a.hf_names = &llama_names(Format::safetensors);
  return a;
}

}  // namespace ffn::models
