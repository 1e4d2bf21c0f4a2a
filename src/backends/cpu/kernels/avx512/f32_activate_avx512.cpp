// The activation epilogue (src/backends/cpu/activation_simd.hpp) compiled for avx512,
// and attention's softmax rows in AVX-512 intrinsics (GCC does not vectorize
// the running maximum of the portable form).
#include <immintrin.h>

#include "backends/cpu/activation_simd.hpp"

namespace ffn::nn::avx512 {
void activate(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg) {
  simd::activate_rows(u, z, g, n, bz, bg);
}
void sum_rows(float* out, const float* a, const float* b, const float* c, int64_t n) {
  simd::sum_rows(out, a, b, c, n);
}

namespace {

// simd::exp_approx on 16 lanes, operation for operation (this file is built
// without contraction, so the bits are the same as the portable form's).
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72283f);
  const __m512 xc = _mm512_min_ps(hi, _mm512_max_ps(lo, x));  // NaN stays NaN (max/min return the 2nd operand)
  const __m512 t = _mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f));
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_sub_ps(_mm512_add_ps(t, magic), magic);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f))),
                                 _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187045e-06f)));
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
  // n is integral (or NaN: the conversion then gives INT_MIN, clamped to 0, and p is NaN).
  const __m512i e = _mm512_max_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(126)),
                                     _mm512_setzero_si512());
  const __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, scale), _mm512_set1_ps(2.0f));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(__builtin_inff()));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  return y;
}

inline __mmask16 tail(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

}  // namespace

float exp_rows(const float* s, int64_t n, float scale, float shift, float* p) {
  const __m512 vs = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = tail(n - j);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), vs), vshift));
    _mm512_mask_storeu_ps(p + j, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

float softmax_step(float* s, int64_t n, float scale, float* m, float* l) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(*m);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = tail(n - j);
    mx = _mm512_mask_max_ps(mx, k, mx, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), vs));
  }
  const float m_new = _mm512_reduce_max_ps(mx);
  const float alpha = *m == -__builtin_inff() ? 0.0f : simd::exp_approx(*m - m_new);
  *l = *l * alpha + exp_rows(s, n, scale, m_new, s);
  *m = m_new;
  return alpha;
}

}  // namespace ffn::nn::avx512
