// The activation epilogue and attention's softmax rows in AVX2 intrinsics:
// the approximations of src/backends/cpu/activation_simd.hpp on 8 lanes,
// operation for operation. GCC does not vectorize the portable form for AVX2
// (at 752d0f5 this file's activate held no ymm instruction at all), so the
// vector code is written out; tests/backends/cpu/check_vector_code.py fails
// the build's tests if it ever compiles scalar again.
//
// This file is built without contraction (-ffp-contract=off), every operation
// below is an IEEE operation of the portable form in the same order, and the
// sums keep the portable form's 16 partial sums combined in its order: the
// bits are those of the scalar kernels (tested: test_activation_simd.cpp,
// test_encoder.cpp SoftmaxRows...).
#include <immintrin.h>

#include "backends/cpu/activation_simd.hpp"

namespace ffn::nn::avx2 {
namespace {

inline __m256 set(float v) { return _mm256_set1_ps(v); }
inline __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
inline __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
// a < b ? x : y per lane (false for NaN, as the portable comparison).
inline __m256 select_lt(__m256 a, __m256 b, __m256 x, __m256 y) {
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}

// Lanes [0, left) set (left clamped to [0, 8]), for the masked loads and stores of a tail.
inline __m256i tail_mask(int64_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int32_t k = int32_t(left < 0 ? 0 : (left > 8 ? 8 : left));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lane);
}

// simd::exp_approx on 8 lanes.
inline __m256 exp8(__m256 x) {
  const __m256 lo = set(-87.33654f), hi = set(88.72283f);
  const __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));  // NaN stays NaN (max/min return the 2nd operand)
  const __m256 t = mul(xc, set(1.44269504088896341f));
  const __m256 magic = set(12582912.0f);
  const __m256 n = sub(add(t, magic), magic);
  const __m256 r = sub(sub(xc, mul(n, set(0.693145751953125f))), mul(n, set(1.428606765330187045e-06f)));
  __m256 p = set(1.0f / 720.0f);
  p = add(mul(p, r), set(1.0f / 120.0f));
  p = add(mul(p, r), set(1.0f / 24.0f));
  p = add(mul(p, r), set(1.0f / 6.0f));
  p = add(mul(p, r), set(0.5f));
  p = add(mul(p, r), set(1.0f));
  p = add(mul(p, r), set(1.0f));
  // n is integral, so truncation is the portable form's conversion; a NaN n
  // converts to INT_MIN, clamped to 0 (p is NaN then and so is y).
  const __m256i e = _mm256_max_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(126)),
                                     _mm256_setzero_si256());
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  __m256 y = mul(mul(p, scale), set(2.0f));
  y = _mm256_blendv_ps(y, set(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  return y;
}

// simd::phi_approx on 8 lanes.
inline __m256 phi8(__m256 z) {
  const __m256 x = mul(z, set(0.70710678118654752f));
  const __m256 ax = select_lt(x, _mm256_setzero_ps(), _mm256_xor_ps(x, set(-0.0f)), x);
  const __m256 t = _mm256_div_ps(set(1.0f), add(set(1.0f), mul(set(0.3275911f), ax)));
  __m256 poly = set(1.061405429f);
  poly = sub(mul(poly, t), set(1.453152027f));
  poly = add(mul(poly, t), set(1.421413741f));
  poly = sub(mul(poly, t), set(0.284496736f));
  poly = add(mul(poly, t), set(0.254829592f));
  const __m256 neg_ax = _mm256_xor_ps(ax, set(-0.0f));
  const __m256 erfc_ax = mul(mul(poly, t), exp8(mul(neg_ax, ax)));
  const __m256 half_erfc = mul(set(0.5f), erfc_ax);
  return select_lt(x, _mm256_setzero_ps(), half_erfc, sub(set(1.0f), half_erfc));
}

template <Unit U>
inline __m256 act8(__m256 z) {
  if constexpr (U == Unit::relu) {
    return _mm256_max_ps(_mm256_setzero_ps(), z);  // z < 0 ? 0 : z; NaN (2nd operand) and −0 pass
  } else if constexpr (U == Unit::gelu) {
    return mul(z, phi8(z));
  } else if constexpr (U == Unit::gelu_tanh) {
    const __m256 y = mul(set(0.79788456080286535588f), add(z, mul(mul(mul(set(0.044715f), z), z), z)));
    return _mm256_div_ps(z, add(set(1.0f), exp8(mul(set(-2.0f), y))));
  } else {
    return _mm256_div_ps(z, add(set(1.0f), exp8(_mm256_xor_ps(z, set(-0.0f)))));
  }
}

// One vector of simd::activate_loop; `k` masks the tail (loads give 0 there,
// stores leave memory alone).
template <Unit U, bool Gated, bool BiasZ, bool BiasG, bool Tail>
inline void activate8(float* z, const float* g, const float* bz, const float* bg, __m256i k) {
  auto load = [k](const float* p) { return Tail ? _mm256_maskload_ps(p, k) : _mm256_loadu_ps(p); };
  __m256 v = load(z);
  if constexpr (BiasZ) v = add(v, load(bz));
  __m256 out;
  if constexpr (Gated) {
    __m256 gv = load(g);
    if constexpr (BiasG) gv = add(gv, load(bg));
    out = mul(act8<U>(gv), v);
  } else {
    out = act8<U>(v);
  }
  if constexpr (Tail) _mm256_maskstore_ps(z, k, out);
  else _mm256_storeu_ps(z, out);
}

template <Unit U, bool Gated, bool BiasZ, bool BiasG>
void activate_loop(float* z, const float* g, int64_t n, const float* bz, const float* bg) {
  int64_t j = 0;
  const __m256i all = _mm256_set1_epi32(-1);
  for (; j + 8 <= n; j += 8)
    activate8<U, Gated, BiasZ, BiasG, false>(z + j, g + (Gated ? j : 0), bz + (BiasZ ? j : 0), bg + (BiasG ? j : 0),
                                             all);
  if (j < n)
    activate8<U, Gated, BiasZ, BiasG, true>(z + j, g + (Gated ? j : 0), bz + (BiasZ ? j : 0), bg + (BiasG ? j : 0),
                                            tail_mask(n - j));
}

template <Unit U>
void activate_unit(float* z, const float* g, int64_t n, const float* bz, const float* bg) {
  if (g) {
    if (bz && bg) activate_loop<U, true, true, true>(z, g, n, bz, bg);
    else if (bz) activate_loop<U, true, true, false>(z, g, n, bz, bg);
    else if (bg) activate_loop<U, true, false, true>(z, g, n, bz, bg);
    else activate_loop<U, true, false, false>(z, g, n, bz, bg);
  } else {
    if (bz) activate_loop<U, false, true, false>(z, g, n, bz, bg);
    else activate_loop<U, false, false, false>(z, g, n, bz, bg);
  }
}

// The 16 partial sums (or maxima) of the portable form, lanes 0–7 and 8–15,
// combined in its order: lane 0, then 1, ..., then 15.
inline float sum16(__m256 a, __m256 b) {
  alignas(32) float l[16];
  _mm256_store_ps(l, a);
  _mm256_store_ps(l + 8, b);
  float s = 0.0f;
  for (float v : l) s += v;
  return s;
}
inline float max16(__m256 a, __m256 b) {
  alignas(32) float l[16];
  _mm256_store_ps(l, a);
  _mm256_store_ps(l + 8, b);
  float m = l[0];
  for (int k = 1; k < 16; ++k) m = l[k] > m ? l[k] : m;
  return m;
}

// p[j0 + lane] = e^(s·scale − shift) for the lanes in k; returns them, zero outside k.
template <bool Tail>
inline __m256 exp_step(const float* s, float* p, __m256 vs, __m256 vshift, __m256i k) {
  const __m256 x = Tail ? _mm256_maskload_ps(s, k) : _mm256_loadu_ps(s);
  const __m256 e = exp8(sub(mul(x, vs), vshift));
  if constexpr (Tail) {
    _mm256_maskstore_ps(p, k, e);
    return _mm256_and_ps(e, _mm256_castsi256_ps(k));
  } else {
    _mm256_storeu_ps(p, e);
    return e;
  }
}

}  // namespace

