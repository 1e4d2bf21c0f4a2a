// Block-quantized product on AVX2 (src/backends/cpu/qgemm.hpp): each half of
// a group (8 rows) in the 8 int32 lanes of a ymm; per activation plane (hi,
// lo): Q4: vpmaddubsw (u8 weights × a token's 4 s8 activations broadcast:
// pairs ≤ 2·15·127) summed over the block's 8 vectors in int16 (≤ 30480, no
// overflow; Q5: pairs ≤ 2·31·127, four vectors at a time), then vpmaddwd
// by 255 (hi) and by 1 (lo) into one int32 sum:
// isum = 255·hi's + lo's, the same integer sums and float operations as the
// rule. Q8_0: |w| × sign(x, w) in vpmaddubsw (pairs ≤ 2·128·127 = 32512),
// each vector widened. Prompts: up to 4 tokens share each unpacked vector
// (Q6_K: 2); one token (generation): both halves of a group in one pass
// over its blocks (Q5_0, Q5_1: one half after the other in each block).
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/qgemm.hpp"

namespace ffn::nn::avx2 {
namespace {

constexpr int64_t kPrefetch = 4096;  // as the AVX-512 kernel's (q_gemm_avx512vnni.cpp)

// A running sum kept where it is made. Without it GCC reassociates a block's
// int16 additions (integer addition is associative) into one chain after the
// last vpmaddubsw, holding every product live until then: a fully unrolled
// block spilled a ymm to the stack for about every second vpmaddubsw.
inline __m256i kept(__m256i v) {
  __asm__("" : "+x"(v));
  return v;
}

// The four low or the four high bits of each byte of v: the weights of one
// of the two vectors (or activation blocks) that share 32 bytes of nibbles.
inline __m256i nibbles(__m256i v, bool high) {
  const __m256i lo = _mm256_set1_epi8(0x0f);
  return high ? _mm256_and_si256(_mm256_srli_epi16(v, 4), lo) : _mm256_and_si256(v, lo);
}

// Q5_0, Q5_1 and Q5_K: bit j of each byte of the fifth-bit plane hb moved to
// bit 4 and set in the nibbles w (as the AVX-512 kernel). j is a constant
// once the callers' loops are unrolled, so the shifts are immediate.
inline __m256i with_fifth_bit(__m256i w, __m256i hb, int j) {
  const __m256i hs = j <= 4 ? _mm256_slli_epi16(hb, 4 - j) : _mm256_srli_epi16(hb, j - 4);
  return _mm256_or_si256(w, _mm256_and_si256(hs, _mm256_set1_epi8(0x10)));
}

// A weight vector's products with a token's two activation planes (qh, ql:
// vpmaddubsw's pairs) added to the token's int16 sums; the kGroup-th vector
// of a group widens them into the int32 sum is = 255 · hi + lo (vpmaddwd by
// 255 and by 1: the integer of the rule).
template <int kGroup>
inline void add_products(int i, __m256i qh, __m256i ql, __m256i& ph, __m256i& pl, __m256i& is) {
  ph = i % kGroup == 0 ? qh : kept(_mm256_add_epi16(ph, qh));
  pl = i % kGroup == 0 ? ql : kept(_mm256_add_epi16(pl, ql));
  if (i % kGroup == kGroup - 1)
    is = kept(_mm256_add_epi32(is, _mm256_add_epi32(_mm256_madd_epi16(ph, _mm256_set1_epi16(255)),
                                                    _mm256_madd_epi16(pl, _mm256_set1_epi16(1)))));
}

// The NT tokens' results of a half group: rows (1..8) of them, token u at out + u · ldy.
template <int NT>
inline void store_rows(const __m256* acc, float* out, int64_t ldy, int64_t rows) {
  for (int u = 0; u < NT; ++u) {
    if (rows >= 8) {
      _mm256_storeu_ps(out + u * ldy, acc[u]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[u]);
      std::memcpy(out + u * ldy, tmp, size_t(rows) * sizeof(float));
    }
  }
}

template <GgmlType kType, int NT>
void tile(const QPanels& w, const QActs& x, int64_t g, int h, int64_t t, float* y, int64_t ldy, int64_t rows) {
  constexpr int64_t qbytes = builtin_quant_type(kType)->panels.quant_bytes;
  constexpr bool kQ5 = kType == GgmlType::q5_0 || kType == GgmlType::q5_1;
  constexpr bool kMin = kType == GgmlType::q4_1 || kType == GgmlType::q5_1;
  __m256 acc[NT];
  for (int u = 0; u < NT; ++u) acc[u] = _mm256_setzero_ps();
  const int64_t k = w.k, nb = w.blocks;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w.at(g, b);
    if (h == 0)  // the first half's pass streams the group; the second finds it in cache
      for (int64_t l = 0; l < builtin_quant_type(kType)->panels.bytes(); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch + l), _MM_HINT_T0);
    // Vector j (4 weights of 8 rows) made once and used for the NT tokens;
    // one int32 sum per token, 255 sh + sl (vpmaddwd by 255 and by 1). Q4's
    // 8 products per plane summed in int16 (≤ 8 · 3810), Q5's four at a
    // time (pairs ≤ 2 · 31 · 127 = 7874), Q8_0's (|w| × sign(x, w): pairs ≤
    // 2 · 128 · 127) widened each.
    constexpr int kGroup = kType == GgmlType::q8_0 ? 1 : kQ5 ? 4 : 8;
    const __m256i hb = kQ5 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 256 + 32 * h)) : _mm256_setzero_si256();
    __m256i is[NT], ph[NT] = {}, pl[NT] = {};
    for (int u = 0; u < NT; ++u) is[u] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * (kGroup == 1 ? j : j % 4) + 32 * h));
      __m256i wv = v, aw = v;
      if constexpr (kType == GgmlType::q8_0) {
        aw = _mm256_abs_epi8(v);
      } else {
        wv = nibbles(v, j >= 4);
        if constexpr (kQ5) wv = with_fifth_bit(wv, hb, j);
      }
      for (int u = 0; u < NT; ++u) {
        int32_t four_h, four_l;
        std::memcpy(&four_h, x.hi.data() + (t + u) * k + b * kQBlock + 4 * j, 4);
        std::memcpy(&four_l, x.lo.data() + (t + u) * k + b * kQBlock + 4 * j, 4);
        __m256i qh, ql;
        if constexpr (kType == GgmlType::q8_0) {
          qh = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(four_h), wv));
          ql = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(four_l), wv));
        } else {
          qh = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(four_h));
          ql = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(four_l));
        }
        add_products<kGroup>(j, qh, ql, ph[u], pl[u], is[u]);
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qbytes + 16 * h)));
    __m256 m = _mm256_setzero_ps();
    if constexpr (kMin)
      m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qbytes + 32 + 16 * h)));
    for (int u = 0; u < NT; ++u) {
      const int64_t at = (t + u) * nb + b;
      __m256i q = is[u];
      if constexpr (kType == GgmlType::q4_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(8 * x.sum[size_t(at)]));
      if constexpr (kType == GgmlType::q5_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(16 * x.sum[size_t(at)]));
      const __m256 p = _mm256_mul_ps(d, _mm256_set1_ps(x.d[size_t(at)]));
      acc[u] = _mm256_fmadd_ps(p, _mm256_cvtepi32_ps(q), acc[u]);
      if constexpr (kMin) acc[u] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.s[size_t(at)]), acc[u]);
    }
  }
  store_rows<NT>(acc, y + t * ldy + g * kQRows + 8 * h, ldy, rows);
}

