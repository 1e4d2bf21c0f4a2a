// f32 GEMM block for AVX2 + FMA + F16C (compiled with -mavx2 -mfma -mf16c),
// with float32, bf16 or fp16 B. Contract: src/backends/cpu/gemm.hpp.
//
// 16-bit B is widened in registers as it is loaded: bf16 by a shift and a
// mask (the panel row interleaves columns j and j + 8 in one 32-bit lane),
// fp16 by vcvtph2ps. Packed panels are whole, so those loads are never masked.
//
// Micro-kernel: an MR × (NP·16) tile of C lives in MR·NP·2 ymm accumulators;
// per k step it loads NP·2 vectors of B, broadcasts MR values of A and issues
// MR·NP·2 FMAs. Shapes: 6×16 for the bulk (12 accumulators + 2 B + 1 A = 15
// registers), and for the last rows 1×64, 2×32, 3/4/5×16, so that even a
// single row keeps ≥ 6 independent FMA chains in flight (FMA latency 4–5
// cycles). A partial last panel uses masked loads and stores.
#include <immintrin.h>

#include "backends/cpu/gemm.hpp"

namespace ffn::nn::avx2 {
namespace {

alignas(32) const int32_t kMaskTable[32] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                            0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0};
// Lanes j < valid of columns 0–7 (lo) and 8–15 (hi) of a panel, valid in [1, 16].
inline __m256i mask_lo(int valid) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 16 - valid)); }
inline __m256i mask_hi(int valid) {
  return valid >= 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 24 - valid))
                    : _mm256_setzero_si256();
}

// The 16 floats of B row `b` (columns 0–7, 8–15); masked only for a float tail.
template <bool Tail>
inline void load_b(const float* b, __m256i ml, __m256i mh, __m256& lo, __m256& hi) {
  if constexpr (Tail) {
    lo = _mm256_maskload_ps(b, ml);
    hi = _mm256_maskload_ps(b + 8, mh);
  } else {
    lo = _mm256_loadu_ps(b);
    hi = _mm256_loadu_ps(b + 8);
  }
}
template <bool Tail>
inline void load_b(const bf16_t* b, __m256i, __m256i, __m256& lo, __m256& hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int32_t(0xffff0000u))));
}
template <bool Tail>
inline void load_b(const fp16_t* b, __m256i, __m256i, __m256& lo, __m256& hi) {
  lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8)));
}

// The first row tile over a panel (`first`) reads it from beyond L2 and, when
// B is in panels (ldb = 16), prefetches into L2 as it goes, per k step the
// line kStreamAhead bytes ahead in each panel (as the AVX-512 kernel:
// src/backends/cpu/kernels/avx512/f32_gemm_avx512.cpp). These kernels on a
// Zen 4 (FFN_ISA=avx2), one 16-token text on all-MiniLM-L6-v2, 2 threads:
// 0.73× the time.
constexpr int64_t kStreamAhead = 4096;

template <int MR, int NP, bool Tail, typename TB>
inline void tile(const GemmArgsT<TB>& g, int64_t row, int64_t panel, int valid, bool first = false) {
  __m256 acc[MR][NP][2];
  __m256i ml = _mm256_setzero_si256(), mh = _mm256_setzero_si256();
  if constexpr (Tail) {
    ml = mask_lo(valid);
    mh = mask_hi(valid);
  }
  float* c = g.c + row * g.ldc + panel * kPanel;
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      float* cq = c + r * g.ldc + q * kPanel;
      if (!g.accumulate) {
        acc[r][q][0] = _mm256_setzero_ps();
        acc[r][q][1] = _mm256_setzero_ps();
      } else if (Tail && q == NP - 1) {
        acc[r][q][0] = _mm256_maskload_ps(cq, ml);
        acc[r][q][1] = _mm256_maskload_ps(cq + 8, mh);
      } else {
        acc[r][q][0] = _mm256_loadu_ps(cq);
        acc[r][q][1] = _mm256_loadu_ps(cq + 8);
      }
    }
  const float* a = g.a + row * g.rsa;
  const TB* b = g.b + panel * g.psb;
  const int64_t rsa = g.rsa, csa = g.csa, ldb = g.ldb, psb = g.psb, k = g.k;
  const bool stream = first && ldb == kPanel;
