// Block-quantized product on AVX-512 VNNI (src/backends/cpu/qgemm.hpp): a
// group's 16 rows in the 16 int32 lanes of a zmm; per block and activation
// plane (hi, lo), 8 vpdpbusd (u8 weights × a token's 4 s8 activations
// broadcast) give each row's exact integer sum, 255·hi's + lo's is the
// rule's isum, then its two float operations per lane. Q8_0's s8 weights are
// made u8 by flipping their top bit (q + 128), and 128 ΣQ is taken back off.
// Up to 4 tokens share each unpacked block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>

#include "backends/cpu/qgemm.hpp"

namespace ffn::nn::avx512 {
namespace {

// Software prefetch distance: generation (one token) streams every weight
// once and is bound by how many lines are in flight; prefetching 4 KiB ahead
// took SmolLM2's generation from 85 to 106-126 tokens/s on 1 thread and from
// 179-196 to 230-242 on 2 (Xeon, 2026-11-25; 2, 4 and 8 KiB within noise).
constexpr int64_t kPrefetch = 4096;
// The K-quants' (tile_k). A tile of one token (generation; also a
// prompt's last token when its count is 1 past a multiple of 4): the whole
// block 2 KiB ahead, in one burst at the block's start. On 2 threads of a
// Zen 4 over 64 Ki rows × 2048, against a quarter of the block per pair 4
// KiB ahead (alternating in one process, each figure the median of 9-21
// rounds' ratios, 2026-11-29): Q4_K 1.23-1.28×, Q6_K 1.11-1.24×, Q5_K
// 0.95-1.03×; 16 Ki × 8192 (W2's shape): Q4_K 1.39×, Q6_K 1.14×. 4 KiB with
// the burst: Q4_K 1.11-1.34×, Q6_K 0.98-1.15×; 3 KiB: Q4_K 1.27-1.35×, Q6_K
// 0.96-1.04×; 8 and 16 KiB worse (bench/results/2026-11-29-zen4-generation.md).
// Tiles of 2-4 tokens (prompts, and serving steps of 2-4 sequences), which
// read each block again from cache, keep the quarter per pair 4 KiB ahead:
// the burst made 64-token prompts 0.88-0.89× (Q6_K) and 0.96-0.97× (Q4_K).
// Steps of 2-4 sequences were not measured either way.
constexpr int64_t kPrefetchK1 = 2048, kPrefetchK = 4096;


template <GgmlType kType, int NT>
void tile(const QPanels& w, const QActs& x, int64_t g, int64_t t, float* y, int64_t ldy, __mmask16 mask) {
  constexpr int64_t qbytes = builtin_quant_type(kType)->panels.quant_bytes;
  constexpr bool kQ5 = kType == GgmlType::q5_0 || kType == GgmlType::q5_1;
  constexpr bool kMin = kType == GgmlType::q4_1 || kType == GgmlType::q5_1;
  const __m512i lo = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  __m512 acc[NT];
  for (int u = 0; u < NT; ++u) acc[u] = _mm512_setzero_ps();
  const int64_t k = w.k, nb = w.blocks;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.at(g, b);
    // The stream of blocks is read once per token at generation: fetch
    // kPrefetch bytes ahead (the next groups' blocks follow this one's).
    for (int64_t l = 0; l < builtin_quant_type(kType)->panels.bytes(); l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch + l), _MM_HINT_T0);
    __m512i wv[8];
    if constexpr (kType == GgmlType::q8_0) {
      for (int j = 0; j < 8; ++j) wv[j] = _mm512_xor_si512(_mm512_loadu_si512(blk + 64 * j), flip);
    } else {
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_loadu_si512(blk + 64 * i);
        wv[i] = _mm512_and_si512(v, lo);
        wv[i + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo);
      }
      if constexpr (kQ5) {  // the fifth bits: bit i to bit 4 for vector i, bit 4 + i for vector i + 4
        const __m512i h = _mm512_loadu_si512(blk + 256), b4 = _mm512_set1_epi8(0x10);
        wv[0] = _mm512_or_si512(wv[0], _mm512_and_si512(_mm512_slli_epi16(h, 4), b4));
        wv[1] = _mm512_or_si512(wv[1], _mm512_and_si512(_mm512_slli_epi16(h, 3), b4));
        wv[2] = _mm512_or_si512(wv[2], _mm512_and_si512(_mm512_slli_epi16(h, 2), b4));
        wv[3] = _mm512_or_si512(wv[3], _mm512_and_si512(_mm512_slli_epi16(h, 1), b4));
        wv[4] = _mm512_or_si512(wv[4], _mm512_and_si512(h, b4));
        wv[5] = _mm512_or_si512(wv[5], _mm512_and_si512(_mm512_srli_epi16(h, 1), b4));
        wv[6] = _mm512_or_si512(wv[6], _mm512_and_si512(_mm512_srli_epi16(h, 2), b4));
        wv[7] = _mm512_or_si512(wv[7], _mm512_and_si512(_mm512_srli_epi16(h, 3), b4));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qbytes)));
    __m512 m = _mm512_setzero_ps();
    if constexpr (kMin)
      m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qbytes + 32)));
    for (int u = 0; u < NT; ++u) {
      const int64_t at = (t + u) * nb + b;
      const int8_t* xh = x.hi.data() + (t + u) * k + b * kQBlock;
      const int8_t* xl = x.lo.data() + (t + u) * k + b * kQBlock;
      __m512i sh = _mm512_setzero_si512(), sl = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        int32_t four_h, four_l;
        std::memcpy(&four_h, xh + 4 * j, 4);
        std::memcpy(&four_l, xl + 4 * j, 4);
        sh = _mm512_dpbusd_epi32(sh, wv[j], _mm512_set1_epi32(four_h));
        sl = _mm512_dpbusd_epi32(sl, wv[j], _mm512_set1_epi32(four_l));
      }
      // isum = 255 sh + sl = (sh << 8) − sh + sl
      __m512i s = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(sh, 8), sh), sl);
      if constexpr (kType == GgmlType::q8_0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(128 * x.sum[size_t(at)]));
      if constexpr (kType == GgmlType::q4_0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(8 * x.sum[size_t(at)]));
      if constexpr (kType == GgmlType::q5_0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(16 * x.sum[size_t(at)]));
      const __m512 p = _mm512_mul_ps(d, _mm512_set1_ps(x.d[size_t(at)]));
      acc[u] = _mm512_fmadd_ps(p, _mm512_cvtepi32_ps(s), acc[u]);
      if constexpr (kMin) acc[u] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.s[size_t(at)]), acc[u]);
    }
  }
  for (int u = 0; u < NT; ++u) _mm512_mask_storeu_ps(y + (t + u) * ldy + g * kQRows, mask, acc[u]);
}

