// The causal LM architectures as data (issue 46): per architecture, a config
// reader per checkpoint format (Hugging Face config.json, a GGUF's metadata)
// and a name table per format (src/models/checkpoint.hpp). The loader
// (src/models/causal_lm.cpp) is shared.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"
#include "models/checkpoint.hpp"

namespace ffn {
class GgufFile;
}

namespace ffn::models {

// LLaMA (LlamaForCausalLM; GGUF general.architecture "llama").
const NameTable& llama_names(Format format);
// config.json → the config (validated); Error naming the file and key.
CausalLMConfig llama_config(const nlohmann::json& j, const std::filesystem::path& cfg_path);
// The llama.* metadata (and token_embd's shape, the vocabulary) → the config (validated).
CausalLMConfig llama_config(const GgufFile& f);

}  // namespace ffn::models
