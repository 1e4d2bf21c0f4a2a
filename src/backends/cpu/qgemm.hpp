// Products with ggml's block-quantized weights (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0: 32 weights per block, one f16 scale d, Q4_1 and Q5_1 also an f16
// minimum m; the K-quants Q4_K, Q5_K, Q6_K: 256 weights per block in
// sub-blocks of 32 or 16 with their own 6- or 8-bit scales), kept quantized in
// memory: y[t, r] = Σ_k x[t, k] · W[r, k] with the activations quantized per
// token and block of 32 to 16-bit integers, and exact integer dot products
// on 8-bit operands (each activation is two signed bytes, Q = 255·hi + lo).
//
// Why 16 bits: with 8-bit activations (llama.cpp's Q8_1 rule) SmolLM2's
// next token agreed with fp32 compute at 96.3 % of positions, under the
// 97 % asked; with 16 bits, at 99.95 % of the same 4,096 (bench/llm_quality.py,
// 2026-11-25). The weights are the file's, so the activations' rounding is
// the only difference from fp32 compute left.
//
// The arithmetic, which every ISA's kernel reproduces bit for bit (the
// reference is reference::qlinear_forward, from the file's own blocks):
//   activations, per token t and block b of 32 values x:
//     amax = max |x|, dx = amax / 32512, id = amax > 0 ? 32512 / amax : 0,
//     Q_i = nearbyint(x_i · id) (ties to even; |Q| ≤ 32512 = 127 · 256),
//     hi_i = Q_i / 255 rounded to nearest, lo_i = Q_i − 255 hi_i (both in −127..127),
//     ΣQ, sx = dx · float(ΣQ)
//     (a block holding NaN or Inf: Q = 0 and dx = NaN, so its products are NaN;
//     one whose 32512 / amax overflows, amax < 2^-113: Q = 0, dx = 0)
//   weights: Q4_0 w = d (q − 8), q ∈ 0..15; Q4_1 w = d q + m; Q5_0 w = d (q − 16),
//     q ∈ 0..31; Q5_1 w = d q + m; Q8_0 w = d q, q ∈ −128..127
//   output, blocks in order, acc = 0:
//     isum = Σ_i q_w,i · Q_i − (Q4_0: 8 ΣQ, Q5_0: 16 ΣQ)  (exact int32:
//            = 255 Σ q_w hi + Σ q_w lo; |isum| < 2^28)
//     acc = fma(float(d) · dx, float(isum), acc)
//     Q4_1, Q5_1: acc = fma(float(m), sx, acc)
//   the K-quants, per activation block of 32 in order (sub-block j):
//     Q4_K, Q5_K (w = d·sc_j·q − dmin·m_j, q ∈ 0..15 or 0..31, sc, m 6-bit):
//       isum = Σ q · Q, acc = fma((float(d) · sc_j) · dx, float(isum), acc),
//       acc = fma(−(float(dmin) · m_j), sx, acc)
//     Q6_K (w = d·sc·(q − 32), q ∈ 0..63, an i8 sc per 16 weights): per half
//       h of the block, isum_h = Σ_h q · Q − 32 ΣQ_h (QActs::sum16),
//       acc = fma((float(d) · sc_h) · dx, float(isum_h), acc)
//     (d · sc and dmin · m are exact in float32, as ggml's dequantization has them)
//   y = acc.
// The order of the float operations is per (token, row) and the same on
// every ISA: the vector kernels run a group's rows in the lanes of a register
// (16 per zmm; AVX2 8 per ymm, a group in two halves), each lane doing one
// row's sequence.
//
// Layout (QPanels): rows in groups of 16 (the last padded with zero rows);
// per group, its blocks in order; per (group, block):
//   nibbles (Q4_*): 4 × 64 bytes; byte 4r + e of vector i holds row r's
//     file byte qs[4i + e] (low nibble: weight 4i + e, high: 16 + 4i + e), so
//     vector i's low nibbles are weights 4i..4i+3 of each row in its lane r
//     (u8 × s8 dot products over 4 bytes per lane: vpdpbusd, vpmaddubsw),
//     its high nibbles weights 16 + 4i..;
//   bytes (Q8_0): 8 × 64 bytes, vector j holding weights 4j..4j+3 of each row;
//   Q5_0, Q5_1: the nibbles, then a vector of the fifth bits;
//   then d[16] (f16), then Q4_1's and Q5_1's m[16] (f16);
//   the K-quants: src/core/quant_blocks.cpp (offsets: kpanel in quant_types.hpp).
// A group of 16 rows of the file's blocks and a group here have the same
// bytes: resident memory stays the file's size.
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned.hpp"
#include "core/quant_types.hpp"

