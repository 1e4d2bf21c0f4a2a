// The fast paths' activation epilogue: branch-free float approximations,
// compiled once per ISA (src/backends/cpu/kernels/<isa>/f32_activate_<isa>.cpp;
// KernelConfig::activate picks one). This portable form is the scalar
// kernel and the definition: GCC vectorizes it for AVX-512; for AVX2 it did
// not, and kernels/avx2/f32_activate_avx2.cpp writes the same operations in
// intrinsics (the same bits). ctest vector_code fails if an ISA's copy
// compiles scalar. The reference path keeps libm (src/backends/cpu/activation.hpp).
//
//   exp_approx(x)  2^n · p(r), x = n ln2 + r, |r| ≤ ln2/2, p of degree 6
//                  (truncation < 2e-8 relative); +Inf above 88.72, 0 below
//                  −87.33 (libm gives subnormals there: absolute error < 1.2e-38).
//   silu(z)        z / (1 + e^−z)
//   gelu_tanh(z)   z / (1 + e^(−2y)), y = √(2/π)(z + 0.044715 z³): the identity
//                  (1 + tanh y)/2 = σ(2y), which has no cancellation near y → −∞
//   gelu(z)        z·Φ(z), Φ(z) = (1 + erf(z/√2))/2 with erf from Abramowitz &
//                  Stegun 7.1.26 (|error| ≤ 1.5e-7 absolute)
// Stated and tested error against the true value over the whole float range
// (tests/backends/cpu/test_activation_simd.cpp): |fast − truth| ≤ 4e-6·|truth|·(1 + |a|)
// + 2e-7·|z| (gelu only) + 1e-36, a the argument of exp; measured worst
// 1.7e-7·|truth|·(1 + |a|) — where float libm's 1 + tanh cancels (z ≪ 0),
// the reference path's own error is up to 5e-2 of that. NaN gives NaN; ±Inf
// give what the reference gives.
#pragma once

#include <bit>
#include <cstdint>

#include "backends/cpu/activation.hpp"

