// int8 kernels for AVX-512 VNNI (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mavx512vnni): the u8 × s8 product of src/backends/cpu/gemm.hpp
// (U8GemmArgs) and the u8 activation quantizer, matching the portable
// definitions (src/backends/cpu/quantize.hpp, src/backends/cpu/kernels/scalar/) bit for bit.
//
// Micro-kernel: MR rows × NP·16 columns of int32 in MR·NP zmm. Per quad of k
// it loads NP panel rows of B (64 bytes: 16 columns × 4 k), broadcasts the
// quad (A(i, p..p+3)) of each row and issues MR·NP vpdpbusd: 64 u8 × s8
// multiply-adds each, into int32 without intermediate saturation — 8× the
// multiply-adds of an fp32 FMA, 4× those of AVX2's vpmaddwd. After the last
// quad the zero-point term zp[i]·colsum[j] is subtracted, in int32 (exact).
// Tiles: 12×32 (24 accumulators) for the bulk, the rest of the rows in tiles
// of 1–11 rows over up to 8 panels.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::avx512 {
namespace {

// acc += dpbusd(a, b), in place: through the intrinsic GCC 12 copies each
// accumulator and spills it to the stack on every k step (measured: 44% of
// the vpdpbusd peak inside the layer); the tied asm operand keeps all 24 in
// registers.
inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

template <int MR, int NP>
inline void tile(const U8GemmArgs& g, int64_t row, int64_t panel) {
  __m512i acc[MR][NP];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_setzero_si512();
  constexpr int kGroups = (MR + 2) / 3;  // rows as base[r / 3] + (r % 3)·lda (see f32_gemm_avx512.cpp)
  const uint8_t* base[kGroups];
#pragma GCC unroll 8
  for (int i = 0; i < kGroups; ++i) base[i] = g.a + (row + 3 * i) * g.lda;
  const int8_t* b = g.b + panel * g.psb;
  const int64_t lda = g.lda, psb = g.psb;
  for (int64_t p = 0; p < g.kq; ++p) {
    __m512i bv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) bv[q] = _mm512_loadu_si512(b + q * psb);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, base[r / 3] + (r % 3) * lda, 4);
      const __m512i av = _mm512_set1_epi32(quad);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) dpbusd(acc[r][q], av, bv[q]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kGroups; ++i) base[i] += 4;
    b += 64;
  }
  int32_t* c = g.c + row * g.ldc + panel * kPanel;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    const __m512i zp = _mm512_set1_epi32(g.zp[row + r]);
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      const __m512i cs = _mm512_loadu_si512(g.colsum + (panel + q) * kPanel);
      _mm512_storeu_si512(c + r * g.ldc + q * kPanel, _mm512_sub_epi32(acc[r][q], _mm512_mullo_epi32(zp, cs)));
    }
  }
}

template <int MR, int NP>
void row_strip(const U8GemmArgs& g, int64_t row, int64_t np) {
  int64_t q = 0;
  for (; q + NP <= np; q += NP) tile<MR, NP>(g, row, q);
  for (; q < np; ++q) tile<MR, 1>(g, row, q);
}

void igemm_u8(const U8GemmArgs& g) {
  const int64_t np = panels(g.n);
  const int64_t m12 = g.m / 12 * 12;
  int64_t q = 0;
  for (; q + 2 <= np; q += 2)  // the pair of B panels stays in L1 across the rows
    for (int64_t r = 0; r < m12; r += 12) tile<12, 2>(g, r, q);
  if (q < np)
    for (int64_t r = 0; r < m12; r += 12) tile<12, 1>(g, r, q);
  switch (g.m - m12) {
    case 1: row_strip<1, 8>(g, m12, np); break;
    case 2: row_strip<2, 4>(g, m12, np); break;
    case 3: row_strip<3, 4>(g, m12, np); break;
    case 4: row_strip<4, 2>(g, m12, np); break;
    case 5: row_strip<5, 2>(g, m12, np); break;
    case 6: row_strip<6, 2>(g, m12, np); break;
    case 7: row_strip<7, 2>(g, m12, np); break;
    case 8: row_strip<8, 2>(g, m12, np); break;
    case 9: row_strip<9, 2>(g, m12, np); break;
    case 10: row_strip<10, 2>(g, m12, np); break;
    case 11: row_strip<11, 2>(g, m12, np); break;
    default: break;
  }
}

// quantize_row_u8_ref, 16 lanes at a time: the same range, the same scale
// (act_scale), the same float operations per element.
float quantize_row_u8(const float* v, int64_t n, uint8_t* u, int32_t* zp_out) {
  __m512 lo16 = _mm512_setzero_ps(), hi16 = _mm512_setzero_ps();
  __mmask16 bad = 0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_loadu_ps(v + j);
    lo16 = _mm512_min_ps(lo16, x);
    hi16 = _mm512_max_ps(hi16, x);
    const __m512 z = _mm512_sub_ps(x, x);  // NaN exactly for NaN and ±Inf
    bad |= _mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q);
  }
  float lo = std::min(0.0f, _mm512_reduce_min_ps(lo16)), hi = std::max(0.0f, _mm512_reduce_max_ps(hi16));
  bool finite = bad == 0;
  extend_range(v + j, n - j, lo, hi, finite);
  std::fill(u + n, u + (n + 3) / 4 * 4, uint8_t(0));
  const ActScale q = act_scale(lo, hi, finite);
  *zp_out = int32_t(q.zp);
  if (!q.levels) {
    std::fill(u, u + n, uint8_t(0));
    return q.s;
  }
  const __m512 vinv = _mm512_set1_ps(q.inv), vzp = _mm512_set1_ps(q.zp);
  const __m512 vmax = _mm512_set1_ps(255.0f), vmin = _mm512_setzero_ps();
  j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 l = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(v + j), vinv),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    l = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(l, vzp), vmin), vmax);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + j), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(l)));
  }
  for (; j < n; ++j) u[j] = uint8_t(q.level(v[j]));
  return q.s;
}

