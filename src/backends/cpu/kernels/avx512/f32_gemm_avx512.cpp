// f32 GEMM block for AVX-512 F (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mfma -mf16c), with float32, bf16 or fp16 B. Contract: src/backends/cpu/gemm.hpp.
//
// One 16-column B panel row is exactly one zmm. Micro-kernel: an MR × (NP·16)
// tile of C lives in MR·NP zmm accumulators; per k step it loads NP panel rows
// of B, broadcasts MR values of A and issues MR·NP FMAs, each C element one
// fma chain over k in order, as on every ISA (so results are bitwise those of
// the AVX2 kernel). Shapes: 12×32 for the bulk (24 accumulators + 2 B + 1–2
// broadcasts of the 32 registers; 14 loads per 24 FMAs, under the two load
// ports' rate at two FMAs per cycle), and for the last rows of a block 1×128,
// 2×64, 3×48 and 4..11×32, so every tile keeps ≥ 8 independent chains in
// flight (FMA latency 4 cycles × 2 pipes). A partial last panel uses k-masks
// (__mmask16) on its B loads and its C loads and stores: no mask tables.
//
// 16-bit B is widened in registers as it is loaded: fp16 by vcvtph2ps, bf16
// (panel rows interleave columns j and j + 8 in one 32-bit lane, the AVX2
// layout) by a shift, a mask and one insert.
#include <immintrin.h>

#include "backends/cpu/gemm.hpp"

namespace ffn::nn::avx512 {
namespace {

// The first row tile of a column pair (or panel) is the one that reads its B
// from beyond L2: when B is in panels (ldb = 16), it also prefetches into L2,
// per k step, the line kStreamAhead bytes ahead in each panel (64 k steps
// ahead for fp32 B). A product of few rows (one short text: 16 rows) is
// otherwise compute and waiting in turn. On a Zen 4, 2 threads,
// all-MiniLM-L6-v2 on one 16-token text (42 MB of fp32 weights, past L3):
// 0.84× the time (median of 12 alternating rounds' ratios; 1 thread 0.81×;
// 6 and 8 KiB ahead 0.87× and 0.90×); batches of 32 unchanged within noise
// (bench/results/2026-12-08-zen4-bf16-embed-latency.md).
constexpr int64_t kStreamAhead = 4096;

inline __m512 load_b(const float* b, __mmask16 m, bool masked) {
  return masked ? _mm512_maskz_loadu_ps(m, b) : _mm512_loadu_ps(b);
}
inline __m512 load_b(const bf16_t* b, __mmask16, bool) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  const __m256i lo = _mm256_slli_epi32(v, 16);                                 // columns 0–7
  const __m256i hi = _mm256_and_si256(v, _mm256_set1_epi32(int32_t(0xffff0000u)));  // columns 8–15
  return _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}
inline __m512 load_b(const fp16_t* b, __mmask16, bool) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
}

// MR rows × NP panels at (row, panel); the last of the NP panels has `valid`
// columns (16 unless Tail).
// When `next` is given, the tile also prefetches into L1 the NP panels that
// start there (npsb apart), one row of each per k step: the next tile
// column's B, or the next call's first panels (GemmArgsT::next_b), fetched
// while the last row tile of this column computes; the lines it evicts are
// this column's rows that the tile has already used. (Spreading the fetch
// over every row tile of the column was measured: +1 % at T = 512, none at
// 4096, and 2-3 % slower in the backward at T = 8.) `first`: the column's
// first row tile, which streams B into L2 ahead of itself (kStreamAhead; two
// more instructions per k step than the loads and fmas counted above).
template <int MR, int NP, bool Tail, typename TB>
inline void tile(const GemmArgsT<TB>& g, int64_t row, int64_t panel, int valid, const TB* next = nullptr,
                 int64_t npsb = 0, bool first = false) {
  const __mmask16 mask = Tail ? __mmask16((1u << valid) - 1u) : __mmask16(0xffff);
  __m512 acc[MR][NP];
  float* c = g.c + row * g.ldc + panel * kPanel;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      float* cq = c + r * g.ldc + q * kPanel;
      if (!g.accumulate) acc[r][q] = _mm512_setzero_ps();
      else if (Tail && q == NP - 1) acc[r][q] = _mm512_maskz_loadu_ps(mask, cq);
      else acc[r][q] = _mm512_loadu_ps(cq);
    }
  // Rows are addressed as base[r / 3] + (r % 3)·rsa: one index register and
  // MR/3 pointers (x86 scales 1 and 2), instead of MR pointers that spill.
  constexpr int kGroups = (MR + 2) / 3;
  const float* base[kGroups];
#pragma GCC unroll 8
  for (int i = 0; i < kGroups; ++i) base[i] = g.a + (row + 3 * i) * g.rsa;
  const TB* b = g.b + panel * g.psb;
  const int64_t rsa = g.rsa, csa = g.csa, ldb = g.ldb, psb = g.psb, k = g.k;
  const bool stream = first && ldb == kPanel;
