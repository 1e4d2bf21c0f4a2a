// The linear op, y[n, m] = x[n, k] Wᵀ + b (W [m, k] row-major, as nn.Linear),
// and its backward, on the ISA's fp32 GEMM or on the reference
// (src/reference/linear_reference.hpp); the int8 linear; and nn::Linear, the
// one linear layer every projection of every model is (the FFN's two
// products in float are fused with their epilogues instead,
// src/ops/fused_forward.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <memory>
#include <mutex>

#include "backends/context.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/qgemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn {

// W in the GEMM's B panels for the forward (x · Wᵀ), packed once per weight.
std::vector<float> pack_linear_weight(const float* w, int64_t k, int64_t m);

// y = x Wᵀ + b (b may be null); `packed` is pack_linear_weight(w) (unused by
// the reference, which runs when ctx.reference()).
void linear_forward(const Context& ctx, const float* x, int64_t n, int64_t k, const float* w,
                    const std::vector<float>& packed, const float* b, int64_t m, float* y);
// The same with W's 16-bit values in panels (pack_panels_16; TB bf16_t or
// fp16_t), fp32 arithmetic: the bits of linear_forward on the widened W.
template <typename TB>
void linear_forward_16(const Context& ctx, const float* x, int64_t n, int64_t k, const TB* packed, const float* b,
                       int64_t m, float* y);

// The bf16 compute mode (RunOptions::compute = bf16, inference): y = x Wᵀ + b
// with x's rows and W rounded to bf16, the products exact and summed in fp32
// on the kernel set's bf16 product (AMX TDPBF16PS, AVX512_BF16 vdpbf16ps;
// the scalar set elsewhere), in its order: each row's bits depend on that row
// alone, for any thread count. `pairs` is pack_panels_bf16(W) (gemm.hpp's
// Bf16GemmArgs B layout).
void linear_forward_bf16(const Context& ctx, const float* x, int64_t n, int64_t k, const uint16_t* pairs,
                         const float* b, int64_t m, float* y);

// ---- int8 (inference) --------------------------------------------------------
// W [m, k] in the int8 scheme of src/backends/cpu/quantize.hpp: one scale per
// output row (s = max|w|/127), each token's input row quantized to 8-bit
// levels (asymmetric, its own scale), optionally a few input channels kept in
// float32 (outlier features: zeroed in q and in the quantized row, their
// products added by float fmas). The encoder's attention projections use it.
struct Int8Linear {
  int64_t k = 0, m = 0;
  std::vector<int8_t> q;             // [m, k], as W
  std::vector<float> scale;          // [m]
  std::vector<int64_t> fp32_inputs;  // ascending
  std::vector<float> w32;            // [fp32_inputs.size(), m]: W's columns for them
  // q in the B layout of the product linear_forward_int8 takes on a kernel
  // set (u8 × s8 where the set has it), packed on first use. The packs are
  // shared by copies: change q only in a fresh Int8Linear (quantize_linear).
  const AlignedVector<int8_t>& pairs() const;  // int16 × int8 (vpmaddwd)
  const S8Quads& quads() const;                // u8 × s8 (vpdpbusd, AMX) and its column sums
  struct Packs {
    std::once_flag pairs_once, quads_once;
    AlignedVector<int8_t> pairs;
    S8Quads quads;
  };
  std::shared_ptr<Packs> packs = std::make_shared<Packs>();
};
// Throws Error naming `name` for a non-finite weight or a bad channel list.
Int8Linear quantize_linear(const float* w, int64_t k, int64_t m, const std::vector<int64_t>& fp32_inputs,
                           const std::string& name);
// Whether kc runs linear_forward_int8: the u8 × s8 product where the set has
// it (AVX-512 VNNI, AMX), else the int16 × int8 one (scalar, AVX2's vpmaddwd).
// Where it is false callers keep the fp32 weights and use linear_forward.
inline bool int8_linear_supported(const KernelConfig& kc) { return kc.int8 && (kc.int8->igemm_u8 || kc.int8->igemm); }
// y = x Wᵀ + b; the bits of reference::linear_forward_int8 for any thread count.
void linear_forward_int8(const Context& ctx, const Int8Linear& w, const float* x, int64_t n, const float* b,
                         float* y);

// dx[n, k] = dy W (or += when accumulate), dW[m, k] = dyᵀ x, db[m] = Σ dy (db may be null).
void linear_backward(const Context& ctx, const float* x, int64_t n, int64_t k, const float* w, int64_t m,
                     const float* dy, float* dx, bool accumulate, float* dw, float* db);