// The K-quants (layouts in src/core/quant_blocks.cpp; the VNNI kernel's
// order). Activation block J (a template argument: every shift a constant)
// of a panel block: each weight vector is made once from its bytes (L1 after
// the first block of a pair) and used for the NT tokens at once; Q4_K's 8
// vpmaddubsw per plane summed in int16 (≤ 8 · 3810), Q5_K's four at a time
// (≤ 4 · 7874), Q6_K's (q ≤ 63: pairs ≤ 16002) two at a time, then widened
// into one int32 sum per token, 255 sh + sl (vpmaddwd by 255 and by 1: the
// integer of the rule). Sub-blocks outer (Q6_K's two of 16 weights, Q4_K's
// and Q5_K's one of 32), each added to the tokens' results when complete: per
// token the order of the rule.
template <GgmlType kType, int NT, int J>
inline void k_block(const uint8_t* blk, int h, const QActs& x, int64_t t, int64_t b, __m256 d, __m256 dmin,
                    __m256* acc) {
  constexpr bool k6 = kType == GgmlType::q6_k, k5 = kType == GgmlType::q5_k;
  constexpr int kGroup = k6 ? 2 : k5 ? 4 : 8, kSub = k6 ? 2 : 1;
  const auto load = [&](int64_t off) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off + 32 * h)); };
  const auto scales = [&](int64_t off, bool is_signed) {  // 8 lanes' bytes → float
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + off + 8 * h));
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
  };
  const int64_t k = x.blocks * kQBlock, nb = x.blocks;
