// Activation quantization of the block-quantized product on AVX-512 F/BW/DQ
// (src/backends/cpu/qgemm.hpp's rule, the bits of scalar::quantize_acts):
// a block of 32 values in two zmm; Q = cvtps2dq(x · id) (round to nearest
// even, as nearbyint in the default rounding mode), clamped; hi = Q / 255
// rounded to nearest as sign(Q) · ((a + 1 + (a >> 8)) >> 8), a = |Q| + 127
// (equal to the scalar division for every |Q| ≤ 32512: checked exhaustively
// when written, and by the tests through the products); lo = Q − 255 hi.
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <limits>

#include "backends/cpu/qgemm.hpp"

namespace ffn::nn::avx512 {
namespace {

inline __m512i nearest_div255(__m512i q) {
  const __m512i a = _mm512_add_epi32(_mm512_abs_epi32(q), _mm512_set1_epi32(127));
  const __m512i h = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(1)), _mm512_srli_epi32(a, 8)), 8);
  return _mm512_mask_sub_epi32(h, _mm512_cmplt_epi32_mask(q, _mm512_setzero_si512()), _mm512_setzero_si512(), h);
}

}  // namespace

void quantize_acts(const float* x, int64_t t0, int64_t t1, QActs& out) {
  const int64_t k = out.blocks * kQBlock;
  const __m512 sign = _mm512_set1_ps(-0.0f), big = _mm512_set1_ps(FLT_MAX);
  const __m512i qmax = _mm512_set1_epi32(kQActMax), qmin = _mm512_set1_epi32(-kQActMax);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const float* v = x + t * k + b * kQBlock;
      __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
      const __m512 a0 = _mm512_andnot_ps(sign, v0), a1 = _mm512_andnot_ps(sign, v1);
      // Finite: |v| ≤ FLT_MAX (false for NaN and Inf).
      const bool finite = (_mm512_cmp_ps_mask(a0, big, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, big, _CMP_LE_OQ)) == 0xffff;
      float amax = finite ? _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) : 0.0f;
      float id = finite && amax > 0.0f ? float(kQActMax) / amax : 0.0f;
      if (!std::isfinite(id)) id = 0.0f, amax = 0.0f;
      const float d = finite ? amax / float(kQActMax) : std::numeric_limits<float>::quiet_NaN();
      if (!finite) v0 = v1 = _mm512_setzero_ps();  // Q = 0 (NaN · 0 would convert to INT_MIN)
      const __m512 vid = _mm512_set1_ps(id);
      const __m512i q0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)), qmin), qmax);
      const __m512i q1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vid)), qmin), qmax);
      const __m512i h0 = nearest_div255(q0), h1 = nearest_div255(q1);
      const __m512i c255 = _mm512_set1_epi32(255);
      const __m512i l0 = _mm512_sub_epi32(q0, _mm512_mullo_epi32(h0, c255));
      const __m512i l1 = _mm512_sub_epi32(q1, _mm512_mullo_epi32(h1, c255));
      int8_t* hi = out.hi.data() + t * k + b * kQBlock;
      int8_t* lo = out.lo.data() + t * k + b * kQBlock;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm512_cvtepi32_epi8(h0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + 16), _mm512_cvtepi32_epi8(h1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm512_cvtepi32_epi8(l0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16), _mm512_cvtepi32_epi8(l1));
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      const size_t at = size_t(t * out.blocks + b);
      out.d[at] = d;
      out.sum[at] = sum;
      out.s[at] = d * float(sum);
    }
}

}  // namespace ffn::nn::avx512
