// Small file helpers shared by the readers and writers: whole-file reads with
// clear errors, and atomic writes (temporary file in the same directory,
// fsync, rename) so an existing file is never truncated before the new one is
// complete and a failed write leaves nothing behind.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ffn/io.hpp"  // errno_text, write_file_atomic, write_all, check_writable_target, the signal helpers

namespace ffn::io {

// An open read-only file; throws ffn::Error("<path>: cannot open: <reason>").
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at offset; throws Error naming `what` if the file is shorter.
  void read_at(uint64_t offset, void* dst, uint64_t n, const char* what) const;

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0;
};

// What a file is, from its first bytes (to explain a file of the wrong kind);
// a zip archive by its first member: torch.save's (data.pkl), numpy.savez's
// (.npy members) or another.
enum class FileKind { unknown, torch_zip, pickle, npy, npz, zip, safetensors };
FileKind sniff(const InputFile& f);
// A one-line explanation for a file of kind k given where `expected` was
// wanted ("safetensors" or ".npy"), e.g. "a PyTorch checkpoint (torch.save),
// not safetensors; convert it with scripts/torch_roundtrip.py"; empty for
// unknown kinds.
std::string wrong_kind(FileKind k, const std::string& expected);

// Multiplies non-negative dims, throwing Error(what + ": dimension product overflows")
// if the product exceeds limit.
uint64_t checked_product(const int64_t* dims, size_t n, uint64_t limit, const std::string& what);

}  // namespace ffn::io
