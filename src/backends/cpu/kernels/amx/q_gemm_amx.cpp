// Block-quantized product on AMX tiles (src/backends/cpu/qgemm.hpp), for
// prompts: 16 tokens × a group's 16 rows per tile product. Compiled with
// the AMX flags; chosen only where cpu_features().amx (see amx_gemm.cpp for
// the tile permission).
//
// Per (group, 16 tokens, block of 32): A = the tokens' activation plane (16
// rows × 32 s8, read in place from QActs with the row stride k), B = the
// group's block in the VNNI layout (8 rows of 4 k × 16 rows; that is how
// QPanels stores it: Q8_0's 8 vectors as they are, Q4's 4 vectors unpacked
// into low and high nibbles in a 512-byte scratch), C = 16 tokens × 16 rows
// of int32. Two tile products per block, one per plane (TDPBSUD: s8 × u8
// for Q4, TDPBSSD: s8 × s8 for Q8_0), give the exact sums; C is stored and
// each token's row is finished as the rule says (isum = 255 hi + lo, minus
// Q4_0's 8 ΣQ; acc = fma(d · dx, float(isum), acc); Q4_1: acc = fma(m, sx,
// acc)) in a zmm per token, lanes = rows, the AVX-512 VNNI kernel's lanes and
// order: the same bits. Tokens past the last 16 go to that kernel.
//
// The C tiles of successive blocks alternate between two pairs, so a
// block's tile products need not wait for the previous block's C to be
// stored.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/qgemm.hpp"

namespace ffn::nn::amx {
namespace {

// tmm0/1: A (hi, lo planes: 16 tokens × 32 bytes); tmm2: B (8 × 64 bytes);
// tmm4–7: C (16 × 16 int32), two pairs.
struct alignas(64) QTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {32, 32, 64, 0, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 8, 0, 16, 16, 16, 16};
};
constexpr QTileConfig kQTileConfig{};  // in memory: see amx_gemm.cpp's kTileConfig

struct QTileScope {
  QTileScope() { _tile_loadconfig(&kQTileConfig); }
  ~QTileScope() { _tile_release(); }
  QTileScope(const QTileScope&) = delete;
  QTileScope& operator=(const QTileScope&) = delete;
};

constexpr int kTok = 16;

// The tile products of block b into C pair P (tmm4/5 or tmm6/7).
template <GgmlType kType, int P>
inline void products(const QPanels& w, const QActs& x, int64_t g, int64_t t, int64_t b, uint8_t* bscratch) {
  const uint8_t* blk = w.at(g, b);
  const int64_t k = w.k;
  if constexpr (kType == GgmlType::q8_0) {
    _tile_loadd(2, blk, 64);
  } else {
    const __m512i lo = _mm512_set1_epi8(0x0f);
    for (int i = 0; i < 4; ++i) {
      const __m512i v = _mm512_loadu_si512(blk + 64 * i);
      _mm512_store_si512(bscratch + 64 * i, _mm512_and_si512(v, lo));
      _mm512_store_si512(bscratch + 64 * (i + 4), _mm512_and_si512(_mm512_srli_epi16(v, 4), lo));
    }
    // GCC's tileloadd has no memory operand: without this barrier it may
    // drop or delay the stores above, which nothing else reads.
    asm volatile("" ::: "memory");
    _tile_loadd(2, bscratch, 64);
  }
  // Nor does it read the activation planes as memory: they were written by an
  // opaque call before this one today, but a barrier keeps a fused or inlined
  // quantizer's stores ahead of the loads too.
  asm volatile("" ::: "memory");
  _tile_loadd(0, x.hi.data() + t * k + b * kQBlock, k);
  _tile_loadd(1, x.lo.data() + t * k + b * kQBlock, k);
  // The intrinsics paste the tile number into the instruction: literals only.
  if constexpr (P == 0) {
    _tile_zero(4);
    _tile_zero(5);
    if constexpr (kType == GgmlType::q8_0) {
      _tile_dpbssd(4, 0, 2);
      _tile_dpbssd(5, 1, 2);
    } else {
      _tile_dpbsud(4, 0, 2);
      _tile_dpbsud(5, 1, 2);
    }
    _tile_stored(4, bscratch + 512, 64);
    _tile_stored(5, bscratch + 512 + 1024, 64);
  } else {
    _tile_zero(6);
    _tile_zero(7);
    if constexpr (kType == GgmlType::q8_0) {
      _tile_dpbssd(6, 0, 2);
      _tile_dpbssd(7, 1, 2);
    } else {
      _tile_dpbsud(6, 0, 2);
      _tile_dpbsud(7, 1, 2);
    }
    _tile_stored(6, bscratch + 512 + 2048, 64);
    _tile_stored(7, bscratch + 512 + 2048 + 1024, 64);
  }
}

// The rule's float operations of block b for the 16 tokens, from C pair P.
template <GgmlType kType, int P>
inline void finish(const QPanels& w, const QActs& x, int64_t g, int64_t t, int64_t b, const uint8_t* bscratch,
                   __m512 (&acc)[kTok]) {
  constexpr int64_t qbytes = builtin_quant_type(kType)->panels.quant_bytes;
  const uint8_t* blk = w.at(g, b);
  const int32_t* ch = reinterpret_cast<const int32_t*>(bscratch + 512 + P * 2048);
  const int32_t* cl = ch + 256;
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qbytes)));
  __m512 m = _mm512_setzero_ps();
  if constexpr (kType == GgmlType::q4_1)
    m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qbytes + 32)));
  const int64_t nb = w.blocks;
  for (int u = 0; u < kTok; ++u) {
    const int64_t at = (t + u) * nb + b;
    const __m512i h = _mm512_load_si512(ch + 16 * u);
    __m512i s = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(h, 8), h), _mm512_load_si512(cl + 16 * u));
    if constexpr (kType == GgmlType::q4_0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(8 * x.sum[size_t(at)]));
    const __m512 p = _mm512_mul_ps(d, _mm512_set1_ps(x.d[size_t(at)]));
    acc[u] = _mm512_fmadd_ps(p, _mm512_cvtepi32_ps(s), acc[u]);
    if constexpr (kType == GgmlType::q4_1) acc[u] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.s[size_t(at)]), acc[u]);
  }
}