namespace ffn::nn::simd {

inline float exp_approx(float x) {
  const float xc = x < -87.33654f ? -87.33654f : (x > 88.72283f ? 88.72283f : x);  // NaN stays NaN
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest (1.5·2^23)
  const float r = (xc - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as 2 · 2^(n−1): n ∈ [−126, 128], so n − 1 + 127 ∈ [0, 254]. A NaN n
  // (x NaN) must not reach the int conversion (undefined behaviour); p is NaN
  // then and makes y NaN whatever the scale.
  const int32_t e = int32_t(n == n ? n : 0.0f) + 126;
  const float scale = std::bit_cast<float>(uint32_t(e < 0 ? 0 : e) << 23);
  float y = p * scale * 2.0f;
  y = x > 88.72283f ? std::bit_cast<float>(0x7f800000u) : y;
  y = x < -87.33654f ? 0.0f : y;
  return y;
}

// Φ(z) = (1 + erf(z/√2))/2, A&S 7.1.26 on |x|.
inline float phi_approx(float z) {
  const float x = z * 0.70710678118654752f;
  const float ax = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const float erfc_ax = poly * t * exp_approx(-ax * ax);  // 1 − erf(|x|)
  return x < 0.0f ? 0.5f * erfc_ax : 1.0f - 0.5f * erfc_ax;
}

inline float act_approx(Unit u, float z) {
  switch (u) {
    case Unit::relu: return z < 0.0f ? 0.0f : z;
    case Unit::gelu: return z * phi_approx(z);
    case Unit::gelu_tanh: {
      const float y = 0.79788456080286535588f * (z + 0.044715f * z * z * z);
      return z / (1.0f + exp_approx(-2.0f * y));
    }
    case Unit::silu: return z / (1.0f + exp_approx(-z));
  }
  return z;
}

// z[j] = act(z[j] + bz[j]), or act(g[j] + bg[j])·(z[j] + bz[j]) when gated
// (g is read, not written); a null bias adds nothing. One loop per unit,
// gating and bias so that each vectorizes; the float operations are those of
// adding the bias in place first and activating after.
template <Unit U, bool Gated, bool BiasZ, bool BiasG>
inline void activate_loop(float* z, const float* g, int64_t n, const float* bz, const float* bg) {
  for (int64_t j = 0; j < n; ++j) {
    float v = z[j];
    if constexpr (BiasZ) v += bz[j];
    if constexpr (Gated) {
      float gv = g[j];
      if constexpr (BiasG) gv += bg[j];
      z[j] = act_approx(U, gv) * v;
    } else {
      z[j] = act_approx(U, v);
    }
  }
}

template <Unit U>
inline void activate_unit(float* z, const float* g, int64_t n, const float* bz, const float* bg) {
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

inline void activate_rows(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg) {
  switch (u) {
    case Unit::relu: activate_unit<Unit::relu>(z, g, n, bz, bg); break;
    case Unit::gelu: activate_unit<Unit::gelu>(z, g, n, bz, bg); break;
    case Unit::gelu_tanh: activate_unit<Unit::gelu_tanh>(z, g, n, bz, bg); break;
    case Unit::silu: activate_unit<Unit::silu>(z, g, n, bz, bg); break;
  }
}

// Sums and maxima over a row in kLanes interleaved partial results, combined
// in a fixed order at the end: the loops vectorize (a single running float
// sum would be one long dependency chain) and the result is the same for any
// call with the same row, whatever the thread or tile.
constexpr int kLanes = 16;

// p[j] = e^(s[j]·scale − shift) for j < n; returns Σ p[j] (the softmax of
// one attention score row, shifted by its maximum; s and p may be the same).
inline float exp_rows(const float* s, int64_t n, float scale, float shift, float* p) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_approx(s[j + l] * scale - shift);
      p[j + l] = e;
      acc[l] += e;
    }
  for (int l = 0; j < n; ++j, ++l) {
    p[j] = exp_approx(s[j] * scale - shift);
    acc[l] += p[j];
  }
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  return sum;
}

// out[j] = (a[j] + b[j]) + c[j], or a[j] + b[j] without c (out may be a):
// the fused forward's sums of its shards' partials (and b2).
// (out == a is its own loop: GCC's run-time overlap check would send the
// exact alias to the scalar loop.)
inline void sum_rows(float* out, const float* a, const float* b, const float* c, int64_t n) {
  if (c)
    for (int64_t j = 0; j < n; ++j) out[j] = (a[j] + b[j]) + c[j];
  else if (out == a)
    for (int64_t j = 0; j < n; ++j) out[j] += b[j];
  else
    for (int64_t j = 0; j < n; ++j) out[j] = a[j] + b[j];
}

// One step of the online softmax over a tile of a query's scores s[0, n):
// the running maximum m (of the scaled scores) and sum l are updated,
// s[j] becomes e^(s[j]·scale − m_new), and the factor e^(m_old − m_new) that
// rescales what was accumulated so far is returned (0 when m_old = −∞).
inline float softmax_step(float* s, int64_t n, float scale, float* m, float* l) {
  float mx[kLanes];
  for (int k = 0; k < kLanes; ++k) mx[k] = *m;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float v = s[j + k] * scale;
      mx[k] = v > mx[k] ? v : mx[k];
    }
  for (int k = 0; j < n; ++j, ++k) {
    const float v = s[j] * scale;
    mx[k] = v > mx[k] ? v : mx[k];
  }
  float m_new = mx[0];
  for (int k = 1; k < kLanes; ++k) m_new = mx[k] > m_new ? mx[k] : m_new;
  const float alpha = *m == -__builtin_inff() ? 0.0f : exp_approx(*m - m_new);
  *l = *l * alpha + exp_rows(s, n, scale, m_new, s);
  *m = m_new;
  return alpha;
}

}  // namespace ffn::nn::simd
