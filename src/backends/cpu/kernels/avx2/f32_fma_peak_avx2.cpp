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

namespace ffn::nn::avx2 {

// The int8 idioms' instruction mixes, in inline assembly: with intrinsics GCC
// 12 spills these integer accumulators to the stack, which measures the
// stores instead. 12 accumulators (ymm0–11), operands ymm12/13 (ymm15 = ones
// for the u8s8 widening), temporaries ymm14/15.
#define FFN_MADD(i, t) "vpmaddwd %%ymm12, %%ymm13, %%ymm" #t "\n\tvpaddd %%ymm" #t ", %%ymm" #i ", %%ymm" #i "\n\t"
#define FFN_MADDUBS(i)                              \
  "vpmaddubsw %%ymm12, %%ymm13, %%ymm14\n\t"        \
  "vpmaddwd %%ymm14, %%ymm15, %%ymm14\n\t"          \
  "vpaddd %%ymm14, %%ymm" #i ", %%ymm" #i "\n\t"
#define FFN_CLOBBERS                                                                                            \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
      "xmm13", "xmm14", "xmm15", "cc"

// vpmaddwd (16 int16 products summed in pairs into int32) + vpaddd: the int8
// path's pair on AVX2. Returns the operations done (2 per multiply-add).
double madd_loop(int64_t iters, float) {
  int64_t n = iters;
  if (n > 0)
    asm volatile("vpxor %%ymm12, %%ymm12, %%ymm12\n\tvpxor %%ymm13, %%ymm13, %%ymm13\n\t"
                 "1:\n\t" FFN_MADD(0, 14) FFN_MADD(1, 15) FFN_MADD(2, 14) FFN_MADD(3, 15) FFN_MADD(4, 14)
                     FFN_MADD(5, 15) FFN_MADD(6, 14) FFN_MADD(7, 15) FFN_MADD(8, 14) FFN_MADD(9, 15)
                         FFN_MADD(10, 14) FFN_MADD(11, 15) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                 : "+r"(n)
                 :
                 : FFN_CLOBBERS);
  return double(iters) * 12 * 16 * 2;
}

// vpmaddubsw (32 u8 × s8 products summed in pairs, saturating to int16) +
// vpmaddwd by ones (to int32) + vpaddd: the other AVX2 idiom, for comparison.
double maddubs_loop(int64_t iters, float) {
  int64_t n = iters;
  if (n > 0)
    asm volatile("vpxor %%ymm12, %%ymm12, %%ymm12\n\tvpxor %%ymm13, %%ymm13, %%ymm13\n\t"
                 "vpcmpeqw %%ymm15, %%ymm15, %%ymm15\n\t"
                 "1:\n\t" FFN_MADDUBS(0) FFN_MADDUBS(1) FFN_MADDUBS(2) FFN_MADDUBS(3) FFN_MADDUBS(4)
                     FFN_MADDUBS(5) FFN_MADDUBS(6) FFN_MADDUBS(7) FFN_MADDUBS(8) FFN_MADDUBS(9) FFN_MADDUBS(10)
                         FFN_MADDUBS(11) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                 : "+r"(n)
                 :
                 : FFN_CLOBBERS);
  return double(iters) * 12 * 32 * 2;
}

}  // namespace ffn::nn::avx2

namespace ffn::nn::avx2 {

// Reads bytes (a multiple of 256) with 8 independent 256-bit loads per step
// and ORs them together, so that no load can be dropped.
uint64_t read_loop(const uint8_t* p, int64_t bytes) {
  __m256i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_si256();
  for (int64_t at = 0; at < bytes; at += 256)
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      acc[i] = _mm256_or_si256(acc[i], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + at + 32 * i)));
  for (int i = 1; i < 8; ++i) acc[0] = _mm256_or_si256(acc[0], acc[i]);
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), acc[0]);
  return out[0] | out[1] | out[2] | out[3];
}

}  // namespace ffn::nn::avx2
