// libFuzzer target: the safetensors reader and the layer loader on arbitrary
// bytes. Every input must end in a result or an ffn::Error — never a crash,
// an out-of-bounds access (ASan), undefined behaviour (UBSan) or a huge
// allocation (-rss_limit_mb / -malloc_limit_mb).
#include <cstdint>

#include "ffn/ffn.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ffn::fuzz::write_file("w.safetensors", data, size);
  try {
    const ffn::SafetensorsFile f = ffn::read_safetensors(path);
    (void)f;
  } catch (const ffn::Error&) {
  }
  try {
    const ffn::FeedForward layer = ffn::FeedForward::load(path);
    (void)layer;
  } catch (const ffn::Error&) {
  }
  return 0;
}