#pragma GCC unroll 2
  for (int s = 0; s < kSub; ++s) {
    __m256i is[NT], ph[NT] = {}, pl[NT] = {};
    for (int u = 0; u < NT; ++u) is[u] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int i = s * 8 / kSub; i < (s + 1) * 8 / kSub; ++i) {
      __m256i wv = load(kpanel::pair(kType, J / 2) + 64 * i);
      wv = nibbles(wv, J % 2);
      if constexpr (k6) {
        constexpr int c = J % 4;
        __m256i hh = load(kpanel::plane(kType, J / 4) + 64 * i);
        if constexpr (c == 0) hh = _mm256_slli_epi16(hh, 4);
        if constexpr (c == 1) hh = _mm256_slli_epi16(hh, 2);
        if constexpr (c == 3) hh = _mm256_srli_epi16(hh, 2);
        wv = _mm256_or_si256(wv, _mm256_and_si256(hh, _mm256_set1_epi8(0x30)));
      }
      if constexpr (k5) wv = with_fifth_bit(wv, load(kpanel::plane(kType, 0) + 64 * i), J);
      for (int u = 0; u < NT; ++u) {
        int32_t four_h, four_l;
        std::memcpy(&four_h, x.hi.data() + (t + u) * k + b * kQBlock + 4 * i, 4);
        std::memcpy(&four_l, x.lo.data() + (t + u) * k + b * kQBlock + 4 * i, 4);
        const __m256i qh = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(four_h));
        const __m256i ql = _mm256_maddubs_epi16(wv, _mm256_set1_epi32(four_l));
        add_products<kGroup>(i, qh, ql, ph[u], pl[u], is[u]);
      }
    }
    if constexpr (k6) {
      const __m256 sc = _mm256_mul_ps(d, scales(kpanel::scale(kType, J) + 16 * s, true));
      for (int u = 0; u < NT; ++u) {
        const int64_t at = (t + u) * nb + b;
        const __m256i q = _mm256_sub_epi32(is[u], _mm256_set1_epi32(32 * x.sum16[size_t(2 * at + s)]));
        acc[u] = _mm256_fmadd_ps(_mm256_mul_ps(sc, _mm256_set1_ps(x.d[size_t(at)])), _mm256_cvtepi32_ps(q), acc[u]);
      }
    } else {
      const __m256 sc0 = _mm256_mul_ps(d, scales(kpanel::scale(kType, J), false));
      const __m256 sc1 = _mm256_mul_ps(dmin, scales(kpanel::min(J), false));
      for (int u = 0; u < NT; ++u) {
        const int64_t at = (t + u) * nb + b;
        acc[u] = _mm256_fmadd_ps(_mm256_mul_ps(sc0, _mm256_set1_ps(x.d[size_t(at)])), _mm256_cvtepi32_ps(is[u]), acc[u]);
        acc[u] = _mm256_fnmadd_ps(sc1, _mm256_set1_ps(x.s[size_t(at)]), acc[u]);
      }
    }
  }
}

