// Low-precision weights (bf16, fp16, int8) and the int8 scheme.
//
// int8, as computed by the fast path and by the integer reference
// (src/reference/ffn_int8_reference.cpp), which must agree bit for bit on
// every quantized value and int32 sum:
//
//   weights   each output channel (a row of W1, Wg, W2 in PyTorch layout),
//             and for W2 each 256-column group of it (the hidden chunk, so
//             the scale changes where the activation scale does):
//             s = max|w| / 127 over the row (group), 1 if all zero,
//             q = round(w / s) in [-127, 127], round half to even.
//   fp32 inputs  optionally, a few FFN input channels S (outlier features,
//             LLM.int8()'s decomposition): W1's and Wg's columns S are zeroed
//             before quantizing and kept in float32; each token's x[S] is
//             zeroed before its row is quantized and enters as
//             prev = b + Σ_{s∈S, ascending} x_s · W[f, s], summed in float by
//             fused multiply-adds in order of s (p = fma(x_s, W[f, s], p) from
//             p = b, or 0), so every ISA and the reference round alike.
//   activations  each token's row v entering a matrix product (the FFN input
//             x for W1/Wg; the hidden activation for W2, per 256-unit chunk
//             of d_ff — the chunk the fused path holds in L1/L2):
//             lo = min(0, min v), hi = max(0, max v), s = hi/255 − lo/255
//             (1 if the row is zero), zp = round(−lo / s), u = clamp(round(v · (1/s)) + zp,
//             0, 255), and the product uses a = u − zp ∈ [−255, 255].
//             A row holding NaN or ±Inf gets s = NaN (its outputs are NaN).
//   products  acc = Σ a · q in int32 (exact); z = fma(float(acc), s_a · s_w,
//             prev) with prev = bias (first product; with fp32 inputs as
//             above) or the running sum of the shard's earlier chunks
//             (second product), in chunk order; the shards' sums are then
//             added over their fixed tree (src/ops/fused_forward.hpp).
//
// Why asymmetric 8-bit activations and 16-bit operands: this project's CPUs
// without VNNI (AVX2) multiply with vpmaddwd on int16, so a = u − zp is
// formed once while quantizing and no zero-point compensation term is
// needed; vpmaddubsw (u8 × s8) would be no faster (it needs a vpmaddwd to
// widen its int16 sums anyway) and saturates at ±32767. A ReLU hidden row
// (lo = 0) gets all 256 levels over [0, max].
#pragma once

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "ffn/types.hpp"
#include "core/aligned.hpp"
#include "core/half.hpp"  // float_to_bf16, bf16_to_float, float_to_fp16, fp16_to_float

