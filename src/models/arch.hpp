// The causal LM architectures as data (issue 46): per architecture, a config
// reader per checkpoint format (Hugging Face config.json, a GGUF's metadata)
// and a name table per format (src/models/checkpoint.hpp). The loader
// (src/models/causal_lm.cpp) is shared.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"
#include "models/checkpoint.hpp"

namespace ffn {
class GgufFile;
}

namespace ffn::models {

// One causal LM architecture: its name (Hugging Face config.json's
// model_type, a GGUF's general.architecture), a config reader and a name
// table per checkpoint format it comes in (null: not in that format).
struct Architecture {
  std::string name;
  CausalLMConfig (*from_hf)(const nlohmann::json& config, const std::filesystem::path& path) = nullptr;
  const NameTable* hf_names = nullptr;
  CausalLMConfig (*from_gguf)(const GgufFile& file) = nullptr;
  const NameTable* gguf_names = nullptr;
};
// The registered architectures: the built-in ones (llama), then any
// register_architecture added (a test's toy architecture; later families).
const std::vector<Architecture>& architectures();
// Adds one; Error if the name is taken.
void register_architecture(Architecture a);
// The architecture named `name` in `format`, or null.
const Architecture* find_architecture(const std::string& name, Format format);
// "\"a\", \"b\"": the names that come in `format`, for messages.
std::string architecture_names(Format format);

// LLaMA (LlamaForCausalLM; GGUF general.architecture "llama").
const NameTable& llama_names(Format format);
// config.json → the config (validated); Error naming the file and key.
CausalLMConfig llama_config(const nlohmann::json& j, const std::filesystem::path& cfg_path);
// The llama.* metadata (and token_embd's shape, the vocabulary) → the config (validated).
CausalLMConfig llama_config(const GgufFile& f);

}  // namespace ffn::models