template <GgmlType kType, int NT>
void tile_k(const QPanels& w, const QActs& x, int64_t g, int h, int64_t t, float* y, int64_t ldy, int64_t rows) {
  constexpr bool k6 = kType == GgmlType::q6_k;
  constexpr int64_t pbytes = builtin_quant_type(kType)->panels.bytes();
  __m256 acc[NT];
  for (int u = 0; u < NT; ++u) acc[u] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < w.blocks; ++sb) {
    const uint8_t* blk = w.at(g, sb);
    if (h == 0)  // the first half's pass streams the group; the second finds it in cache
      for (int64_t l = 0; l < pbytes; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch + l), _MM_HINT_T0);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::d + 16 * h)));
    __m256 dmin = _mm256_setzero_ps();
    if constexpr (!k6)
      dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::dmin + 16 * h)));
    const int64_t b = sb * 8;
    k_block<kType, NT, 0>(blk, h, x, t, b + 0, d, dmin, acc);
    k_block<kType, NT, 1>(blk, h, x, t, b + 1, d, dmin, acc);
    k_block<kType, NT, 2>(blk, h, x, t, b + 2, d, dmin, acc);
    k_block<kType, NT, 3>(blk, h, x, t, b + 3, d, dmin, acc);
    k_block<kType, NT, 4>(blk, h, x, t, b + 4, d, dmin, acc);
    k_block<kType, NT, 5>(blk, h, x, t, b + 5, d, dmin, acc);
    k_block<kType, NT, 6>(blk, h, x, t, b + 6, d, dmin, acc);
    k_block<kType, NT, 7>(blk, h, x, t, b + 7, d, dmin, acc);
  }
  store_rows<NT>(acc, y + t * ldy + g * kQRows + 8 * h, ldy, rows);
}

// One token (generation): both halves of a group in one pass. Each 64-byte
// line is used whole as it arrives (the two passes of tile() streamed every
// line for half of it and read it again from cache) and the token's
// activations are broadcast once for 16 rows. Per row lane the integer sums
// and the float operations are tile()'s and k_block()'s, in their order.
// Q4_0, Q4_1, Q8_0, Q5_0 and Q5_1 here (Q5: the halves one after the other
// within each block, as their fifth-bit planes spill registers when both
// halves' sums are live); Q4_K, Q5_K in tile_k1, Q6_K in tile_q6_k1.
template <GgmlType kType>
void tile1(const QPanels& w, const QActs& x, int64_t g, int64_t t, float* y, const int64_t* rows) {
  constexpr int64_t qbytes = builtin_quant_type(kType)->panels.quant_bytes;
  constexpr int64_t pbytes = builtin_quant_type(kType)->panels.bytes();
  constexpr bool kQ5 = kType == GgmlType::q5_0 || kType == GgmlType::q5_1;
  static_assert(kType == GgmlType::q4_0 || kType == GgmlType::q4_1 || kType == GgmlType::q8_0 || kQ5);
  constexpr bool kMin = kType == GgmlType::q4_1 || kType == GgmlType::q5_1;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t k = w.k, nb = w.blocks;
  const int8_t* xh = x.hi.data() + t * k;
  const int8_t* xl = x.lo.data() + t * k;
  for (int64_t b = 0; b < nb; ++b, xh += kQBlock, xl += kQBlock) {
    const uint8_t* blk = w.at(g, b);
    for (int64_t l = 0; l < pbytes; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch + l), _MM_HINT_T0);
    const auto load = [&](int64_t off) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off)); };
    // per half: Q4's int16 sums (≤ 8 · 3810), Q5's four at a time (≤ 4 · 7874)
    // or Q8_0's products, and is = 255 · hi + lo
    constexpr int kGroup = kType == GgmlType::q8_0 ? 1 : kQ5 ? 4 : 8;
    __m256i is[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, ph[2] = {}, pl[2] = {};
    if constexpr (kQ5) {
      for (int h = 0; h < 2; ++h) {
        const __m256i hb = load(256 + 32 * h);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          int32_t four_h, four_l;
          std::memcpy(&four_h, xh + 4 * j, 4);
          std::memcpy(&four_l, xl + 4 * j, 4);
          const __m256i v = load(64 * (j % 4) + 32 * h);
          const __m256i wv = with_fifth_bit(nibbles(v, j >= 4), hb, j);
          add_products<kGroup>(j, _mm256_maddubs_epi16(wv, _mm256_set1_epi32(four_h)),
                               _mm256_maddubs_epi16(wv, _mm256_set1_epi32(four_l)), ph[h], pl[h], is[h]);
        }
      }
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        int32_t four_h, four_l;
        std::memcpy(&four_h, xh + 4 * j, 4);
        std::memcpy(&four_l, xl + 4 * j, 4);
        const __m256i bh = _mm256_set1_epi32(four_h), bl = _mm256_set1_epi32(four_l);
        for (int h = 0; h < 2; ++h) {
          __m256i qh, ql;
          if constexpr (kType == GgmlType::q8_0) {
            const __m256i wv = load(64 * j + 32 * h), aw = _mm256_abs_epi8(wv);
            qh = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bh, wv));
            ql = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bl, wv));
          } else {
            const __m256i v = load(64 * (j % 4) + 32 * h);
            const __m256i wv = nibbles(v, j >= 4);
            qh = _mm256_maddubs_epi16(wv, bh);
            ql = _mm256_maddubs_epi16(wv, bl);
          }
          add_products<kGroup>(j, qh, ql, ph[h], pl[h], is[h]);
        }
      }
    }
    const int64_t at = t * nb + b;
    const __m256 dx = _mm256_set1_ps(x.d[size_t(at)]);
    for (int h = 0; h < 2; ++h) {
      __m256i s = is[h];
      if constexpr (kType == GgmlType::q4_0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * x.sum[size_t(at)]));
      if constexpr (kType == GgmlType::q5_0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(16 * x.sum[size_t(at)]));
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qbytes + 16 * h)));
      acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(s), acc[h]);
      if constexpr (kMin) {
        const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + qbytes + 32 + 16 * h)));
        acc[h] = _mm256_fmadd_ps(m, _mm256_set1_ps(x.s[size_t(at)]), acc[h]);
      }
    }
  }
  for (int h = 0; h < 2; ++h)
    if (rows[h] > 0) store_rows<1>(&acc[h], y + g * kQRows + 8 * h, 0, rows[h]);
}

