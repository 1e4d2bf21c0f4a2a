// libFuzzer target: ffn serve's request decoding (src/serve/api.hpp) on
// arbitrary bytes, as each endpoint's body: JSON, the typed request, and for
// chat the messages rendered by a ChatML template, as the engine would get
// them. Every refusal must be an ApiError with a status of 4xx; nothing else
// may escape (a crash, another exception, or a status outside 400..499).
#include <cstdint>
#include <string>

#include "ffn/chat_template.hpp"
#include "serve/api.hpp"

namespace {

const char* kChatML =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

template <typename Fn>
void refuse_only_as_api_error(Fn&& fn) {
  try {
    fn();
  } catch (const ffn::serve::ApiError& e) {
    if (e.status < 400 || e.status > 499) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ffn::serve;
  const std::string body(reinterpret_cast<const char*>(data), size);
  refuse_only_as_api_error([&] {
    const nlohmann::json j = parse_object(body);
    refuse_only_as_api_error([&] {
      const ChatRequest r = parse_chat(j);
      if (r.messages.empty()) __builtin_trap();  // an empty list is refused
      static const ffn::ChatTemplate t(kChatML, "fuzz");
      try {
        (void)t.render_json(r.messages.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), {});
      } catch (const ffn::Error&) {
      }
    });
    refuse_only_as_api_error([&] { (void)parse_completion(j); });
    refuse_only_as_api_error([&] { (void)parse_embeddings(j); });
    refuse_only_as_api_error([&] { (void)parse_translation(j); });
    for (const bool tei : {false, true})
      refuse_only_as_api_error([&] {
        const RerankRequest r = parse_rerank(j, tei);
        if (r.documents.empty()) __builtin_trap();  // an empty list is refused
      });
  });
  return 0;
}
