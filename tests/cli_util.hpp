// Running the `ffn` program from the tests, and small file helpers.
#pragma once

#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ffn::test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Result {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
};

// Runs `ffn <args>` through the shell, capturing stdout and stderr in files under dir.
inline Result run_ffn(const std::string& args, const std::filesystem::path& dir) {
  const std::filesystem::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = std::string(FFN_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string();
  const int rc = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// A 1-D integer .npy (descr "<i8" or "<i4").
inline void write_int_npy(const std::string& path, const std::vector<int64_t>& v, const char* descr = "<i8") {
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                  std::to_string(v.size()) + ",), }";
  h += std::string(64 - (10 + h.size() + 1) % 64, ' ') + "\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h;
  if (std::string(descr) == "<i8") {
    bytes += std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  } else {
    for (int64_t e : v) {
      int32_t i = int32_t(e);
      bytes += std::string(reinterpret_cast<const char*>(&i), 4);
    }
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace ffn::test
