// bf16 compute for AVX512_BF16 (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mavx512bf16): the bf16 × bf16 → fp32 product of src/backends/cpu/gemm.hpp
// (Bf16GemmArgs) on vdpbf16ps, and the float → bf16 rounding on vcvtneps2bf16.
//
// Micro-kernel: MR rows × NP·16 columns of fp32 in MR·NP zmm. Per pair of k
// it loads NP panel rows of B (64 bytes: 16 columns × 2 k), broadcasts the
// pair (A(i, p), A(i, p+1)) of each row and issues MR·NP vdpbf16ps: 32 bf16
// products summed into 16 fp32 lanes, twice the multiply-adds of an fp32
// FMA. Each C element is one chain over the pairs in k order, so a row's
// result does not depend on the tile it falls in. Tiles: 12×32 for the bulk
// (24 accumulators), the rest of the rows in tiles of 1–11 rows; a partial
// last panel masks its C loads and stores (B panels are zero-padded).
// vdpbf16ps treats denormal inputs as zero and flushes denormal results.
#include <immintrin.h>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::avx512 {
namespace {

// acc += dpbf16(a, b), in place (a tied asm operand keeps the accumulators in
// registers; see s8_gemm_avx512vnni.cpp).
inline void dpbf16(__m512& acc, __m512i a, __m512i b) { asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b)); }

template <int MR, int NP>
inline void tile(const Bf16GemmArgs& g, int64_t row, int64_t panel, int last_valid) {
  const __mmask16 mask = __mmask16((1u << last_valid) - 1u);
  const bool masked = last_valid != kPanel;
  __m512 acc[MR][NP];
  float* c = g.c + row * g.ldc + panel * kPanel;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      float* cq = c + r * g.ldc + q * kPanel;
      if (!g.accumulate) acc[r][q] = _mm512_setzero_ps();
      else if (masked && q == NP - 1) acc[r][q] = _mm512_maskz_loadu_ps(mask, cq);
      else acc[r][q] = _mm512_loadu_ps(cq);
    }
  const int64_t lda = 2 * g.kp;  // A: plain rows (a_rows = 1)
  constexpr int kGroups = (MR + 2) / 3;  // rows as base[r / 3] + (r % 3)·lda (see f32_gemm_avx512.cpp)
  const uint16_t* base[kGroups];
#pragma GCC unroll 8
  for (int i = 0; i < kGroups; ++i) base[i] = g.a + (row + 3 * i) * lda;
  const uint16_t* b = g.b + panel * g.psb;
  const int64_t psb = g.psb;
#pragma GCC unroll 2
  for (int64_t p = 0; p < g.kp; ++p) {
    __m512i bv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) bv[q] = _mm512_loadu_si512(b + q * psb);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512i av = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(base[r / 3] + (r % 3) * lda));
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) dpbf16(acc[r][q], av, bv[q]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kGroups; ++i) base[i] += 2;
    b += 32;
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      float* cq = c + r * g.ldc + q * kPanel;
      if (masked && q == NP - 1) _mm512_mask_storeu_ps(cq, mask, acc[r][q]);
      else _mm512_storeu_ps(cq, acc[r][q]);
    }
}

// Rows [row, row + MR) across every panel: NP at a time, then one at a time;
// the last panel may be partial.
template <int MR, int NP>
void row_strip(const Bf16GemmArgs& g, int64_t row, int64_t np, int last) {
  int64_t q = 0;
  for (; q + NP < np; q += NP) tile<MR, NP>(g, row, q, kPanel);
  if (q + NP == np) {
    tile<MR, NP>(g, row, q, last);
    return;
  }
  for (; q + 1 < np; ++q) tile<MR, 1>(g, row, q, kPanel);
  tile<MR, 1>(g, row, q, last);
}

void gemm_bf16(const Bf16GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  const int64_t np = panels(g.n);
  const int last = int(g.n - (np - 1) * kPanel);
  const int64_t m12 = g.m / 12 * 12;
  int64_t q = 0;
  for (; q + 2 <= np; q += 2)  // the pair of B panels stays in L1 across the rows
    for (int64_t r = 0; r < m12; r += 12) tile<12, 2>(g, r, q, q + 2 == np ? last : int(kPanel));
  if (q < np)
    for (int64_t r = 0; r < m12; r += 12) tile<12, 1>(g, r, q, last);
  switch (g.m - m12) {
    case 1: row_strip<1, 8>(g, m12, np, last); break;
    case 2: row_strip<2, 4>(g, m12, np, last); break;
    case 3: row_strip<3, 4>(g, m12, np, last); break;
    case 4: row_strip<4, 2>(g, m12, np, last); break;
    case 5: row_strip<5, 2>(g, m12, np, last); break;
    case 6: row_strip<6, 2>(g, m12, np, last); break;
    case 7: row_strip<7, 2>(g, m12, np, last); break;
    case 8: row_strip<8, 2>(g, m12, np, last); break;
    case 9: row_strip<9, 2>(g, m12, np, last); break;
    case 10: row_strip<10, 2>(g, m12, np, last); break;
    case 11: row_strip<11, 2>(g, m12, np, last); break;
    default: break;
  }
}

}  // namespace

// Also used by the AMX kernels (src/backends/cpu/kernels/amx/), whose CPUs all have AVX512_BF16.
void to_bf16(const float* v, int64_t n, uint16_t* out) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(v + j)));
  if (j < n) {
    const __mmask16 m = __mmask16((1u << (n - j)) - 1u);
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, v + j));
    _mm256_mask_storeu_epi16(out + j, m, h);
  }
}

const Bf16Kernels bf16_kernels{&gemm_bf16, &to_bf16, 1, "AVX-512 vdpbf16ps zmm"};

}  // namespace ffn::nn::avx512