namespace ffn::nn {

// The types, their sizes and panel layouts are rows of the quant type table
// (src/core/quant_types.hpp); a type is native when its row has a layout.
struct QPanels {
  GgmlType type = GgmlType::q4_1;
  int64_t k = 0, m = 0;       // W is [m, k]
  int64_t blocks = 0;         // k / the type's block
  int64_t groups = 0;         // ceil(m / 16)
  int64_t block_bytes = 0;    // of one (group, block): the layout's bytes()
  AlignedVector<uint8_t> data;
  int64_t group_bytes() const { return blocks * block_bytes; }
  const uint8_t* at(int64_t g, int64_t b) const { return data.data() + g * group_bytes() + b * block_bytes; }
  size_t bytes() const { return data.size(); }
};

// Panels from the file's rows: rows[r] points at row r's blocks (k / block
// of them, as stored). Error if the type is not native or k not whole blocks.
QPanels repack_rows(GgmlType type, const std::vector<const uint8_t*>& rows, int64_t k);
// Asks the OS for huge pages over the 2 MiB-aligned interior of [data,
// data + bytes) (madvise; before the pages are first touched).
void advise_huge_pages(const void* data, size_t bytes);
// Row r dequantized (w = d q ..., as ggml), k floats.
void dequantize_panel_row(const QPanels& w, int64_t r, float* out);

// Quantized activations of n tokens, per the rule above.
constexpr int32_t kQActMax = 32512;  // |Q| ≤ 127 · 256: hi, lo ∈ −127..127
struct QActs {
  int64_t n = 0, blocks = 0;
  AlignedVector<int8_t> hi, lo;  // [n, blocks · 32]: Q = 255 hi + lo
  std::vector<float> d, s;       // [n, blocks]: dx, sx
  std::vector<int32_t> sum;      // [n, blocks]: ΣQ
  std::vector<int32_t> sum16;    // [n, 2 · blocks]: ΣQ of each block's halves (Q6_K's sub-blocks of 16)
};
void quantize_acts(const float* x, int64_t n, int64_t k, QActs& out);
// The same in two steps, for the vector kernels and threads: size `out` for
// n tokens (k a multiple of 32), then quantize tokens [t0, t1) of x into it.
void size_acts(int64_t n, int64_t k, QActs& out);
using QActsFn = void (*)(const float* x, int64_t t0, int64_t t1, QActs& out);
// sum16 of tokens [t0, t1) from their planes (after the ISA's quantizer).
void half_sums(int64_t t0, int64_t t1, QActs& out);

// y[t · ldy + r] for the rows of groups [g0, g1) (rows ≥ m skipped) and
// tokens [t0, t1), on weights of one type: each ISA's kernels are templates
// on the type, instantiated for the types it has and listed in its kernel
// set (KernelConfig::qgemm).
using QGemmFn = void (*)(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y,
                         int64_t ldy);
#define FFN_QGEMM_ARGS const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t
namespace scalar {
template <GgmlType T> void qgemm(FFN_QGEMM_ARGS);
void quantize_acts(const float* x, int64_t t0, int64_t t1, QActs& out);
}
namespace avx2 {
template <GgmlType T> void qgemm(FFN_QGEMM_ARGS);
void quantize_acts(const float* x, int64_t t0, int64_t t1, QActs& out);
}
namespace avx512 {
template <GgmlType T> void qgemm_vnni(FFN_QGEMM_ARGS);
void quantize_acts(const float* x, int64_t t0, int64_t t1, QActs& out);
}
namespace amx { template <GgmlType T> void qgemm(FFN_QGEMM_ARGS); }
#undef FFN_QGEMM_ARGS

}  // namespace ffn::nn
