// Shared by the fuzz targets: the fuzzer's bytes as a file (the readers take
// paths), in a per-process directory on tmpfs.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace ffn::fuzz {

inline const std::filesystem::path& scratch() {
  static const std::filesystem::path d = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::filesystem::path p = base / ("ffn-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch() / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace ffn::fuzz
