// The FMA loop `ffn bench` measures the machine's peak with: 12 independent
// chains of 256-bit FMAs (≥ latency × issue width on AVX2 cores: 2 × 4–5;
// 12 accumulators + 2 operands fit the 16 ymm registers without spills),
// operands in registers, no memory traffic.
#include <immintrin.h>

#include <cstdint>

namespace ffn::nn::avx2 {

// Runs `iters` iterations and returns the FLOPs done (2 per lane per FMA).
double fma_loop(int64_t iters, float seed) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(seed + float(i));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  // The result feeds the return value so the loop cannot be removed.
  return double(iters) * 12 * 8 * 2 + (out[0] == 12345.0f ? 1 : 0);
}

}  // namespace ffn::nn::avx2
