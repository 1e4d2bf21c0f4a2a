// The storage policy of a model's products (issue 63): what a checkpoint's
// tensors become in memory. A product is one nn::Linear made of parts, each
// `rows` rows of a file tensor (a share of a fused one: Phi-3's qkv and
// gate_up), stacked by rows:
//   - a GGUF's blocks, kept as they are where native compute can run them
//     (every part of a native quant type, src/core/quant_types.hpp;
//     consecutive parts of one type share panels);
//   - F16 or BF16 parts (all of one type), with native compute: 16-bit
//     panels, the float32 layer's bits in half its bytes;
//   - else float32 (quantized blocks dequantized as ggml does).
// W_Q's and W_K's rows come back from a GGUF's rotary order (rope_heads) in
// every form. The factory also reports the load's progress: the share of the
// file's tensor bytes made into products so far.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/checkpoint.hpp"
#include "ops/linear.hpp"

namespace ffn {
class GgufFile;
}

namespace ffn::models {

// GGUF keeps W_Q's and W_K's rows in llama.cpp's rotary order (each head's
// rows interleaved in pairs); transformers' order has the two halves of the
// head apart: new row h·2m + t·m + i = file row h·2m + 2i + t (m = head_dim / 2).
std::vector<float> unpermute_rows(const std::vector<float>& w, int64_t heads, int64_t cols);

// `rows` rows of the tensor `name`, of `total` rows (0: rows), from row0 on;
// rope_heads > 0: its rows in the file's rotary order, that many heads.
struct Part {
  std::string name;
  int64_t rows, rope_heads, row0 = 0, total = 0;
  int64_t all() const { return total > 0 ? total : rows; }
};

class LinearFactory {
 public:
  // gguf: the source's file (null for safetensors); native: keep blocks and
  // 16-bit weights where the policy above allows; on_progress may be empty.
  LinearFactory(const TensorSource& src, std::shared_ptr<const GgufFile> gguf, bool native,
                std::function<void(double)> on_progress);
  // Whether products keep the file's blocks (a GGUF with native compute).
  bool keep_blocks() const;
  // The product of the parts (each [rows, k]) plus bias (empty: none).
  nn::Linear product(const std::vector<Part>& parts, int64_t k, const std::vector<float>& bias = {});
  // A float32 matrix (a tensor, or a part of one), its rows in transformers' order.
  std::vector<float> matrix(const Part& p, int64_t cols);

 private:
  const TensorSource& src_;
  std::shared_ptr<const GgufFile> gguf_;
  bool native_;
  std::function<void(double)> on_progress_;
  uint64_t total_bytes_ = 0, done_bytes_ = 0;
  std::set<std::string> counted_;  // a fused tensor's bytes count once
  void advance(const std::string& name);
  std::vector<float> part_rows(const Part& p, int64_t k);
};

}  // namespace ffn::models