template <GgmlType kType>
void run(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  // B's unpacked nibbles (512 bytes), then the two C pairs (2 × 2 KiB).
  alignas(64) uint8_t scratch[512 + 2 * 2048];
  const QTileScope tiles;
  const int64_t nb = w.blocks;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t rows = std::min<int64_t>(kQRows, w.m - g * kQRows);
    const __mmask16 mask = __mmask16((1u << rows) - 1u);
    for (int64_t t = t0; t + kTok <= t1; t += kTok) {
      __m512 acc[kTok];
      for (auto& a : acc) a = _mm512_setzero_ps();
      if (nb == 0) {  // k = 0: y = 0
        for (int u = 0; u < kTok; ++u) _mm512_mask_storeu_ps(y + (t + u) * ldy + g * kQRows, mask, acc[u]);
        continue;
      }
      // Block b's products, then block b − 1's float part (from the other pair).
      products<kType, 0>(w, x, g, t, 0, scratch);
      for (int64_t b = 1; b < nb; ++b) {
        if (b & 1) {
          products<kType, 1>(w, x, g, t, b, scratch);
          finish<kType, 0>(w, x, g, t, b - 1, scratch, acc);
        } else {
          products<kType, 0>(w, x, g, t, b, scratch);
          finish<kType, 1>(w, x, g, t, b - 1, scratch, acc);
        }
      }
      if ((nb - 1) & 1) finish<kType, 1>(w, x, g, t, nb - 1, scratch, acc);
      else finish<kType, 0>(w, x, g, t, nb - 1, scratch, acc);
      for (int u = 0; u < kTok; ++u) _mm512_mask_storeu_ps(y + (t + u) * ldy + g * kQRows, mask, acc[u]);
    }
  }
}

}  // namespace

template <GgmlType kType>
void qgemm(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  const int64_t tiles_end = t0 + (t1 - t0) / kTok * kTok;
  if (tiles_end > t0) run<kType>(w, x, g0, g1, t0, tiles_end, y, ldy);
  // The tokens past the last 16 (all of them at generation): the same sums
  // and float operations on vpdpbusd.
  if (tiles_end < t1) avx512::qgemm_vnni<kType>(w, x, g0, g1, tiles_end, t1, y, ldy);
}
template void qgemm<GgmlType::q4_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q4_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q8_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

}  // namespace ffn::nn::amx
