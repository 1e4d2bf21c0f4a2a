// The architecture registry (src/models/arch.hpp).
#include <string>

#include "ffn/diagnostics.hpp"
#include "models/arch.hpp"

namespace ffn::models {

namespace {
std::vector<Architecture>& registry() {
  static std::vector<Architecture> r{llama_architecture(), qwen2_architecture(), qwen3_architecture(), mistral_architecture(),
                                     gemma2_architecture(), phi3_architecture()};
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

}  // namespace ffn::models

namespace ffn {

std::string CausalLM::architecture_names() {
  std::string out;
  for (const models::Architecture& a : models::architectures()) out += (out.empty() ? "" : ", ") + a.name;
  return out;
}

}  // namespace ffn
