// The one matrix product every fast path is built from:
//
//   C[m, n] = (accumulate ? C : 0) + A[m, k] · B[k, n]
//
//   A(i, p) = a[i·rsa + p·csa]                 (row- or column-major, any strides)
//   B(p, j) = b[(j / 16)·psb + p·ldb + j % 16]  (16-column panels; packed weights
//                                               use ldb = 16, psb = K·16; a plain
//                                               row-major matrix uses ldb = N, psb = 16)
//   C(i, j) = c[i·ldc + j]
//
// Each C element is one chain of multiply-adds over p = 0, 1, …, k−1 in that
// order, whatever the tile shape, the blocking or the thread count; so a row's
// result does not depend on which other rows share the call, and blocking
// over k (storing and reloading the float partial sums) changes no bit.
//
// Per-ISA block kernels: src/backends/cpu/kernels/<isa>/f32_gemm_<isa>.cpp.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "ffn/types.hpp"

namespace ffn::nn {

constexpr int64_t kPanel = 16;  // columns per B panel

// 16-bit weight elements (bits), widened to float32 inside the micro-kernel.
// A bf16 panel row interleaves its columns as 0, 8, 1, 9, …, 7, 15 (so one
// shift and one mask widen a 32-byte row into columns 0–7 and 8–15); an fp16
// panel row is in column order. Only packed, whole panels (ldb = 16).
struct bf16_t { uint16_t bits; };
struct fp16_t { uint16_t bits; };
inline int64_t bf16_slot(int64_t j) { return j < 8 ? 2 * j : 2 * (j - 8) + 1; }

template <typename TB>
struct GemmArgsT {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t rsa = 0, csa = 1;
  const TB* b = nullptr;
  int64_t ldb = kPanel, psb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
  // Optional: the B panels the next call will read first (same ldb, panel
  // stride next_psb). A kernel may prefetch them while it computes its own
  // last panels, so that a chain of products streaming their weights from
  // L3 starts each one warm. A hint only; no result depends on it.
  // gemm_packed passes it to its last block and chains its own blocks;
  // gemm (threaded) leaves it to the caller.
  const TB* next_b = nullptr;
  int64_t next_psb = 0;
};
using GemmArgs = GemmArgsT<float>;

// One cache block (any m, n, k ≥ 1), single-threaded.
template <typename TB>
using GemmBlockFnT = void (*)(const GemmArgsT<TB>&);
using GemmBlockFn = GemmBlockFnT<float>;
namespace scalar {
void gemm_block(const GemmArgs& g);
void gemm_block(const GemmArgsT<bf16_t>& g);
void gemm_block(const GemmArgsT<fp16_t>& g);
}  // namespace scalar
namespace avx2 {
void gemm_block(const GemmArgs& g);
void gemm_block(const GemmArgsT<bf16_t>& g);
void gemm_block(const GemmArgsT<fp16_t>& g);
}  // namespace avx2
namespace avx512 {
void gemm_block(const GemmArgs& g);
void gemm_block(const GemmArgsT<bf16_t>& g);
void gemm_block(const GemmArgsT<fp16_t>& g);
}  // namespace avx512

// Cache blocking of one ISA's block kernel (a property of the kernel, kept in
// its KernelConfig, src/backends/cpu/kernel_config.hpp).
struct Blocking {
  int64_t mc;  // rows of A per block (a multiple of the kernel's MR)
  int64_t kc;  // k per block (the B panels of one block stay in L1)
  int64_t nc;  // columns per block (a multiple of 16)
};
// The fp32-arithmetic block kernels of one ISA, for each B element type.
struct F32Gemm {
  GemmBlockFnT<float> f32;
  GemmBlockFnT<bf16_t> bf16;
  GemmBlockFnT<fp16_t> fp16;
  Blocking blocking;
  template <typename TB>
  GemmBlockFnT<TB> block() const {
    if constexpr (std::is_same_v<TB, bf16_t>) return bf16;
    else if constexpr (std::is_same_v<TB, fp16_t>) return fp16;
    else return f32;
  }
};

// A product whose A is row-major (csa = 1) and whose B is 16-column panels
// (packed, ldb = 16, or a row-major matrix read in place, psb = 16),
// blocked for the caches, on the calling thread.
template <typename TB>
void gemm_packed(const F32Gemm& kernel, const GemmArgsT<TB>& g);
// The same split over `threads` as gemm (rows or column panels; each C
// element computed by one thread, the same bits for any count).
template <typename TB>
void gemm_packed(const F32Gemm& kernel, const GemmArgsT<TB>& g, int threads);

// ---- int8 -------------------------------------------------------------------
// C[m, 16·panels(n)] (int32) = A[m, 2·kp] (int16) · B[2·kp, n] (int8), exact.
//   A(i, p) = a[i·lda + p]  (lda even; an odd k is padded with a zero column)
//   B(p, j) = b[(j / 16)·psb + (p / 2)·32 + (j % 16)·2 + p % 2]   (psb = 32·kp)
//   C(i, j) = c[i·ldc + j] for every column of every panel (ldc ≥ 16·panels(n))
// so one 32-byte B row holds two k for 16 columns: vpmovsxbw widens each half
// to the int16 pairs vpmaddwd multiplies with the broadcast pair (A(i, p), A(i, p+1)).
struct IGemmArgs {
  int64_t m = 0, n = 0, kp = 0;
  const int16_t* a = nullptr;
  int64_t lda = 0;
  const int8_t* b = nullptr;
  int64_t psb = 0;
  int32_t* c = nullptr;
  int64_t ldc = 0;
};
// With VNNI (vpdpbusd: 4 u8 × s8 products summed into each int32 lane, no
// saturation) A holds the u8 levels u = a + zp and the product subtracts the
// zero-point term, precomputed per column when B was packed:
// C[m, 16·panels(n)] (int32) = Σ_p A(i, p) B(p, j) − zp[i] · colsum[j], exact
// (equal to the int16 form's Σ_p a(i, p) B(p, j)).
//   A(i, p) = a[i·lda + p]  (u8; lda a multiple of 4, zero-padded)
//   B(p, j) = b[(j / 16)·psb + (p / 4)·64 + (j % 16)·4 + p % 4]   (psb = 64·kq)
//   colsum[j] = Σ_p B(p, j) over the same k, for every column of every panel
struct U8GemmArgs {
  int64_t m = 0, n = 0, kq = 0;
  const uint8_t* a = nullptr;
  int64_t lda = 0;
  const int32_t* zp = nullptr;  // [m]
  const int8_t* b = nullptr;
  int64_t psb = 0;
  const int32_t* colsum = nullptr;
  int32_t* c = nullptr;
  int64_t ldc = 0;
};
// The int8 kernels of one ISA; each matches the portable definition in
// src/backends/cpu/quantize.hpp bit for bit. At least one of the two product
// forms is set; where igemm_u8 is, the layers take it.
struct Int8Kernels {
  void (*igemm)(const IGemmArgs&);          // int16 × int8 pairs (vpmaddwd), or null
  void (*igemm_u8)(const U8GemmArgs&);      // u8 × s8 quads (vpdpbusd), or null
  // quantize_row_ref's contract (for igemm).
  float (*quantize_row)(const float* v, int64_t n, int16_t* a);
  // quantize_row_u8_ref's contract (for igemm_u8).
  float (*quantize_row_u8)(const float* v, int64_t n, uint8_t* u, int32_t* zp);
  // out[j] = fma(float(acc[j]), s_a · s_w[j], prev ? prev[j] : 0) for j < n (prev may be out).
  void (*dequant)(const int32_t* acc, int64_t n, float s_a, const float* s_w, const float* prev, float* out);
  // fp32_input_part (src/backends/cpu/quantize.hpp) compiled for this ISA.
  void (*fp32_part)(const float* xs, int64_t k, int64_t rows, const float* wt, int64_t ld, const float* b, int64_t n,
                    float* prev, int64_t ldp);
};
namespace scalar { extern const Int8Kernels int8_kernels; }
namespace avx2 { extern const Int8Kernels int8_kernels; }
namespace avx512 { extern const Int8Kernels int8_kernels_vnni; }

// ---- bf16 compute (vdpbf16ps, AMX TDPBF16PS) -------------------------------
// C[m, n] (fp32) = (accumulate ? C : 0) + Σ_p A(i, p) B(p, j), with bf16
// operands (exact products) summed in fp32, k = 2·kp a multiple of kBf16K:
//   A(i, p) = a[(i / R)·R·k + (p / 32)·32·R + (i % R)·32 + p % 32]
//            (bf16 bits in the kernel set's A layout, R = Bf16Kernels::a_rows:
//             R = 1 is plain rows of k; R = 16 is AMX A tiles, 16 rows × 32
//             k contiguous. Made by pack_a_bf16, which zero-pads the columns
//             to k and the rows to a multiple of R.)
//   B(p, j) = b[(j / 16)·psb + (p / 2)·32 + (j % 16)·2 + p % 2]   (psb ≥ 32·kp)
//   C(i, j) = c[i·ldc + j] for j < n
// Callers zero-pad B's rows (pack_panels_bf16) so every kernel, AMX's
// 32-deep tiles included, runs whole steps. One 64-byte B row holds a pair of
// k for 16 columns: the layout of vdpbf16ps's and of an AMX B tile's rows
// alike. The fp32 order of the sums is the kernel's own (fixed per row: a
// row's result never depends on the other rows of the call), not the fp32
// kernels' order.
constexpr int64_t kBf16K = 32;  // k granularity (AMX: 16 pairs per tile row)
inline int64_t bf16_kpad(int64_t k) { return (k + kBf16K - 1) / kBf16K * kBf16K; }

struct Bf16GemmArgs {
  int64_t m = 0, n = 0, kp = 0;
  const uint16_t* a = nullptr;  // A, packed by pack_a_bf16 with k = 2·kp
  const uint16_t* b = nullptr;
  int64_t psb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
};
struct Bf16Kernels {
  void (*gemm)(const Bf16GemmArgs&);
  // out[j] = bf16(v[j]) (round to nearest even; NaN stays NaN) for j < n.
  void (*to_bf16)(const float* v, int64_t n, uint16_t* out);
  int64_t a_rows;     // A's row blocking R (see above): 1 or 16
  const char* instr;  // for reports
};
// Elements of a packed A of m rows and k (a multiple of kBf16K) columns.
inline int64_t bf16_a_size(const Bf16Kernels& kern, int64_t m, int64_t k) {
  return (m + kern.a_rows - 1) / kern.a_rows * kern.a_rows * k;
}
// Rows [0, m) of src (n ≤ k floats each, row stride lds) rounded to bf16 into
// the A layout of `kern` with k columns; the padding (columns n..k, rows up
// to the multiple of a_rows) is zero. dst holds bf16_a_size(kern, m, k).
void pack_a_bf16(const Bf16Kernels& kern, const float* src, int64_t m, int64_t n, int64_t lds, int64_t k,
                 uint16_t* dst);
// Row i of that layout alone: src's n ≤ k floats (n = 0: a zero row), so a
// caller can pack each row while it is still in L1 (the rows past m, up to
// a multiple of R, must be packed as zero rows too).
void pack_a_bf16_row(const Bf16Kernels& kern, const float* src, int64_t n, int64_t k, int64_t i, uint16_t* dst);
namespace scalar { extern const Bf16Kernels bf16_kernels; }
namespace avx512 { extern const Bf16Kernels bf16_kernels; }  // AVX512_BF16
// AMX: the bf16 product, and the u8 × s8 product (igemm_u8's contract) that
// replaces AVX-512 VNNI's in an otherwise AVX-512 int8 kernel set.
namespace amx {
extern const Bf16Kernels bf16_kernels;
void igemm_u8(const U8GemmArgs& g);
}

// The whole product, blocked for the caches and split over `threads` (by rows
// or by column panels; each C element is computed by one thread).
void gemm(const F32Gemm& kernel, const GemmArgs& g, int threads);

// Rows of a matrix as the B panels of a product with its transpose (an
// attention head's keys for S = Q·Kᵀ): len rows of dh values, row j at
// src + j·ld, into out[(j/16)·dh·16 + c·16 + j%16], zero past len.
void pack_rows_as_panels(const float* src, int64_t ld, int64_t len, int64_t dh, float* out);

// B packed as panels: out[(j/16)·K·16 + p·16 + j%16] = B(p, j), zero-padded
// to a whole panel. B(p, j) = src[j·K + p] when n_major, else src[p·N + j].
std::vector<float> pack_panels(const float* src, int64_t K, int64_t N, bool n_major);
// The same into out[panels(N)·K·16] (every element written).
void pack_panels(const float* src, int64_t K, int64_t N, bool n_major, float* out);

inline int64_t panels(int64_t n) { return (n + kPanel - 1) / kPanel; }

// dst[j·ldd + i] = a[i·lda + j] for i < rows, j < cols (4 × 4 SSE blocks).
void transpose_into(const float* a, int64_t lda, int64_t rows, int64_t cols, float* dst, int64_t ldd);
// out[i] = Σ_j a[i·lda + j] for i < rows, each sum from 0 in the order j = 0, 1, …
// (the bits of a scalar loop; four rows per vector, in 4 × 4 transposes).
void row_sums(const float* a, int64_t lda, int64_t rows, int64_t cols, float* out);

}  // namespace ffn::nn