// ---- the linear layer -----------------------------------------------------
// One linear layer (issue 45; CTranslate2's Dense): y[n, m] = x[n, k] Wᵀ + b,
// whatever W is stored as. It owns its weights:
//   fp32    the GEMM's panels of W (linear_forward); W's rows are not kept:
//           row() and the reference path read them back from the panels;
//   bf16, fp16  W's 16-bit values in panels, widened to float32 inside the
//           fp32 GEMM's micro-kernel (fp32 arithmetic: the bits of the fp32
//           layer on the widened W, in half its bytes). A GGUF's F16/BF16
//           matrices stay in 16 bits this way;
//   int8    an fp32 layer with int8 weights set beside it (set_int8):
//           inference runs linear_forward_int8 where the kernel set has an
//           int8 product (or on the integer reference), training
//           and the other sets the fp32 panels;
//   blocks  a native quant type's panels (QPanels; qlinear_forward), on the
//           kernel set's product for the type.
// The bias (optional) is float32 and owned. Models hold one per
// projection (attention's Q|K|V and output, the FFN's products on
// quantized blocks, the output head) and look embeddings up with row().
class Linear {
 public:
  Linear() = default;
  // fp32: W [m, k] row-major (copied into panels), b [m] or null.
  Linear(const float* w, int64_t k, int64_t m, const float* b = nullptr);
  // 16-bit storage (dtype bf16 or fp16): W [m, k] row-major as 16-bit bits
  // (copied into panels), b [m] or null.
  Linear(const uint16_t* w, int64_t k, int64_t m, WeightDtype dtype, const float* b = nullptr);
  // W [m, k] float32 rounded to dtype (fp32: as the first constructor; bf16,
  // fp16: to nearest even; int8 is set_int8's).
  static Linear rounded(const float* w, int64_t k, int64_t m, WeightDtype dtype, const float* b = nullptr);
  // A native quant type's panels, b [m] or null.
  explicit Linear(QPanels q, const float* b = nullptr);
  // W stacked by rows from parts of one k, each of its own native type
  // (a file's Q, K and V of different types), b [Σ m] or null.
  explicit Linear(std::vector<QPanels> parts, const float* b = nullptr);
  // int8 weights for inference beside the fp32 panels (null: none); only for an fp32 layer.
  void set_int8(std::shared_ptr<const Int8Linear> q);

  struct Run {
    bool training = false;  // fp32 even where int8 weights are set
    QActs* acts = nullptr;  // blocks: the quantized activations' scratch (null: a local one)
    // The bf16 compute mode (inference; fp32, bf16 or fp16 storage): x and W
    // rounded to bf16, linear_forward_bf16 (the reference path: the products
    // of the rounded operands summed in double). Blocks and int8 ignore it.
    bool bf16 = false;
  };
  void forward(const Context& ctx, const float* x, int64_t n, float* y, const Run& run) const;
  void forward(const Context& ctx, const float* x, int64_t n, float* y) const { forward(ctx, x, n, y, Run{}); }
  // Row r of W as float32 (k values): an embedding lookup (blocks: dequantized as ggml's).
  void row(int64_t r, float* out) const;

  int64_t k() const { return k_; }
  int64_t m() const { return m_; }
  bool empty() const { return m_ == 0; }
  bool blocks() const { return blocks_; }
  // How W is stored: fp32 (int8 set beside it or not), bf16, fp16; blocks() aside.
  WeightDtype storage() const { return storage_; }
  const Int8Linear* int8() const { return int8_.get(); }
  // The bytes a product reads: the panels (blocks, or fp32) and the bias.
  size_t bytes() const;

 private:
  int64_t k_ = 0, m_ = 0;
  bool blocks_ = false;
  WeightDtype storage_ = WeightDtype::fp32;
  std::vector<float> packed_, bias_;
  AlignedVector<uint16_t> packed16_;  // bf16, fp16
  std::vector<QPanels> q_;  // blocks: the parts, stacked by rows
  std::shared_ptr<const Int8Linear> int8_;
  // W rounded to bf16 in the bf16 compute layout, packed on first use; shared by copies.
  struct Bf16Pairs {
    std::once_flag once;
    AlignedVector<uint16_t> pairs;
  };
  std::shared_ptr<Bf16Pairs> bf16_ = std::make_shared<Bf16Pairs>();
  const AlignedVector<uint16_t>& bf16_pairs() const;
};

}  // namespace ffn::nn
