// GGUF (versions 2 and 3, little endian), llama.cpp's model file, read:
//   "GGUF", u32 version, u64 tensor count, u64 metadata count,
//   metadata: (string key, u32 type, value)...,
//   tensor infos: (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset)...,
//   padding to the alignment (metadata "general.alignment", default 32),
//   tensor data (each tensor at its offset from the data start, aligned).
// Strings are a u64 length and that many bytes (no terminator); an array is
// a u32 element type, a u64 count and the elements. ne[0] is the innermost
// dimension (a row's length): a [rows, cols] matrix has ne = {cols, rows}.
//
// The reader checks the whole header against the file's real size before it
// allocates anything a count asks for, then maps the file read-only; a
// tensor's bytes are a view into the mapping (nothing copied), and
// read_f32 dequantizes them as ggml's reference does (dequantize_row_*), to
// the bit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ffn/quant.hpp"

namespace ffn {

// Metadata value types (gguf_type).
enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9,
  u64 = 10, i64 = 11, f64 = 12,
};
const char* gguf_type_name(GgufType t);

struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType elem = GgufType::u8;  // an array's element type
  // A scalar: integers (and bool) in i, or u for u64 beyond int64's range
  // (then u_big is set), floats in f, a string in s.
  int64_t i = 0;
  uint64_t u = 0;
  bool u_big = false;
  double f = 0;
  std::string s;
  // An array of numbers (ints for integer and bool elements, floats for
  // f32/f64), of strings, or of arrays (items).
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<GgufValue> items;
  uint64_t count = 0;  // an array's length
};

// The tensor types (GgmlType, ggml_type_name, ggml_block: which of them
// this build reads) are ffn/quant.hpp's, from the quant type table.

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::f32;
  std::vector<int64_t> ne;  // ne[0] innermost
  uint64_t offset = 0;      // from the data start
  uint64_t bytes = 0;
  int64_t numel = 0;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }
  uint64_t size() const { return size_; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  // The value of key as the type the caller needs, or Error naming the file,
  // the key and what was found ("expected an unsigned integer, got string").
  uint64_t get_uint(const std::string& key) const;
  double get_float(const std::string& key) const;  // any number
  const std::string& get_string(const std::string& key) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const GgufTensor& tensor(const std::string& name) const;  // Error naming the file and tensor if absent
  // The tensor's bytes as stored (a view into the mapping, valid while this lives).
  const uint8_t* data(const GgufTensor& t) const { return base_ + data_start_ + t.offset; }
  // The tensor dequantized to float32, ne[0] innermost (row-major [ne1, ne0]).
  std::vector<float> read_f32(const std::string& name) const;
  // Hands the pages wholly inside the tensor's bytes back to the OS (a model
  // that has copied or repacked them): resident memory stays about the
  // model's, not the model's plus the file's. The bytes stay readable (read
  // again from the file).
  void release(const GgufTensor& t) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32, data_start_ = 0, size_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
  const uint8_t* base_ = nullptr;  // the mapping (size_ bytes)
};

// Dequantizes n elements (a multiple of the type's block) of ggml type t at
// src into dst, as ggml's dequantize_row_* (float32 arithmetic in its order).
void dequantize(GgmlType t, const uint8_t* src, int64_t n, float* dst);

}  // namespace ffn