// Activation block J (0..7) of a panel block: its 8 weight vectors from
// the pair's nibbles v (and the high planes hv), its scales, the products
// for NT tokens. J is a template argument so that every shift is a constant
// (a runtime J left the loop full of branches).
template <GgmlType kType, int NT, int J>
inline void k_block(const uint8_t* blk, const __m512i* v, const __m512i* hv, __m512 d, __m512 dmin, const QActs& x,
                    int64_t t, int64_t b, __m512* acc) {
  constexpr bool k6 = kType == GgmlType::q6_k, k5 = kType == GgmlType::q5_k;
  const __m512i lo = _mm512_set1_epi8(0x0f);
  __m512i wv[8];
  for (int i = 0; i < 8; ++i) {
    wv[i] = J % 2 ? _mm512_and_si512(_mm512_srli_epi16(v[i], 4), lo) : _mm512_and_si512(v[i], lo);
    if constexpr (k6) {  // block J's 2 high bits (bits 2c, 2c + 1 of its plane) to bits 4, 5
      constexpr int c = J % 4;
      __m512i h = hv[i];
      if constexpr (c == 0) h = _mm512_slli_epi16(h, 4);
      if constexpr (c == 1) h = _mm512_slli_epi16(h, 2);
      if constexpr (c == 3) h = _mm512_srli_epi16(h, 2);
      wv[i] = _mm512_or_si512(wv[i], _mm512_and_si512(h, _mm512_set1_epi8(0x30)));
    }
    if constexpr (k5) {  // bit J of the qh byte to bit 4
      const __m512i h = J <= 4 ? _mm512_slli_epi16(hv[i], 4 - J) : _mm512_srli_epi16(hv[i], J - 4);
      wv[i] = _mm512_or_si512(wv[i], _mm512_and_si512(h, _mm512_set1_epi8(0x10)));
    }
  }
  __m512 sc0, sc1;  // Q4_K, Q5_K: d · sc, dmin · mn; Q6_K: d · sc of the two halves
  if constexpr (k6) {
    sc0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::scale(kType, J))))));
    sc1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::scale(kType, J) + 16)))));
  } else {
    sc0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::scale(kType, J))))));
    sc1 = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::min(J))))));
  }
  // The integer sums: tokens inner, so that the NT tokens' (hi, lo) sums are
  // independent chains of vpdpbusd in flight together (one token's 8-long
  // chain per plane left the loop waiting on the instruction's latency); one
  // token splits each plane's chain in two (even, odd vectors). Q6_K: one
  // sub-block of 16 at a time.
  const int64_t k = x.blocks * kQBlock, nb = x.blocks;
  constexpr int kChains = NT == 1 ? 2 : 1;
  for (int s = 0; s < (k6 ? 2 : 1); ++s) {
    __m512i sh[NT][kChains], sl[NT][kChains];
    for (int u = 0; u < NT; ++u)
      for (int c = 0; c < kChains; ++c) sh[u][c] = sl[u][c] = _mm512_setzero_si512();
    for (int i = k6 ? 4 * s : 0; i < (k6 ? 4 * s + 4 : 8); ++i)
      for (int u = 0; u < NT; ++u) {
        int32_t four_h, four_l;
        std::memcpy(&four_h, x.hi.data() + (t + u) * k + b * kQBlock + 4 * i, 4);
        std::memcpy(&four_l, x.lo.data() + (t + u) * k + b * kQBlock + 4 * i, 4);
        const int c = i % kChains;
        sh[u][c] = _mm512_dpbusd_epi32(sh[u][c], wv[i], _mm512_set1_epi32(four_h));
        sl[u][c] = _mm512_dpbusd_epi32(sl[u][c], wv[i], _mm512_set1_epi32(four_l));
      }
    for (int u = 0; u < NT; ++u) {
      const int64_t at = (t + u) * nb + b;
      __m512i h = sh[u][0], l = sl[u][0];
      if constexpr (kChains == 2) h = _mm512_add_epi32(h, sh[u][1]), l = _mm512_add_epi32(l, sl[u][1]);
      __m512i is = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(h, 8), h), l);  // 255 h + l
      const __m512 dx = _mm512_set1_ps(x.d[size_t(at)]);
      if constexpr (k6) {
        is = _mm512_sub_epi32(is, _mm512_set1_epi32(32 * x.sum16[size_t(2 * at + s)]));
        acc[u] = _mm512_fmadd_ps(_mm512_mul_ps(s ? sc1 : sc0, dx), _mm512_cvtepi32_ps(is), acc[u]);
      } else {
        acc[u] = _mm512_fmadd_ps(_mm512_mul_ps(sc0, dx), _mm512_cvtepi32_ps(is), acc[u]);
        acc[u] = _mm512_fnmadd_ps(sc1, _mm512_set1_ps(x.s[size_t(at)]), acc[u]);
      }
    }
  }
}

