// libFuzzer target: the whole `ffn run` path (argument handling, loading,
// shape checks, forward, writing the output) on a fuzzed weights file and a
// fuzzed input. Input layout: 4 bytes little-endian n, then n bytes of
// weights file, then the rest as the input .npy. The program must exit 0 or
// 2 (bad input), never crash; on 2 no output file may exist.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_util.hpp"

int ffn_main(int argc, char** argv);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  n = uint32_t(std::min<size_t>(n, size - 4));
  const std::string w = ffn::fuzz::write_file("w.safetensors", data + 4, n);
  const std::string x = ffn::fuzz::write_file("x.npy", data + 4 + n, size - 4 - n);
  const std::string y = (ffn::fuzz::scratch() / "y.npy").string();
  std::filesystem::remove(y);
  std::vector<std::string> args = {"ffn", "run", "--weights", w, "--input", x, "--output", y, "--threads", "1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = ffn_main(int(args.size()), argv.data());
  if (rc != 0 && rc != 2) __builtin_trap();
  if (rc == 2 && std::filesystem::exists(y)) __builtin_trap();
  return 0;
}
