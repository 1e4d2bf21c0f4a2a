#include "backends/cpu/peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "core/aligned.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/qgemm.hpp"

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

}  // namespace ffn::nn

namespace ffn {

Peak measure_peak(int threads, PeakKind kind) {
  using namespace nn;
  Peak p;
  p.isa = best_isa();
  const KernelConfig& kc = kernel_config(p.isa);
  PeakLoop loop = kc.fma_peak;
  p.instr = kc.fma_instr;
  if (kind == PeakKind::int8) loop = kc.int8_peak, p.instr = kc.int8_instr;
  if (kind == PeakKind::bf16) loop = kc.bf16_peak, p.instr = kc.bf16_peak_instr;
  if (kind == PeakKind::u8s8) {
    loop = kc.int8_peak ? &avx2::maddubs_loop : nullptr;
    p.instr = "vpmaddubsw + vpmaddwd";
  }
  if (!loop) return p;
  const int64_t iters = p.isa == Isa::scalar ? 2'000'000 : 4'000'000;  // ~25 ms per round; the best of 10 rounds
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

double measure_read_bandwidth(int64_t bytes, int threads) {
  using namespace nn;
  constexpr int64_t kChunk = 256;
  if (bytes < kChunk * threads) throw Error("measure_read_bandwidth: buffer too small");
  const int64_t per = bytes / threads / kChunk * kChunk;
  // On huge pages where the kernel gives them, as the weights are
  // (repack_rows): with 4 KiB pages the same read was 8-22 % slower (2
  // threads of a Zen 4 guest, 512 MiB: 25.8-31 against 32.9-34.6 GB/s).
  AlignedVector<uint8_t> buf;
  buf.reserve(size_t(per * threads));
  advise_huge_pages(buf.data(), size_t(per * threads));
  buf.assign(size_t(per * threads), 0);
  const bool avx = best_isa() != Isa::scalar;
  // The median of 7 passes, not the best: on a shared host one pass now and
  // then reads far faster than the rest (a Zen 4 guest, 800 MB, 2 threads:
  // passes at 31 GB/s and one at 42-48), and a floor from that pass put the
  // same generation at 38 % of it in one run and 72 % in the next.
  constexpr int kPasses = 7;
  std::vector<double> rates;
  uint64_t sink = 0;
  for (int pass = 0; pass <= kPasses; ++pass) {
    int64_t read = 0;  // what the threads OpenMP gave read (it may give fewer than asked)
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(| : sink) reduction(+ : read)
    {
      const uint8_t* p = buf.data() + int64_t(omp_get_thread_num()) * per;
      read += per;
      if (pass == 0) std::fill(const_cast<uint8_t*>(p), const_cast<uint8_t*>(p) + per, uint8_t(pass + 1));
      if (avx) {
        sink |= avx2::read_loop(p, per);
      } else {
        uint64_t acc = 0;
        for (int64_t i = 0; i + 8 <= per; i += 8) {
          uint64_t v;
          std::memcpy(&v, p + i, 8);
          acc |= v;
        }
        sink |= acc;
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0) rates.push_back(double(read) / s * 1e-9);
  }
  std::nth_element(rates.begin(), rates.begin() + kPasses / 2, rates.end());
  const double median = rates[kPasses / 2];
  return sink == 12345 ? median + 1e-12 : median;
}

}  // namespace ffn
