// Cache blocking, threading and packing around the per-ISA block kernels.
#include "nn/gemm.hpp"

#include <omp.h>

#include <algorithm>

namespace ffn::nn {

namespace {
constexpr int64_t kKc = 256;  // k per block: a 16-wide B panel block is 16 KiB (L1)
constexpr int64_t kMc = 48;   // rows per block: A block 48 KiB, stays in L2

// C rows [m0, m1) × panels [p0, p1), all of k, on the calling thread.
void run_range(GemmBlockFn kernel, const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t n0 = p0 * kPanel, n1 = std::min(g.n, p1 * kPanel);
  if (m0 >= m1 || n0 >= n1) return;
  if (g.k == 0) {
    if (!g.accumulate)
      for (int64_t i = m0; i < m1; ++i) std::fill(g.c + i * g.ldc + n0, g.c + i * g.ldc + n1, 0.0f);
    return;
  }
  for (int64_t k0 = 0; k0 < g.k; k0 += kKc) {
    for (int64_t i0 = m0; i0 < m1; i0 += kMc) {
      GemmArgs s = g;
      s.m = std::min(kMc, m1 - i0);
      s.n = n1 - n0;
      s.k = std::min(kKc, g.k - k0);
      s.a = g.a + i0 * g.rsa + k0 * g.csa;
      s.b = g.b + p0 * g.psb + k0 * g.ldb;
      s.c = g.c + i0 * g.ldc + n0;
      s.accumulate = g.accumulate || k0 > 0;
      kernel(s);
    }
  }
}
}  // namespace

GemmBlockFn gemm_kernel(Isa resolved) {
  switch (resolved) {
    case Isa::avx2: return &avx2::gemm_block;
    default: return &scalar::gemm_block;
  }
}

void gemm(GemmBlockFn kernel, const GemmArgs& g, int threads) {
  const int64_t np = panels(g.n);
  // Split the longer side; tiny products stay on one thread.
  const bool by_rows = g.m >= np * kPanel;
  const int64_t units = by_rows ? g.m : np;
  const int64_t work = g.m * g.n * std::max<int64_t>(g.k, 1);
  threads = int(std::max<int64_t>(1, std::min<int64_t>({threads, units, work / 65536 + 1})));
  if (threads == 1) {
    run_range(kernel, g, 0, g.m, 0, np);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    if (by_rows)
      run_range(kernel, g, u0, u1, 0, np);
    else
      run_range(kernel, g, 0, g.m, u0, u1);
  }
}

std::vector<float> pack_panels(const float* src, int64_t K, int64_t N, bool n_major) {
  const int64_t np = panels(N);
  std::vector<float> out(size_t(np * K * kPanel), 0.0f);
  for (int64_t q = 0; q < np; ++q) {
    float* dst = out.data() + q * K * kPanel;
    const int64_t w = std::min(kPanel, N - q * kPanel);
    for (int64_t p = 0; p < K; ++p)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t col = q * kPanel + j;
        dst[p * kPanel + j] = n_major ? src[col * K + p] : src[p * N + col];
      }
  }
  return out;
}

}  // namespace ffn::nn