void activate(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg) {
  switch (u) {
    case Unit::relu: activate_unit<Unit::relu>(z, g, n, bz, bg); break;
    case Unit::gelu: activate_unit<Unit::gelu>(z, g, n, bz, bg); break;
    case Unit::gelu_tanh: activate_unit<Unit::gelu_tanh>(z, g, n, bz, bg); break;
    case Unit::silu: activate_unit<Unit::silu>(z, g, n, bz, bg); break;
  }
}

void sum_rows(float* out, const float* a, const float* b, const float* c, int64_t n) {
  int64_t j = 0;
  if (c)
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(out + j, add(add(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j)), _mm256_loadu_ps(c + j)));
  else
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, add(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j)));
  for (; j < n; ++j) out[j] = c ? (a[j] + b[j]) + c[j] : a[j] + b[j];
}

// simd::exp_rows: partial sums in 16 lanes (acc0: lanes 0–7, acc1: 8–15),
// the tail into lanes 0, 1, ... as the portable form does.
float exp_rows(const float* s, int64_t n, float scale, float shift, float* p) {
  const __m256 vs = set(scale), vshift = set(shift);
  const __m256i all = _mm256_set1_epi32(-1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    acc0 = add(acc0, exp_step<false>(s + j, p + j, vs, vshift, all));
    acc1 = add(acc1, exp_step<false>(s + j + 8, p + j + 8, vs, vshift, all));
  }
  if (j < n) {  // adding +0 in the lanes past the end leaves those sums' bits alone (they are ≥ +0)
    acc0 = add(acc0, exp_step<true>(s + j, p + j, vs, vshift, tail_mask(n - j)));
    if (j + 8 < n) acc1 = add(acc1, exp_step<true>(s + j + 8, p + j + 8, vs, vshift, tail_mask(n - j - 8)));
  }
  return sum16(acc0, acc1);
}