#pragma GCC unroll 4
  for (int64_t p = 0; p < k; ++p) {
    if (stream) {
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q)
        _mm_prefetch(reinterpret_cast<const char*>(b + q * psb) + kStreamAhead, _MM_HINT_T1);
    }
    __m256 bv[NP][2];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      if (Tail && q == NP - 1) load_b<true>(b + q * psb, ml, mh, bv[q][0], bv[q][1]);
      else load_b<false>(b + q * psb, ml, mh, bv[q][0], bv[q][1]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * rsa);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        acc[r][q][0] = _mm256_fmadd_ps(av, bv[q][0], acc[r][q][0]);
        acc[r][q][1] = _mm256_fmadd_ps(av, bv[q][1], acc[r][q][1]);
      }
    }
    a += csa;
    b += ldb;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      float* cq = c + r * g.ldc + q * kPanel;
      if (Tail && q == NP - 1) {
        _mm256_maskstore_ps(cq, ml, acc[r][q][0]);
        _mm256_maskstore_ps(cq + 8, mh, acc[r][q][1]);
      } else {
        _mm256_storeu_ps(cq, acc[r][q][0]);
        _mm256_storeu_ps(cq + 8, acc[r][q][1]);
      }
    }
}

// Rows [row, row + MR) across every panel: NP panels at a time, then single
// panels, then the partial panel.
template <int MR, int NP, typename TB>
void row_strip(const GemmArgsT<TB>& g, int64_t row, int64_t full, int tail_valid) {
  int64_t q = 0;
  for (; q + NP <= full; q += NP) tile<MR, NP, false>(g, row, q, kPanel, true);
  for (; q < full; ++q) tile<MR, 1, false>(g, row, q, kPanel, true);
  if (tail_valid) tile<MR, 1, true>(g, row, full, tail_valid, true);
}

// The rows past the 6-row tiles, over panels [q, q + G) (G = NP, or fewer
// at the end): a 1- or 2-row tile spans several panels so that it has enough
// independent sums (4 and 8 chains per k) to hide the FMA latency.
template <int MR, int NP, typename TB>
void rest_rows(const GemmArgsT<TB>& g, int64_t row, int64_t q, int64_t q_end) {
  if (q + NP <= q_end) tile<MR, NP, false>(g, row, q, kPanel);
  else
    for (; q < q_end; ++q) tile<MR, 1, false>(g, row, q, kPanel);
}

template <typename TB>
void block(const GemmArgsT<TB>& g) {
  const int64_t np = panels(g.n);
  const int last = int(g.n - (np - 1) * kPanel);  // columns in the last panel, 1..16
  const int tail_valid = last == kPanel ? 0 : last;
  const int64_t full = tail_valid ? np - 1 : np;
  const int64_t m6 = g.m / 6 * 6;
  const int rest = int(g.m - m6);
  if (m6 == 0) {  // fewer than 6 rows: one sweep over the panels
    switch (rest) {
      case 1: row_strip<1, 4>(g, 0, full, tail_valid); break;
      case 2: row_strip<2, 2>(g, 0, full, tail_valid); break;
      case 3: row_strip<3, 1>(g, 0, full, tail_valid); break;
      case 4: row_strip<4, 1>(g, 0, full, tail_valid); break;
      case 5: row_strip<5, 1>(g, 0, full, tail_valid); break;
      default: break;
    }
    return;
  }
  // Panel by panel (a group of G panels stays in L1/L2), 6 rows at a time,
  // then the last rows on the same panels: B is read from memory once (the
  // last rows used to sweep every panel again, which at T = 16 was 15 % of
  // MiniLM's time). The order of the tiles changes no sum.
  const int64_t G = rest == 1 ? 4 : rest == 2 ? 2 : 1;
  for (int64_t q0 = 0; q0 < full; q0 += G) {
    const int64_t q1 = std::min(full, q0 + G);
    for (int64_t q = q0; q < q1; ++q)
      for (int64_t r = 0; r < m6; r += 6) tile<6, 1, false>(g, r, q, kPanel, r == 0);
    switch (rest) {
      case 1: rest_rows<1, 4>(g, m6, q0, q1); break;
      case 2: rest_rows<2, 2>(g, m6, q0, q1); break;
      case 3: tile<3, 1, false>(g, m6, q0, kPanel); break;
      case 4: tile<4, 1, false>(g, m6, q0, kPanel); break;
      case 5: tile<5, 1, false>(g, m6, q0, kPanel); break;
      default: break;
    }
  }
  if (tail_valid) {
    for (int64_t r = 0; r < m6; r += 6) tile<6, 1, true>(g, r, full, tail_valid, r == 0);
    switch (rest) {
      case 1: tile<1, 1, true>(g, m6, full, tail_valid); break;
      case 2: tile<2, 1, true>(g, m6, full, tail_valid); break;
      case 3: tile<3, 1, true>(g, m6, full, tail_valid); break;
      case 4: tile<4, 1, true>(g, m6, full, tail_valid); break;
      case 5: tile<5, 1, true>(g, m6, full, tail_valid); break;
      default: break;
    }
  }
}

}  // namespace

void gemm_block(const GemmArgs& g) { block(g); }
void gemm_block(const GemmArgsT<bf16_t>& g) { block(g); }
void gemm_block(const GemmArgsT<fp16_t>& g) { block(g); }

}  // namespace ffn::nn::avx2