#pragma GCC unroll 2
  for (int64_t p = 0; p < k; ++p) {
    if (stream) {
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q)
        _mm_prefetch(reinterpret_cast<const char*>(b + q * psb) + kStreamAhead, _MM_HINT_T1);
    }
    __m512 bv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) bv[q] = load_b(b + q * psb, mask, Tail && q == NP - 1);
    if (next) {
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) _mm_prefetch(reinterpret_cast<const char*>(next + q * npsb), _MM_HINT_T0);
      next += ldb;
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(base[r / 3][(r % 3) * rsa]);
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kGroups; ++i) base[i] += csa;
    b += ldb;
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      float* cq = c + r * g.ldc + q * kPanel;
      if (Tail && q == NP - 1) _mm512_mask_storeu_ps(cq, mask, acc[r][q]);
      else _mm512_storeu_ps(cq, acc[r][q]);
    }
}

// Rows [row, row + MR) across every panel: NP at a time, then one at a time,
// then the partial panel (the only row tile there: it streams B).
template <int MR, int NP, typename TB>
void row_strip(const GemmArgsT<TB>& g, int64_t row, int64_t full, int tail_valid) {
  int64_t q = 0;
  for (; q + NP <= full; q += NP) tile<MR, NP, false>(g, row, q, kPanel, static_cast<const TB*>(nullptr), 0, true);
  for (; q < full; ++q) tile<MR, 1, false>(g, row, q, kPanel, static_cast<const TB*>(nullptr), 0, true);
  if (tail_valid) tile<MR, 1, true>(g, row, full, tail_valid, static_cast<const TB*>(nullptr), 0, true);
}

constexpr int kMr = 12;  // tallest tile (KernelConfig::mr)

// One row tile of height H (4..12) over a pair of panels, one panel, or the
// partial panel; as tables indexed by H so that a block of any height is cut
// into tiles of nearly equal height (64 rows: 11, 11, 10, 11, 11, 10), each
// with ≥ 8 independent chains, rather than 12-row tiles plus a thin rest.
template <typename TB>
using PairFn = void (*)(const GemmArgsT<TB>&, int64_t, int64_t, int, const TB*, int64_t, bool);
template <typename TB>
struct Tiles {
  static constexpr PairFn<TB> pair[] = {&tile<4, 2, false, TB>, &tile<5, 2, false, TB>, &tile<6, 2, false, TB>,
                                        &tile<7, 2, false, TB>, &tile<8, 2, false, TB>, &tile<9, 2, false, TB>,
                                        &tile<10, 2, false, TB>, &tile<11, 2, false, TB>, &tile<12, 2, false, TB>};
  static constexpr PairFn<TB> one[] = {&tile<4, 1, false, TB>, &tile<5, 1, false, TB>, &tile<6, 1, false, TB>,
                                       &tile<7, 1, false, TB>, &tile<8, 1, false, TB>, &tile<9, 1, false, TB>,
                                       &tile<10, 1, false, TB>, &tile<11, 1, false, TB>, &tile<12, 1, false, TB>};
  static constexpr PairFn<TB> tail[] = {&tile<4, 1, true, TB>, &tile<5, 1, true, TB>, &tile<6, 1, true, TB>,
                                        &tile<7, 1, true, TB>, &tile<8, 1, true, TB>, &tile<9, 1, true, TB>,
                                        &tile<10, 1, true, TB>, &tile<11, 1, true, TB>, &tile<12, 1, true, TB>};
};

template <typename TB>
void block(const GemmArgsT<TB>& g) {
  const int64_t np = panels(g.n);
  const int last = int(g.n - (np - 1) * kPanel);  // columns in the last panel, 1..16
  const int tail_valid = last == kPanel ? 0 : last;
  const int64_t full = tail_valid ? np - 1 : np;
  switch (g.m) {  // fewer than 4 rows: wide strips keep ≥ 8 chains
    case 0: return;
    case 1: row_strip<1, 8>(g, 0, full, tail_valid); return;
    case 2: row_strip<2, 4>(g, 0, full, tail_valid); return;
    case 3: row_strip<3, 3>(g, 0, full, tail_valid); return;
    default: break;
  }
  const int64_t tiles = (g.m + kMr - 1) / kMr;
  auto row0 = [&](int64_t t) { return g.m * t / tiles; };
  auto height = [&](int64_t t) { return int(row0(t + 1) - row0(t)); };  // 4..12
  // Bulk: a pair of panels at a time (32 KiB of B at k = 256 stays in L1),
  // every row tile; the last row tile prefetches the next pair, or during
  // the last pair the next call's first one (when given).
  int64_t q = 0;
  for (; q + 2 <= full; q += 2) {
    const bool last_pair = q + 4 > full;
    const TB* next = last_pair ? g.next_b : g.b + (q + 2) * g.psb;
    const int64_t npsb = last_pair ? g.next_psb : g.psb;
    for (int64_t t = 0; t < tiles; ++t)
      Tiles<TB>::pair[height(t) - 4](g, row0(t), q, kPanel, t + 1 == tiles ? next : nullptr, npsb, t == 0);
  }
  if (q < full)
    for (int64_t t = 0; t < tiles; ++t) Tiles<TB>::one[height(t) - 4](g, row0(t), q, kPanel, nullptr, 0, t == 0);
  if (tail_valid)
    for (int64_t t = 0; t < tiles; ++t) Tiles<TB>::tail[height(t) - 4](g, row0(t), full, tail_valid, nullptr, 0, t == 0);
}

}  // namespace

void gemm_block(const GemmArgs& g) { block(g); }
void gemm_block(const GemmArgsT<bf16_t>& g) { block(g); }
void gemm_block(const GemmArgsT<fp16_t>& g) { block(g); }

}  // namespace ffn::nn::avx512