void dequant(const int32_t* acc, int64_t n, float s_a, const float* s_w, const float* prev, float* out) {
  const __m512 sa = _mm512_set1_ps(s_a);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 x = _mm512_cvtepi32_ps(_mm512_loadu_si512(acc + j));
    const __m512 s = _mm512_mul_ps(sa, _mm512_loadu_ps(s_w + j));
    const __m512 p = prev ? _mm512_loadu_ps(prev + j) : _mm512_setzero_ps();
    _mm512_storeu_ps(out + j, _mm512_fmadd_ps(x, s, p));
  }
  for (; j < n; ++j) out[j] = std::fma(float(acc[j]), s_a * s_w[j], prev ? prev[j] : 0.0f);
}

// ---- the int16 × int8 pair product (IGemmArgs; the int8 linear until 2026-11-30) --
// Per pair of k: NP panel rows of B (32 bytes: 16 columns × 2 k) widened by
// vpmovsxbw to 16 int16 pairs in one zmm, the pair (A(i, p), A(i, p+1)) of
// each row broadcast, MR·NP vpdpwssd (32 int16 multiply-adds each, summed
// pairwise into int32: exact, as the reference). Twice AVX2's vpmaddwd +
// vpaddd per instruction, on twice the width.
inline void dpwssd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

constexpr int64_t kPairBlock = 256;  // k pairs per block: NP = 2 panels of B are 16 KiB, L1

template <int MR, int NP>
inline void pair_tile(const IGemmArgs& g, int64_t row, int64_t panel, int64_t p0, int64_t p1, bool accumulate) {
  __m512i acc[MR][NP];
  int32_t* c = g.c + row * g.ldc + panel * kPanel;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q)
      acc[r][q] = accumulate ? _mm512_loadu_si512(c + r * g.ldc + q * kPanel) : _mm512_setzero_si512();
  const int16_t* a = g.a + row * g.lda;
  const int8_t* b = g.b + panel * g.psb;
#pragma GCC unroll 2
  for (int64_t p = p0; p < p1; ++p) {
    __m512i bv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q)
      bv[q] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + q * g.psb + p * 32)));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * g.lda + 2 * p, 4);
      const __m512i av = _mm512_set1_epi32(pair);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) dpwssd(acc[r][q], av, bv[q]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) _mm512_storeu_si512(c + r * g.ldc + q * kPanel, acc[r][q]);
}

template <int MR>
void pair_strip(const IGemmArgs& g, int64_t row, int64_t np, int64_t p0, int64_t p1, bool accumulate) {
  int64_t q = 0;
  for (; q + 2 <= np; q += 2) pair_tile<MR, 2>(g, row, q, p0, p1, accumulate);
  if (q < np) pair_tile<MR, 1>(g, row, q, p0, p1, accumulate);
}

using PairStrip = void (*)(const IGemmArgs&, int64_t, int64_t, int64_t, int64_t, bool);
constexpr PairStrip kPairStrips[] = {nullptr, &pair_strip<1>, &pair_strip<2>, &pair_strip<3>, &pair_strip<4>,
                                     &pair_strip<5>, &pair_strip<6>, &pair_strip<7>, &pair_strip<8>,
                                     &pair_strip<9>, &pair_strip<10>, &pair_strip<11>, &pair_strip<12>};

void igemm_pairs(const IGemmArgs& g) {
  const int64_t np = panels(g.n);
  if (g.kp == 0) {
    for (int64_t i = 0; i < g.m; ++i) std::fill(g.c + i * g.ldc, g.c + i * g.ldc + np * kPanel, 0);
    return;
  }
  // Rows in near-equal tiles of at most 12 (24 accumulators at NP = 2).
  const int64_t tiles = (g.m + 11) / 12;
  for (int64_t p0 = 0; p0 < g.kp; p0 += kPairBlock) {
    const int64_t p1 = std::min(g.kp, p0 + kPairBlock);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r0 = g.m * t / tiles, r1 = g.m * (t + 1) / tiles;
      kPairStrips[r1 - r0](g, r0, np, p0, p1, p0 > 0);
    }
  }
}

// fp32_input_part (src/backends/cpu/quantize.hpp) compiled for this ISA.
void fp32_part(const float* xs, int64_t k, int64_t rows, const float* wt, int64_t ld, const float* b, int64_t n,
               float* prev, int64_t ldp) {
  fp32_input_part(xs, k, rows, wt, ld, b, n, prev, ldp);
}

}  // namespace

// quantize_row (for the pair product) is AVX2's, set where the kernel table is
// built (src/backends/cpu/kernel_config.cpp).
const Int8Kernels int8_kernels_vnni{&igemm_pairs, &igemm_u8, nullptr, &quantize_row_u8, &dequant, &fp32_part};

}  // namespace ffn::nn::avx512
