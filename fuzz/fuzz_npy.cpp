// libFuzzer target: the .npy readers (float32 and integer) on arbitrary bytes.
#include <cstdint>

#include "ffn/ffn.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ffn::fuzz::write_file("x.npy", data, size);
  try {
    const ffn::Array a = ffn::read_npy(path);
    if (a.numel() != int64_t(a.data.size())) __builtin_trap();
  } catch (const ffn::Error&) {
  }
  try {
    std::vector<int64_t> shape;
    const std::vector<int64_t> v = ffn::read_npy_int(path, &shape);
    (void)v;
  } catch (const ffn::Error&) {
  }
  return 0;
}