// One token, Q4_K and Q5_K: activation block J of a panel block for both halves.
template <GgmlType kType, int J>
inline void k_block1(const uint8_t* blk, const QActs& x, int64_t t, int64_t b, const __m256* d, const __m256* dmin,
                     __m256* acc) {
  static_assert(kType == GgmlType::q4_k || kType == GgmlType::q5_k);
  constexpr bool k5 = kType == GgmlType::q5_k;
  constexpr int kGroup = k5 ? 4 : 8;
  const auto load = [&](int64_t off) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off)); };
  const auto scales = [&](int64_t off) {  // 8 lanes' bytes → float
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + off))));
  };
  const int64_t k = x.blocks * kQBlock, at = t * x.blocks + b;
  const int8_t* xh = x.hi.data() + t * k + b * kQBlock;
  const int8_t* xl = x.lo.data() + t * k + b * kQBlock;
  const __m256 dx = _mm256_set1_ps(x.d[size_t(at)]);
  // 255 sh + sl made as the int16 sums are widened (as k6_block1)
  __m256i is[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, ph[2] = {}, pl[2] = {};
  for (int i = 0; i < 8; ++i) {
    int32_t four_h, four_l;
    std::memcpy(&four_h, xh + 4 * i, 4);
    std::memcpy(&four_l, xl + 4 * i, 4);
    const __m256i bh = _mm256_set1_epi32(four_h), bl = _mm256_set1_epi32(four_l);
    for (int h = 0; h < 2; ++h) {
      __m256i wv = load(kpanel::pair(kType, J / 2) + 64 * i + 32 * h);
      wv = nibbles(wv, J % 2);
      if constexpr (k5) wv = with_fifth_bit(wv, load(kpanel::plane(kType, 0) + 64 * i + 32 * h), J);
      const __m256i qh = _mm256_maddubs_epi16(wv, bh), ql = _mm256_maddubs_epi16(wv, bl);
      add_products<kGroup>(i, qh, ql, ph[h], pl[h], is[h]);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const __m256 sc0 = _mm256_mul_ps(d[h], scales(kpanel::scale(kType, J) + 8 * h));
    const __m256 sc1 = _mm256_mul_ps(dmin[h], scales(kpanel::min(J) + 8 * h));
    acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(sc0, dx), _mm256_cvtepi32_ps(is[h]), acc[h]);
    acc[h] = _mm256_fnmadd_ps(sc1, _mm256_set1_ps(x.s[size_t(at)]), acc[h]);
  }
}