// simd::softmax_step: the running maxima in the same 16 lanes.
float softmax_step(float* s, int64_t n, float scale, float* m, float* l) {
  const __m256 vs = set(scale);
  __m256 mx0 = set(*m), mx1 = mx0;
  int64_t j = 0;
  // max_ps(v, mx) is v > mx ? v : mx, NaN v keeping mx: the portable comparison.
  for (; j + 16 <= n; j += 16) {
    mx0 = _mm256_max_ps(mul(_mm256_loadu_ps(s + j), vs), mx0);
    mx1 = _mm256_max_ps(mul(_mm256_loadu_ps(s + j + 8), vs), mx1);
  }
  if (j < n) {
    const __m256i k0 = tail_mask(n - j), k1 = tail_mask(n - j - 8);
    const __m256 v0 = _mm256_max_ps(mul(_mm256_maskload_ps(s + j, k0), vs), mx0);
    const __m256 v1 = _mm256_max_ps(mul(_mm256_maskload_ps(s + j + 8, k1), vs), mx1);
    mx0 = _mm256_blendv_ps(mx0, v0, _mm256_castsi256_ps(k0));
    mx1 = _mm256_blendv_ps(mx1, v1, _mm256_castsi256_ps(k1));
  }
  const float m_new = max16(mx0, mx1);
  const float alpha = *m == -__builtin_inff() ? 0.0f : simd::exp_approx(*m - m_new);
  *l = *l * alpha + exp_rows(s, n, scale, m_new, s);
  *m = m_new;
  return alpha;
}

}  // namespace ffn::nn::avx2
