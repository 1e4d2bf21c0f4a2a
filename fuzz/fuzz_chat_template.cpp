// libFuzzer target: the chat template renderer (src/text/jinja.cpp) on
// arbitrary bytes: the template text, then (after a NUL byte, if any) the
// messages as JSON; a fixed two-turn conversation with a system message
// otherwise. Every input renders or gets ffn::Error, within the renderer's
// bounds on steps, output, sizes and nesting.
#include <cstdint>
#include <string>

#include "ffn/chat_template.hpp"
#include "ffn/types.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string text = in.substr(0, nul);
  const std::string messages = nul == std::string::npos
                                   ? R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},)"
                                     R"( {"role": "assistant", "content": "hello"}, {"role": "user", "content": "café?"}])"
                                   : in.substr(nul + 1);
  ffn::ChatRenderOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  std::tm now{};
  now.tm_year = 126;
  now.tm_mon = 10;
  now.tm_mday = 27;
  o.now = now;
  try {
    const ffn::ChatTemplate t(text, "fuzz.jinja");
    const std::string out = t.render_json(messages, o);
    if (out.size() > (size_t(16) << 20)) __builtin_trap();
  } catch (const ffn::Error&) {
  }
  return 0;
}
