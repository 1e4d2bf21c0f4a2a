// int8 kernels for AVX2 (compiled with -mavx2 -mfma): the integer product,
// activation quantization and dequantization of src/backends/cpu/gemm.hpp, matching the
// portable definitions (src/backends/cpu/quantize.hpp, src/backends/cpu/kernels/scalar/) bit for bit.
//
// Micro-kernel: MR rows × NP·16 columns of int32 in MR·NP·2 ymm. Per pair of
// k it widens each B panel's 32 bytes (vpmovsxbw, two halves), broadcasts
// the pair (A(i, p), A(i, p+1)) of each row and issues MR·NP·2 vpmaddwd +
// vpaddd: 16 multiply-adds per vpmaddwd, twice the 8 of an fp32 FMA. Without
// VNNI that is the ceiling: vpmaddubsw (32 u8×s8 products) must be followed
// by a vpmaddwd to widen its int16 sums, so it also yields 16 per multiply-unit
// instruction (and saturates).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::avx2 {
namespace {

constexpr int64_t kKp = 256;  // k pairs per block: an 8 KiB B panel stays in L1

template <int MR, int NP>
inline void tile(const IGemmArgs& g, int64_t row, int64_t panel, int64_t p0, int64_t p1, bool accumulate) {
  __m256i acc[MR][NP][2];
  int32_t* c = g.c + row * g.ldc + panel * kPanel;
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q)
      for (int h = 0; h < 2; ++h)
        acc[r][q][h] = accumulate ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + r * g.ldc + q * kPanel + 8 * h))
                                  : _mm256_setzero_si256();
  const int16_t* a = g.a + row * g.lda;
  const int8_t* b = g.b + panel * g.psb;
#pragma GCC unroll 2
  for (int64_t p = p0; p < p1; ++p) {
    __m256i bv[NP][2];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      const int8_t* bq = b + q * g.psb + p * 32;
      bv[q][0] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bq)));
      bv[q][1] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bq + 16)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * g.lda + 2 * p, 4);
      const __m256i av = _mm256_set1_epi32(pair);
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) {
        acc[r][q][0] = _mm256_add_epi32(acc[r][q][0], _mm256_madd_epi16(av, bv[q][0]));
        acc[r][q][1] = _mm256_add_epi32(acc[r][q][1], _mm256_madd_epi16(av, bv[q][1]));
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q)
      for (int h = 0; h < 2; ++h)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * g.ldc + q * kPanel + 8 * h), acc[r][q][h]);
}

template <int MR, int NP>
void row_strip(const IGemmArgs& g, int64_t row, int64_t np, int64_t p0, int64_t p1, bool accumulate) {
  int64_t q = 0;
  for (; q + NP <= np; q += NP) tile<MR, NP>(g, row, q, p0, p1, accumulate);
  for (; q < np; ++q) tile<MR, 1>(g, row, q, p0, p1, accumulate);
}

void igemm(const IGemmArgs& g) {
  const int64_t np = panels(g.n);
  const int64_t m6 = g.m / 6 * 6;
  for (int64_t p0 = 0; p0 < g.kp; p0 += kKp) {
    const int64_t p1 = std::min(g.kp, p0 + kKp);
    const bool accumulate = p0 > 0;
    for (int64_t q = 0; q < np; ++q)  // the B panel block stays in L1 across the rows
      for (int64_t r = 0; r < m6; r += 6) tile<6, 1>(g, r, q, p0, p1, accumulate);
    switch (g.m - m6) {
      case 1: row_strip<1, 2>(g, m6, np, p0, p1, accumulate); break;
      case 2: row_strip<2, 2>(g, m6, np, p0, p1, accumulate); break;
      case 3: row_strip<3, 1>(g, m6, np, p0, p1, accumulate); break;
      case 4: row_strip<4, 1>(g, m6, np, p0, p1, accumulate); break;
      case 5: row_strip<5, 1>(g, m6, np, p0, p1, accumulate); break;
      default: break;
    }
  }
  if (g.kp == 0)
    for (int64_t i = 0; i < g.m; ++i) std::fill(g.c + i * g.ldc, g.c + i * g.ldc + np * kPanel, 0);
}

float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

float quantize_row(const float* v, int64_t n, int16_t* a) {
  __m256 lo8 = _mm256_setzero_ps(), hi8 = _mm256_setzero_ps(), bad8 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_loadu_ps(v + j);
    lo8 = _mm256_min_ps(lo8, x);
    hi8 = _mm256_max_ps(hi8, x);
    const __m256 z = _mm256_sub_ps(x, x);  // NaN exactly for NaN and ±Inf
    bad8 = _mm256_or_ps(bad8, _mm256_cmp_ps(z, z, _CMP_UNORD_Q));
  }
  float lo = std::min(0.0f, hmin(lo8)), hi = std::max(0.0f, hmax(hi8));
  bool finite = _mm256_movemask_ps(bad8) == 0;
  for (int64_t t = j; t < n; ++t) {
    if (!std::isfinite(v[t])) finite = false;
    lo = std::min(lo, v[t]);
    hi = std::max(hi, v[t]);
  }
  if (n % 2) a[n] = 0;
  if (!finite) {
    std::fill(a, a + n, int16_t(0));
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float s = hi / 255.0f - lo / 255.0f;
  if (!(s > 0.0f) || !std::isfinite(1.0f / s)) {
    std::fill(a, a + n, int16_t(0));
    return 1.0f;
  }
  const float inv = 1.0f / s;
  const float zp = std::clamp(std::nearbyint(-lo * inv), 0.0f, 255.0f);
  const __m256 vinv = _mm256_set1_ps(inv), vzp = _mm256_set1_ps(zp);
  const __m256 vmax = _mm256_set1_ps(255.0f), vmin = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 u = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + j), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    u = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(u, vzp), vmin), vmax);
    const __m256i q = _mm256_cvttps_epi32(_mm256_sub_ps(u, vzp));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a + j),
                     _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
  }
  for (; j < n; ++j) {
    const float u = std::clamp(std::nearbyint(v[j] * inv) + zp, 0.0f, 255.0f);
    a[j] = int16_t(u - zp);
  }
  return s;
}

void dequant(const int32_t* acc, int64_t n, float s_a, const float* s_w, const float* prev, float* out) {
  const __m256 sa = _mm256_set1_ps(s_a);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j)));
    const __m256 s = _mm256_mul_ps(sa, _mm256_loadu_ps(s_w + j));
    const __m256 p = prev ? _mm256_loadu_ps(prev + j) : _mm256_setzero_ps();
    _mm256_storeu_ps(out + j, _mm256_fmadd_ps(x, s, p));
  }
  for (; j < n; ++j) out[j] = std::fma(float(acc[j]), s_a * s_w[j], prev ? prev[j] : 0.0f);
}

// fp32_input_part (src/backends/cpu/quantize.hpp) compiled for this ISA.
void fp32_part(const float* xs, int64_t k, int64_t rows, const float* wt, int64_t ld, const float* b, int64_t n,
               float* prev, int64_t ldp) {
  fp32_input_part(xs, k, rows, wt, ld, b, n, prev, ldp);
}

}  // namespace

const Int8Kernels int8_kernels{&igemm, nullptr, &quantize_row, nullptr, &dequant, &fp32_part};

}  // namespace ffn::nn::avx2
