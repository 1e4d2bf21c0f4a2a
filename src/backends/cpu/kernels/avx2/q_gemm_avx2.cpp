// Block-quantized product on AVX2 (src/backends/cpu/qgemm.hpp): each half of
// a group (8 rows) in the 8 int32 lanes of a ymm; per activation plane (hi,
// lo): Q4: vpmaddubsw (u8 weights × a token's 4 s8 activations broadcast:
// pairs ≤ 2·15·127) summed over the block's 8 vectors in int16 (≤ 30480, no
// overflow), then vpmaddwd by ones. Q8_0: |w| × sign(x, w) in vpmaddubsw
// (pairs ≤ 2·128·127 = 32512), each vector widened by vpmaddwd. isum =
// 255·hi's + lo's: the same integer sums and float operations as the rule;
// up to 2 tokens share each unpacked block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/qgemm.hpp"

namespace ffn::nn::avx2 {
namespace {

constexpr int64_t kPrefetch = 4096;  // as the AVX-512 kernel's (q_gemm_avx512vnni.cpp)

template <QType kType, int NT>
void tile(const QPanels& w, const QActs& x, int64_t g, int h, int64_t t, float* y, int64_t ldy, int64_t rows) {
  constexpr int64_t qbytes = kType == QType::q8_0 ? 512 : 256;
  const __m256i lo = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NT];
  for (int u = 0; u < NT; ++u) acc[u] = _mm256_setzero_ps();
  const int64_t k = w.k, nb = w.blocks;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.at(g, b);
    if (h == 0)  // the first half's pass streams the group; the second finds it in cache
      for (int64_t l = 0; l < qgroup_block_bytes(kType); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch + l), _MM_HINT_T0);
    __m256i wv[8];
    if constexpr (kType == QType::q8_0) {
      for (int j = 0; j < 8; ++j) wv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * j + 32 * h));
    } else {
      for (int i = 0; i < 4; ++i) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * i + 32 * h));
        wv[i] = _mm256_and_si256(v, lo);
        wv[i + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo);
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qbytes + 16 * h)));
    __m256 m = _mm256_setzero_ps();
    if constexpr (kType == QType::q4_1)
      m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qbytes + 32 + 16 * h)));
    for (int u = 0; u < NT; ++u) {
      const int64_t at = (t + u) * nb + b;
      const int8_t* xh = x.hi.data() + (t + u) * k + b * kQBlock;
      const int8_t* xl = x.lo.data() + (t + u) * k + b * kQBlock;
      __m256i sh, sl;
      if constexpr (kType == QType::q8_0) {
        sh = sl = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
          int32_t four_h, four_l;
          std::memcpy(&four_h, xh + 4 * j, 4);
          std::memcpy(&four_l, xl + 4 * j, 4);
          const __m256i aw = _mm256_abs_epi8(wv[j]);
          const __m256i ph = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(four_h), wv[j]));
          const __m256i pl = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(four_l), wv[j]));
          sh = _mm256_add_epi32(sh, _mm256_madd_epi16(ph, ones));
          sl = _mm256_add_epi32(sl, _mm256_madd_epi16(pl, ones));
        }
      } else {
        __m256i ph = _mm256_setzero_si256(), pl = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
          int32_t four_h, four_l;
          std::memcpy(&four_h, xh + 4 * j, 4);
          std::memcpy(&four_l, xl + 4 * j, 4);
          ph = _mm256_add_epi16(ph, _mm256_maddubs_epi16(wv[j], _mm256_set1_epi32(four_h)));
          pl = _mm256_add_epi16(pl, _mm256_maddubs_epi16(wv[j], _mm256_set1_epi32(four_l)));
        }
        sh = _mm256_madd_epi16(ph, ones);
        sl = _mm256_madd_epi16(pl, ones);
      }
      // isum = 255 sh + sl = (sh << 8) − sh + sl
      __m256i s = _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(sh, 8), sh), sl);
      if constexpr (kType == QType::q4_0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * x.sum[size_t(at)]));
      const __m256 p = _mm256_mul_ps(d, _mm256_set1_ps(x.d[size_t(at)]));
      acc[u] = _mm256_fmadd_ps(p, _mm256_cvtepi32_ps(s), acc[u]);
      if constexpr (kType == QType::q4_1) acc[u] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.s[size_t(at)]), acc[u]);
    }
  }
  for (int u = 0; u < NT; ++u) {
    float* out = y + (t + u) * ldy + g * kQRows + 8 * h;
    if (rows >= 8) {
      _mm256_storeu_ps(out, acc[u]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[u]);
      std::memcpy(out, tmp, size_t(rows) * sizeof(float));
    }
  }
}

template <QType kType>
void run(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  for (int64_t g = g0; g < g1; ++g)
    for (int h = 0; h < 2; ++h) {
      const int64_t rows = std::min<int64_t>(8, w.m - g * kQRows - 8 * h);
      if (rows <= 0) continue;
      int64_t t = t0;
      for (; t + 2 <= t1; t += 2) tile<kType, 2>(w, x, g, h, t, y, ldy, rows);
      if (t < t1) tile<kType, 1>(w, x, g, h, t, y, ldy, rows);
    }
}

}  // namespace

void qgemm(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  switch (w.type) {
    case QType::q4_0: return run<QType::q4_0>(w, x, g0, g1, t0, t1, y, ldy);
    case QType::q4_1: return run<QType::q4_1>(w, x, g0, g1, t0, t1, y, ldy);
    case QType::q8_0: return run<QType::q8_0>(w, x, g0, g1, t0, t1, y, ldy);
  }
}

}  // namespace ffn::nn::avx2