template <GgmlType kType>
void tile_k1(const QPanels& w, const QActs& x, int64_t g, int64_t t, float* y, const int64_t* rows) {
  constexpr int64_t pbytes = builtin_quant_type(kType)->panels.bytes();
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t sb = 0; sb < w.blocks; ++sb) {
    const uint8_t* blk = w.at(g, sb);
    for (int64_t l = 0; l < pbytes; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch + l), _MM_HINT_T0);
    __m256 d[2], dmin[2];
    for (int h = 0; h < 2; ++h) {
      d[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::d + 16 * h)));
      dmin[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::dmin + 16 * h)));
    }
    const int64_t b = sb * 8;
    k_block1<kType, 0>(blk, x, t, b + 0, d, dmin, acc);
    k_block1<kType, 1>(blk, x, t, b + 1, d, dmin, acc);
    k_block1<kType, 2>(blk, x, t, b + 2, d, dmin, acc);
    k_block1<kType, 3>(blk, x, t, b + 3, d, dmin, acc);
    k_block1<kType, 4>(blk, x, t, b + 4, d, dmin, acc);
    k_block1<kType, 5>(blk, x, t, b + 5, d, dmin, acc);
    k_block1<kType, 6>(blk, x, t, b + 6, d, dmin, acc);
    k_block1<kType, 7>(blk, x, t, b + 7, d, dmin, acc);
  }
  for (int h = 0; h < 2; ++h)
    if (rows[h] > 0) store_rows<1>(&acc[h], y + g * kQRows + 8 * h, 0, rows[h]);
}

// One token, Q6_K: activation block J of a panel block for both halves. A
// sub-block's integer sum 255 sh + sl is made as it is widened (vpmaddwd by
// 255 and by 1: the same integer), so that each half holds one int32 sum
// instead of two; the sub-block's term joins the sums in k_block()'s order.
template <int J>
inline void k6_block1(const uint8_t* blk, const QActs& x, int64_t t, int64_t b, const __m256* d, __m256* acc) {
  constexpr GgmlType kType = GgmlType::q6_k;
  constexpr int c = J % 4;  // block J's 2 high bits: bits 2c, 2c + 1 of its plane
  const auto load = [&](int64_t off) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + off)); };
  const int64_t k = x.blocks * kQBlock, at = t * x.blocks + b;
  const int8_t* xh = x.hi.data() + t * k + b * kQBlock;
  const int8_t* xl = x.lo.data() + t * k + b * kQBlock;
  const __m256 dx = _mm256_set1_ps(x.d[size_t(at)]);
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s) {
    __m256i is[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, ph[2] = {}, pl[2] = {};
#pragma GCC unroll 4
    for (int i = 4 * s; i < 4 * s + 4; ++i) {
      int32_t four_h, four_l;
      std::memcpy(&four_h, xh + 4 * i, 4);
      std::memcpy(&four_l, xl + 4 * i, 4);
      const __m256i bh = _mm256_set1_epi32(four_h), bl = _mm256_set1_epi32(four_l);
      for (int h = 0; h < 2; ++h) {
        __m256i wv = load(kpanel::pair(kType, J / 2) + 64 * i + 32 * h);
        wv = nibbles(wv, J % 2);
        __m256i hh = load(kpanel::plane(kType, J / 4) + 64 * i + 32 * h);
        if constexpr (c == 0) hh = _mm256_slli_epi16(hh, 4);
        if constexpr (c == 1) hh = _mm256_slli_epi16(hh, 2);
        if constexpr (c == 3) hh = _mm256_srli_epi16(hh, 2);
        wv = _mm256_or_si256(wv, _mm256_and_si256(hh, _mm256_set1_epi8(0x30)));
        const __m256i qh = _mm256_maddubs_epi16(wv, bh), ql = _mm256_maddubs_epi16(wv, bl);
        add_products<2>(i, qh, ql, ph[h], pl[h], is[h]);  // pairs ≤ 2 · 63 · 127 = 16002: two to an int16 sum
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i q = _mm256_sub_epi32(is[h], _mm256_set1_epi32(32 * x.sum16[size_t(2 * at + s)]));
      const __m256 sc = _mm256_mul_ps(
          d[h], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                    reinterpret_cast<const __m128i*>(blk + kpanel::scale(kType, J) + 16 * s + 8 * h)))));
      acc[h] = _mm256_fmadd_ps(_mm256_mul_ps(sc, dx), _mm256_cvtepi32_ps(q), acc[h]);
    }
  }
}