// The K-quants (layouts in src/core/quant_blocks.cpp): per panel block of
// 256, 4 pairs of 8 vectors; a pair's low nibbles are one activation
// block's weights, its high nibbles the next one's (Q5_K, Q6_K: with their
// high bits or-ed in from the bit planes). Q4_K, Q5_K: per activation block,
// 8 vpdpbusd per plane and the sub-block's scale d · sc and minimum dmin · mn;
// Q6_K: 4 per plane per sub-block of 16, q − 32 as (q) − 32 ΣQ of the half.
template <GgmlType kType, int NT>
void tile_k(const QPanels& w, const QActs& x, int64_t g, int64_t t, float* y, int64_t ldy, __mmask16 mask) {
  constexpr bool k6 = kType == GgmlType::q6_k, k5 = kType == GgmlType::q5_k;
  constexpr int64_t pbytes = builtin_quant_type(kType)->panels.bytes();
  __m512 acc[NT];
  for (int u = 0; u < NT; ++u) acc[u] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < w.blocks; ++sb) {
    const uint8_t* blk = w.at(g, sb);
    const char* ahead = reinterpret_cast<const char*>(blk) + (NT == 1 ? kPrefetchK1 : kPrefetchK);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kpanel::d)));
    __m512 dmin = _mm512_setzero_ps();
    if constexpr (!k6) dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kpanel::dmin)));
    __m512i hv[8] = {};
    if constexpr (NT == 1)
      for (int64_t l = 0; l < pbytes; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
    const auto pair = [&]<int P>() {
      if constexpr (NT > 1)  // a quarter of the block's lines per pair
        for (int64_t l = P * pbytes / 4; l < (P + 1) * pbytes / 4; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      __m512i v[8];
      for (int i = 0; i < 8; ++i) v[i] = _mm512_loadu_si512(blk + kpanel::pair(kType, P) + 64 * i);
      if constexpr ((k6 && P % 2 == 0) || (k5 && P == 0))
        for (int i = 0; i < 8; ++i) hv[i] = _mm512_loadu_si512(blk + kpanel::plane(kType, P / 2) + 64 * i);
      k_block<kType, NT, 2 * P>(blk, v, hv, d, dmin, x, t, sb * 8 + 2 * P, acc);
      k_block<kType, NT, 2 * P + 1>(blk, v, hv, d, dmin, x, t, sb * 8 + 2 * P + 1, acc);
    };
    pair.template operator()<0>();
    pair.template operator()<1>();
    pair.template operator()<2>();
    pair.template operator()<3>();
  }
  for (int u = 0; u < NT; ++u) _mm512_mask_storeu_ps(y + (t + u) * ldy + g * kQRows, mask, acc[u]);
}

