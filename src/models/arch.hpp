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
#include "modules/spec.hpp"

namespace ffn {
class GgufFile;
}

namespace ffn::models {

// What a config reader makes of a checkpoint: the public summary
// (CausalLM::config()) and the stack it describes (src/modules/spec.hpp),
// from which the model is built.
struct ArchConfig {
  CausalLMConfig config;
  nn::StackSpec spec;
};

// One causal LM architecture: its name (Hugging Face config.json's
// model_type, a GGUF's general.architecture), a config reader and a name
// table per checkpoint format it comes in (null: not in that format).
struct Architecture {
  std::string name;
  ArchConfig (*from_hf)(const nlohmann::json& config, const std::filesystem::path& path) = nullptr;
  const NameTable* hf_names = nullptr;
  ArchConfig (*from_gguf)(const GgufFile& file) = nullptr;
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

// Adds id (≥ 0, not there yet) to c.end_ids.
void add_end_id(CausalLMConfig& c, int64_t id);

// The built-in architectures, one file each (arch_<name>.cpp).
Architecture llama_architecture();
Architecture qwen2_architecture();
Architecture qwen3_architecture();
Architecture mistral_architecture();
Architecture gemma2_architecture();
Architecture phi3_architecture();

// LLaMA (LlamaForCausalLM; GGUF general.architecture "llama").
const NameTable& llama_names(Format format);
// LLaMA's stack: pre-RMSNorm, grouped-query causal attention with rotary
// positions (halves order), SwiGLU without biases, a final RMSNorm.
nn::StackSpec llama_spec(const CausalLMConfig& c);
// config.json → the config (validated); Error naming the file and key.
CausalLMConfig llama_config(const nlohmann::json& j, const std::filesystem::path& cfg_path);
// The config and LLaMA's spec with config.json's rope_scaling (default,
// linear, llama3; yarn and longrope recorded, refused by check_supported):
// where every LLaMA-like family's reader starts.
ArchConfig llama_arch_config(const nlohmann::json& j, const std::filesystem::path& cfg_path);
// A GGUF's <arch>.rope.scaling.* and rope_freqs.weight into the spec.
void read_gguf_rope(const GgufFile& f, const std::string& arch, nn::StackSpec& s);
// The <arch>.* metadata (llama.*, qwen2.*, ...; token_embd's shape, the
// vocabulary) → the config (validated).
CausalLMConfig llama_config(const GgufFile& f, const std::string& arch = "llama");

}  // namespace ffn::models
