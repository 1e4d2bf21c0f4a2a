// Small file helpers shared by the readers and writers: whole-file reads with
// clear errors, and atomic writes (temporary file in the same directory,
// fsync, rename) so an existing file is never truncated before the new one is
// complete and a failed write leaves nothing behind.
#pragma once

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace ffn::io {

// strerror(errno) as a std::string.
std::string errno_text();

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

// What a file is, from its first bytes (to explain a file of the wrong kind).
enum class FileKind { unknown, torch_zip, pickle, npy, safetensors };
FileKind sniff(const InputFile& f);
// A one-line explanation for a file of kind k given where `expected` was
// wanted ("safetensors" or ".npy"), e.g. "a PyTorch checkpoint (torch.save),
// not safetensors; convert it with scripts/torch_roundtrip.py"; empty for
// unknown kinds.
std::string wrong_kind(FileKind k, const std::string& expected);

// Calls body(file) on a new temporary file beside `path`, then flushes, syncs
// and renames it over `path`. On any failure the temporary file is removed
// and the original `path` (if any) is untouched. A symlink is followed (the
// file it points to is replaced, the link kept); a target that exists but is
// not a regular file (directory, FIFO, device) is refused.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& body);

// Installs SIGINT, SIGTERM and SIGHUP handlers that remove the temporary file
// of a write_file_atomic in progress, then end the program as the signal
// would have (the target is never touched: it stays the old file).
void remove_temporaries_on_signals();
// Also remove these paths (files, then empty directories, in order) if such a
// signal ends the program; an empty list clears them. For a program's own
// staging files; at most 4 paths.
void remove_on_signal(const std::vector<std::string>& paths);

// Holds SIGINT, SIGTERM and SIGHUP back (they stay pending) while it lives.
class SignalBlock {
 public:
  SignalBlock();
  ~SignalBlock();
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

 private:
  sigset_t old_;  // the previous mask
};

// Throws Error if `path` exists and is not a regular file (or a symlink to one).
void check_writable_target(const std::string& path);

// fwrite that throws Error naming `path` on a short write.
void write_all(std::FILE* f, const void* data, size_t n, const std::string& path);

// Multiplies non-negative dims, throwing Error(what + ": dimension product overflows")
// if the product exceeds limit.
uint64_t checked_product(const int64_t* dims, size_t n, uint64_t limit, const std::string& what);

}  // namespace ffn::io
