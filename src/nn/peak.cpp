#include "nn/peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "nn/isa.hpp"

namespace ffn::nn {

namespace scalar {
// Portable fallback: 8 independent multiply-add chains (the compiler may
// vectorize them with the baseline ISA).
double fma_loop(int64_t iters, float seed) {
  float acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = seed + float(i);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 8; ++i) acc[i] = acc[i] * 0.999999f + 1e-7f;
  float s = 0;
  for (float v : acc) s += v;
  return double(iters) * 8 * 2 + (s == 12345.0f ? 1 : 0);
}
}  // namespace scalar

Peak measure_peak(int threads, PeakKind kind) {
  Peak p;
  p.isa = resolve_isa(Isa::automatic) == Isa::avx2 ? Isa::avx2 : Isa::scalar;
  if (kind != PeakKind::fp32 && p.isa != Isa::avx2) return p;
  auto loop = p.isa == Isa::avx2 ? &avx2::fma_loop : &scalar::fma_loop;
  if (kind == PeakKind::int16) loop = &avx2::madd_loop;
  if (kind == PeakKind::u8s8) loop = &avx2::maddubs_loop;
  const int64_t iters = p.isa == Isa::avx2 ? 4'000'000 : 2'000'000;  // ~25 ms per round; the best of 10 rounds
  for (int round = 0; round < 10; ++round) {
    double flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += loop(iters, float(omp_get_thread_num()));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    p.gflops = std::max(p.gflops, flops / s * 1e-9);
  }
  return p;
}

}  // namespace ffn::nn