namespace ffn::nn {

constexpr int64_t kQuantChunk = 256;  // hidden units per activation scale (int8)

// One weight matrix [rows, cols] in PyTorch layout (rows = output channels).
struct QMatrix {
  int64_t rows = 0, cols = 0;
  int64_t group = 0;          // int8: columns per scale (0: all of them)
  std::vector<int8_t> q;      // int8: values
  std::vector<float> scale;   // int8: [groups(), rows], one per row and column group
  std::vector<uint16_t> h;    // bf16 / fp16: bits
  bool empty() const { return rows == 0; }
  int64_t group_cols() const { return group > 0 && group < cols ? group : cols; }
  int64_t groups() const { return cols > 0 ? (cols + group_cols() - 1) / group_cols() : 1; }
  float scale_at(int64_t r, int64_t c) const { return scale[size_t((c / group_cols()) * rows + r)]; }
};

struct QuantizedWeights {
  WeightDtype dtype = WeightDtype::fp32;
  QMatrix w1, wg, w2;
  // int8: the FFN input channels kept in float32 (ascending), and W1's and
  // Wg's columns for them, transposed: [fp32_inputs.size(), d_ff].
  std::vector<int64_t> fp32_inputs;
  std::vector<float> w1_fp32, wg_fp32;
};

// Converts w [rows, cols]; `name` for errors (an fp16 overflow names the
// element). int8: one scale per row and `group` columns (0: per row).
// Throws Error for a non-finite weight (int8) or one beyond fp16's range.
QMatrix quantize_matrix(const std::vector<float>& w, int64_t rows, int64_t cols, WeightDtype dtype,
                        const std::string& name, int64_t group = 0);
// The float32 values the low-precision matrix stands for.
std::vector<float> dequantize(const QMatrix& m, WeightDtype dtype);
// int8: the same matrix with one scale per `group` columns, from one with a
// scale per row (each row's scale repeated; the values and results unchanged).
void regroup_scales(QMatrix& m, int64_t group);

// Throws Error naming `what` unless channels are ascending, distinct and < d_model.
void check_fp32_inputs(const std::vector<int64_t>& channels, int64_t d_model, const std::string& what);
// int8 with fp32 input channels: sets q.fp32_inputs (ascending, distinct,
// each < d_model, else Error naming `what`), moves W1's and Wg's columns
// (PyTorch layout [d_ff, d_model], in w1 / wg) into q.w1_fp32 / wg_fp32 and
// zeroes them in w1 / wg, which are then quantized as usual.
void split_fp32_inputs(QuantizedWeights& q, std::vector<int64_t> channels, std::vector<float>& w1,
                       std::vector<float>* wg, int64_t d_model, int64_t d_ff, const std::string& what);
// int8: hidden units [b, e) of d_ff (W1, Wg rows; W2 columns, b a multiple
// of 256 and e of 256 or d_ff; the fp32 channels' columns), values and scales as stored.
std::shared_ptr<QuantizedWeights> slice_hidden(const QuantizedWeights& q, int64_t d_model, int64_t d_ff, int64_t b,
                                               int64_t e);
// Puts the fp32 columns back into dequantized W1 / Wg values.
void merge_fp32_inputs(const QuantizedWeights& q, std::vector<float>& w1, std::vector<float>* wg, int64_t d_model,
                       int64_t d_ff);
// prev[r·ldp + j] = b[j] (or 0) + Σ_s xs[r·k + s] · wt[s·ld + j] for rows
// r < rows and j < n, summed by fused multiply-adds in float in order of s
// (see above): the fp32 inputs' part of a hidden chunk (or of a linear's
// output block) for a block of tokens. std::fma rounds once whatever the ISA
// (one instruction where the TU has FMA, libm's exact one elsewhere), so the
// bits do not depend on which rows or columns share a pass. Four rows and 32
// columns (16 without AVX-512: 16 ymm registers) at a time keep their sums in
// registers; the loops are over j so
// that they vectorize for whichever ISA compiles them (Int8Kernels::fp32_part;
// static: each translation unit keeps its own copy, compiled with its own ISA flags).
static inline void fp32_input_part(const float* xs, int64_t k, int64_t rows, const float* wt, int64_t ld,
                                   const float* b, int64_t n, float* prev, int64_t ldp) {
#ifdef __AVX512F__
  constexpr int64_t kR = 4, kB = 32;
#else
  constexpr int64_t kR = 4, kB = 16;
#endif
  int64_t r0 = 0;
  for (; r0 + kR <= rows; r0 += kR) {
    int64_t j0 = 0;
    for (; j0 + kB <= n; j0 += kB) {
      float acc[kR][kB];
      for (int64_t r = 0; r < kR; ++r)
        for (int64_t j = 0; j < kB; ++j) acc[r][j] = b ? b[j0 + j] : 0.0f;
      for (int64_t s = 0; s < k; ++s) {
        const float* w = wt + s * ld + j0;
        for (int64_t r = 0; r < kR; ++r) {
          const float x = xs[(r0 + r) * k + s];
          for (int64_t j = 0; j < kB; ++j) acc[r][j] = std::fma(x, w[j], acc[r][j]);
        }
      }
      for (int64_t r = 0; r < kR; ++r)
        for (int64_t j = 0; j < kB; ++j) prev[(r0 + r) * ldp + j0 + j] = acc[r][j];
    }
    if (j0 < n)
      for (int64_t r = r0; r < r0 + kR; ++r)
        fp32_input_part(xs + r * k, k, 1, wt + j0, ld, b ? b + j0 : nullptr, n - j0, prev + r * ldp + j0, 0);
  }
  for (; r0 < rows; ++r0)  // one row at a time
    for (int64_t j0 = 0; j0 < n; j0 += kB) {
      const int64_t nb = std::min(kB, n - j0);
      float acc[kB];
      for (int64_t j = 0; j < nb; ++j) acc[j] = b ? b[j0 + j] : 0.0f;
      for (int64_t s = 0; s < k; ++s) {
        const float x = xs[r0 * k + s];
        const float* w = wt + s * ld + j0;
        for (int64_t j = 0; j < nb; ++j) acc[j] = std::fma(x, w[j], acc[j]);
      }
      for (int64_t j = 0; j < nb; ++j) prev[r0 * ldp + j0 + j] = acc[j];
    }
}

// The scale and zero point of an activation row from lo = min(0, min v),
// hi = max(0, max v) and whether every element is finite (see above); every
// quantizer of every ISA goes through it. levels is false for a row whose
// values all quantize to zero (s = NaN for a non-finite row, 1 for a zero row).
struct ActScale {
  float s = 1.0f, inv = 1.0f, zp = 0.0f;
  bool levels = false;
  // u = clamp(round(v · (1/s)) + zp, 0, 255), as a float
  float level(float v) const { return std::clamp(std::nearbyint(v * inv) + zp, 0.0f, 255.0f); }
};
// Folds v[0, n) into the running range (lo, hi) and finiteness.
inline void extend_range(const float* v, int64_t n, float& lo, float& hi, bool& finite) {
  for (int64_t j = 0; j < n; ++j) {
    if (!std::isfinite(v[j])) finite = false;
    lo = std::min(lo, v[j]);
    hi = std::max(hi, v[j]);
  }
}
inline ActScale act_scale(float lo, float hi, bool finite) {
  ActScale q;
  if (!finite) {
    q.s = std::numeric_limits<float>::quiet_NaN();
    return q;
  }
  const float s = hi / 255.0f - lo / 255.0f;  // (hi − lo) / 255 without overflow
  if (!(s > 0.0f) || !std::isfinite(1.0f / s)) return q;  // all zero (or all below 1e-36)
  q.s = s;
  q.inv = 1.0f / s;
  q.zp = std::clamp(std::nearbyint(-lo * q.inv), 0.0f, 255.0f);
  q.levels = true;
  return q;
}

// Quantizes one activation row v[n] (see above): a[0, n) and, when n is odd,
// a[n] = 0; returns s. Portable; the fast path's per-ISA versions match it.
float quantize_row_ref(const float* v, int64_t n, int16_t* a);
// The same quantization as the u8 levels and zero point that u8 × s8 products
// (vpdpbusd) take: u[j] = a[j] + zp for j < n, u zero-padded to a multiple of 4.
float quantize_row_u8_ref(const float* v, int64_t n, uint8_t* u, int32_t* zp);

}  // namespace ffn::nn

