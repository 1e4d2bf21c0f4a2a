// Files: NumPy .npy arrays and safetensors tensors, read with one-line errors
// naming the file and written atomically (a temporary file in the same
// directory, then rename: an existing file is never damaged and a failed
// write leaves nothing), and the helpers a program uses to keep that promise
// for its own outputs (ffn::io).
#pragma once

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ffn/types.hpp"

namespace ffn {

// A float32 array read from or written to NumPy .npy (C order, little endian).
struct Array {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t numel() const;
};
// Reads float32 ('<f4'); errors name the path.
Array read_npy(const std::string& path);
// Reads an integer array ('<i4' or '<i8'), e.g. sequence lengths.
std::vector<int64_t> read_npy_int(const std::string& path, std::vector<int64_t>* shape = nullptr);
// Atomic write (temporary file in the same directory, then rename).
void write_npy(const std::string& path, const Array& a);

// A tensor of a safetensors file, converted to float32. For writing, a tensor
// may instead carry raw little-endian bytes of another dtype ("I8", "BF16",
// "F16"): dtype names it and raw holds the bytes (data is then ignored).
struct NamedTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::string dtype = "F32";
  std::vector<uint8_t> raw;
};
struct SafetensorsFile {
  std::map<std::string, NamedTensor> tensors;
  std::map<std::string, std::string> metadata;
};
// Reads every tensor (F32, F16, BF16, F64 are converted to float32; an I8
// tensor is read as its integer values).
SafetensorsFile read_safetensors(const std::string& path);
// Writes the tensors (F32, or the raw dtype given) and metadata, atomically.
void write_safetensors(const std::string& path, const SafetensorsFile& f);

// The tensors of a safetensors file, their dtype and shape, and its
// __metadata__, without reading their data.
struct SafetensorsEntry {
  std::string dtype;  // "F32", "BF16", "I8", ...
  std::vector<int64_t> shape;
};
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};
SafetensorsHeader read_safetensors_header(const std::string& path);

namespace io {

// strerror(errno) as a std::string.
std::string errno_text();

// Calls body(file) on a new temporary file beside `path`, then flushes, syncs
// and renames it over `path`. On any failure the temporary file is removed
// and the original `path` (if any) is untouched. A symlink is followed (the
// file it points to is replaced, the link kept); a target that exists but is
// not a regular file (directory, FIFO, device) is refused.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& body);
// fwrite that throws Error naming `path` on a short write.
void write_all(std::FILE* f, const void* data, size_t n, const std::string& path);

// Throws Error naming `path` unless a write_file_atomic to it can succeed as
// far as can be known before the work: `path` is absent or a regular file (or
// a symlink to one) and its directory exists and takes new files. Commands
// call it on every output before they start.
void check_writable_target(const std::string& path);
// The same for a directory an output is written into (made, with its missing
// parents, when absent): it is a writable directory, or its nearest existing
// ancestor is.
void check_writable_directory(const std::string& dir);

// Installs SIGINT, SIGTERM and SIGHUP handlers that remove the temporary file
// of a write_file_atomic in progress, then end the program as the signal
// would have (the target is never touched: it stays the old file).
void remove_temporaries_on_signals();
// Also remove these paths (files, then empty directories, in order) if such a
// signal ends the program; an empty list clears them. For a program's own
// staging files; at most 16 paths (more is a logic_error).
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

}  // namespace io
}  // namespace ffn