template <GgmlType kType, int NT>
void any_tile(const QPanels& w, const QActs& x, int64_t g, int64_t t, float* y, int64_t ldy, __mmask16 mask) {
  if constexpr (kType == GgmlType::q4_k || kType == GgmlType::q5_k || kType == GgmlType::q6_k)
    tile_k<kType, NT>(w, x, g, t, y, ldy, mask);
  else
    tile<kType, NT>(w, x, g, t, y, ldy, mask);
}

template <GgmlType kType>
void run(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t rows = std::min<int64_t>(kQRows, w.m - g * kQRows);
    const __mmask16 mask = __mmask16((1u << rows) - 1u);
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) any_tile<kType, 4>(w, x, g, t, y, ldy, mask);
    if (t1 - t == 3) any_tile<kType, 3>(w, x, g, t, y, ldy, mask);
    else if (t1 - t == 2) any_tile<kType, 2>(w, x, g, t, y, ldy, mask);
    else if (t1 - t == 1) any_tile<kType, 1>(w, x, g, t, y, ldy, mask);
  }
}

}  // namespace

template <GgmlType kType>
void qgemm_vnni(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  run<kType>(w, x, g0, g1, t0, t1, y, ldy);
}
template void qgemm_vnni<GgmlType::q4_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm_vnni<GgmlType::q4_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm_vnni<GgmlType::q8_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm_vnni<GgmlType::q5_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm_vnni<GgmlType::q5_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm_vnni<GgmlType::q4_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm_vnni<GgmlType::q5_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm_vnni<GgmlType::q6_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

}  // namespace ffn::nn::avx512