void tile_q6_k1(const QPanels& w, const QActs& x, int64_t g, int64_t t, float* y, const int64_t* rows) {
  constexpr int64_t pbytes = builtin_quant_type(GgmlType::q6_k)->panels.bytes();
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t sb = 0; sb < w.blocks; ++sb) {
    const uint8_t* blk = w.at(g, sb);
    for (int64_t l = 0; l < pbytes; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch + l), _MM_HINT_T0);
    __m256 d[2];
    for (int h = 0; h < 2; ++h)
      d[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kpanel::d + 16 * h)));
    const int64_t b = sb * 8;
    k6_block1<0>(blk, x, t, b + 0, d, acc);
    k6_block1<1>(blk, x, t, b + 1, d, acc);
    k6_block1<2>(blk, x, t, b + 2, d, acc);
    k6_block1<3>(blk, x, t, b + 3, d, acc);
    k6_block1<4>(blk, x, t, b + 4, d, acc);
    k6_block1<5>(blk, x, t, b + 5, d, acc);
    k6_block1<6>(blk, x, t, b + 6, d, acc);
    k6_block1<7>(blk, x, t, b + 7, d, acc);
  }
  for (int h = 0; h < 2; ++h)
    if (rows[h] > 0) store_rows<1>(&acc[h], y + g * kQRows + 8 * h, 0, rows[h]);
}

template <GgmlType kType, int NT>
void any_tile(const QPanels& w, const QActs& x, int64_t g, int h, int64_t t, float* y, int64_t ldy, int64_t rows) {
  if constexpr (kType == GgmlType::q4_k || kType == GgmlType::q5_k || kType == GgmlType::q6_k)
    tile_k<kType, NT>(w, x, g, h, t, y, ldy, rows);
  else
    tile<kType, NT>(w, x, g, h, t, y, ldy, rows);
}

template <GgmlType kType>
void run(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  // One token: both halves in one pass (2 threads, 64 Ki × 2048 streamed,
  // Zen 3, against the two passes: Q4_0 1.2-1.5×, Q4_1 1.2-1.4×, Q8_0
  // 1.1-1.4×, Q4_K 1.05-1.27×, Q5_K 1.05-1.19×, Q6_K 0.94-1.3×; Q5_0
  // 1.20-1.35× and Q5_1 1.30-1.35× with the halves one after the other in
  // each block: with both halves' sums live they spilled, 0.5-0.7×).
  if (t1 - t0 == 1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t rows[2] = {std::min<int64_t>(8, w.m - g * kQRows), std::min<int64_t>(8, w.m - g * kQRows - 8)};
      if constexpr (kType == GgmlType::q6_k)
        tile_q6_k1(w, x, g, t0, y + t0 * ldy, rows);
      else if constexpr (kType == GgmlType::q4_k || kType == GgmlType::q5_k)
        tile_k1<kType>(w, x, g, t0, y + t0 * ldy, rows);
      else
        tile1<kType>(w, x, g, t0, y + t0 * ldy, rows);
    }
    return;
  }
  for (int64_t g = g0; g < g1; ++g)
    for (int h = 0; h < 2; ++h) {
      const int64_t rows = std::min<int64_t>(8, w.m - g * kQRows - 8 * h);
      if (rows <= 0) continue;
      int64_t t = t0;
      // 4 tokens a tile (1.07-1.25× 2 on Zen 3, 64 tokens in cache), but Q6_K's
      // planes spill registers at 4 (0.85-0.94×): 2
      if constexpr (kType != GgmlType::q6_k)
        for (; t + 4 <= t1; t += 4) any_tile<kType, 4>(w, x, g, h, t, y, ldy, rows);
      for (; t + 2 <= t1; t += 2) any_tile<kType, 2>(w, x, g, h, t, y, ldy, rows);
      if (t < t1) any_tile<kType, 1>(w, x, g, h, t, y, ldy, rows);
    }
}

}  // namespace