namespace ffn::nn {

// Panels for the fast path from a PyTorch-layout matrix m [N rows, K cols]
// (B(k, n) = m[n, k]), as src/backends/cpu/gemm.hpp describes: 16-bit (bf16 rows
// interleaved, fp16 in order) and int8 (pairs of k).
AlignedVector<uint16_t> pack_panels_16(const std::vector<uint16_t>& m, int64_t K, int64_t N, bool bf16);
AlignedVector<int8_t> pack_panels_s8(const std::vector<int8_t>& m, int64_t K, int64_t N);
// The u8 × s8 layout (src/backends/cpu/gemm.hpp, U8GemmArgs): quads of k, and the
// column sums Σ_k B(k, n) per group of k_group rows of k ([groups][panels·16],
// zero-padded), which the zero-point compensation subtracts.
struct S8Quads {
  AlignedVector<int8_t> b;
  std::vector<int32_t> colsum;
};
S8Quads pack_panels_s8_quads(const std::vector<int8_t>& m, int64_t K, int64_t N, int64_t k_group);
// The bf16 compute layout (src/backends/cpu/gemm.hpp, Bf16GemmArgs) from a float
// PyTorch-layout matrix m [N, K]: values rounded to bf16, pairs of k, K
// zero-padded to bf16_kpad(K), N to whole panels.
AlignedVector<uint16_t> pack_panels_bf16(const float* m, int64_t K, int64_t N);

}  // namespace ffn::nn
