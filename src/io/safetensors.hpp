// safetensors: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//    "__metadata__": {"key": "value"}}
// then the tensor bytes, offsets relative to the end of the header.
// The reader validates the whole header against the real file size before
// reading or allocating anything, and reads only the tensors asked for.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/file_util.hpp"

namespace ffn::io {

// The format's own cap on the header (100 MB).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct TensorInfo {
  std::string dtype;            // "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
  uint64_t numel = 0;
};

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  const std::string& path() const { return file_.path(); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // The tensor converted to float32 (from F32, F16, BF16 or F64); throws Error otherwise.
  std::vector<float> read_f32(const std::string& name) const;
  // Rows [r0, r1) × columns [c0, c1) of a 1-D ([n] as [n, 1]) or 2-D float
  // tensor, converted to float32, reading only those bytes (a shard).
  std::vector<float> read_f32_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0, int64_t c1) const;
  // The tensor's bytes as stored (little endian), any known dtype.
  std::vector<uint8_t> read_raw(const std::string& name) const;
  // Throws Error unless the tensor's dtype is one read_f32 converts.
  void require_float(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  InputFile file_;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The layout of a file of these tensors (data not needed): the header bytes
// (length and JSON, 8-byte aligned) write_safetensors writes, each tensor's
// absolute data offset and the file size — for ranks that each write their
// parts of one file (src/dist).
struct TensorSpec {
  std::string dtype = "F32";
  std::vector<int64_t> shape;
};
struct SafetensorsLayout {
  std::string head;
  std::map<std::string, uint64_t> offset;
  uint64_t size = 0;
};
SafetensorsLayout safetensors_layout(const std::string& path, const std::map<std::string, TensorSpec>& tensors,
                                     const std::map<std::string, std::string>& metadata);

// Bytes per element of a safetensors dtype, or 0 if unknown.
int dtype_size(const std::string& dtype);
// IEEE half and bfloat16 to float.
float half_to_float(uint16_t h);
float bf16_to_float(uint16_t h);

}  // namespace ffn::io
