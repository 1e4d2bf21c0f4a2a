// Small helpers shared by the test suites.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace ffn::test {

// A scratch directory per suite and process: /tmp/ffn_test_<tag>_<pid>.
inline std::filesystem::path scratch_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("ffn_test_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

}  // namespace ffn::test