template <GgmlType kType>
void qgemm(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  run<kType>(w, x, g0, g1, t0, t1, y, ldy);
}
template void qgemm<GgmlType::q4_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q4_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q8_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q5_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q5_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q4_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q5_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q6_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

}  // namespace ffn::nn::avx2

// Activation quantization (the rule in qgemm.hpp, the bits of
// scalar::quantize_acts): as the AVX-512 one (avx512/q_acts_avx512.cpp),
// a block in four ymm.
namespace ffn::nn::avx2 {

void quantize_acts(const float* x, int64_t t0, int64_t t1, QActs& out) {
  const int64_t k = out.blocks * kQBlock;
  const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(FLT_MAX);
  const __m256i qmax = _mm256_set1_epi32(kQActMax), qmin = _mm256_set1_epi32(-kQActMax);
  const __m256i c127 = _mm256_set1_epi32(127), c1 = _mm256_set1_epi32(1), c255 = _mm256_set1_epi32(255);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const float* v = x + t * k + b * kQBlock;
      __m256 vv[4], av[4];
      __m256 fin = _mm256_castsi256_ps(_mm256_set1_epi32(-1)), mx = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        vv[i] = _mm256_loadu_ps(v + 8 * i);
        av[i] = _mm256_andnot_ps(sign, vv[i]);
        fin = _mm256_and_ps(fin, _mm256_cmp_ps(av[i], big, _CMP_LE_OQ));  // false for NaN, Inf
        mx = _mm256_max_ps(mx, av[i]);
      }
      const bool finite = _mm256_movemask_ps(fin) == 0xff;
      float amax = 0.0f;
      if (finite) {
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        amax = _mm_cvtss_f32(m4);
      }
      float id = finite && amax > 0.0f ? float(kQActMax) / amax : 0.0f;
      if (!std::isfinite(id)) id = 0.0f, amax = 0.0f;
      const float d = finite ? amax / float(kQActMax) : std::numeric_limits<float>::quiet_NaN();
      if (!finite)
        for (auto& e : vv) e = _mm256_setzero_ps();  // Q = 0 (NaN · 0 would convert to INT_MIN)
      const __m256 vid = _mm256_set1_ps(id);
      __m256i q[4], h[4], l[4];
      __m256i sum8 = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        q[i] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vv[i], vid)), qmin), qmax);
        const __m256i a = _mm256_add_epi32(_mm256_abs_epi32(q[i]), c127);
        h[i] = _mm256_sign_epi32(_mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, c1), _mm256_srli_epi32(a, 8)), 8),
                                 q[i]);
        l[i] = _mm256_sub_epi32(q[i], _mm256_mullo_epi32(h[i], c255));
        sum8 = _mm256_add_epi32(sum8, q[i]);
      }
      // int32 → int8 (values in −127..127): packs saturate nothing; undo the lane interleave.
      const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
      const __m256i hp = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(h[0], h[1]), _mm256_packs_epi32(h[2], h[3])), perm);
      const __m256i lp = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(l[0], l[1]), _mm256_packs_epi32(l[2], l[3])), perm);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.hi.data() + t * k + b * kQBlock), hp);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.lo.data() + t * k + b * kQBlock), lp);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      const int32_t sum = _mm_cvtsi128_si32(s4);
      const size_t at = size_t(t * out.blocks + b);
      out.d[at] = d;
      out.sum[at] = sum;
      out.s[at] = d * float(sum);
    }
}

}  // namespace ffn::nn::avx2
