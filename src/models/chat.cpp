// Chat prompts (include/ffn/causal_lm.hpp: CausalLM::chat_prompt), apart
// from the model's forward pass: today ChatML from the model's template;
// issue 49 renders each family's own template here.
#include <string>

#include "ffn/causal_lm.hpp"

namespace ffn {

// ChatML: <|im_start|>role\ncontent<|im_end|>\n per message; the default
// system message is the literal text a template writes after
// "<|im_start|>system\n" (SmolLM2's: "You are a helpful AI assistant named
// SmolLM, trained by Hugging Face") when it holds no template syntax.
std::string CausalLM::chat_prompt(const std::string& message) const {
  const std::string& t = chat_template_;
  if (t.empty()) throw Error(path_ + ": the model has no chat template (give the prompt as text)");
  if (t.find("<|im_start|>") == std::string::npos || t.find("<|im_end|>") == std::string::npos)
    throw Error(path_ + ": its chat template is not ChatML (<|im_start|>role ... <|im_end|>); only ChatML templates "
                "are supported. The template begins: " + t.substr(0, 80));
  std::string out;
  const std::string sys = "<|im_start|>system\n";
  if (const size_t at = t.find(sys); at != std::string::npos) {
    const size_t end = t.find("<|im_end|>", at);
    const std::string text = t.substr(at + sys.size(), end - at - sys.size());
    if (end != std::string::npos && text.find("{{") == std::string::npos && text.find("{%") == std::string::npos &&
        text.find('\'') == std::string::npos)
      out += sys + text + "<|im_end|>\n";
  }
  return out + "<|im_start|>user\n" + message + "<|im_end|>\n<|im_start|>assistant\n";
}

}  // namespace ffn

namespace ffn {

std::vector<int32_t> CausalLM::encode_prompt(const std::string& text) const {
  if (!tok_) throw Error("the model has no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json); give token ids");
  std::vector<int32_t> ids;
  if (cfg_.add_bos && cfg_.bos >= 0) ids.push_back(int32_t(cfg_.bos));
  const std::vector<int32_t> t = tok_->encode(text);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

}  // namespace ffn
