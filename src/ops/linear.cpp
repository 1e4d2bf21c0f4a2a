#include "ops/linear.hpp"

#include "backends/cpu/gemm.hpp"
#include "reference/linear_reference.hpp"

namespace ffn::nn {

std::vector<float> pack_linear_weight(const float* w, int64_t k, int64_t m) { return pack_panels(w, k, m, true); }

void linear_forward(const KernelConfig& kc, bool reference, const float* x, int64_t n, int64_t k, const float* w,
                    const std::vector<float>& packed, const float* b, int64_t m, float* y, int threads) {
  if (n == 0) return;
  if (reference) {
    reference::linear_forward(x, n, k, w, b, m, y);
    return;
  }
  GemmArgs g;
  g.m = n; g.n = m; g.k = k;
  g.a = x; g.rsa = k; g.csa = 1;
  g.b = packed.data(); g.ldb = kPanel; g.psb = k * kPanel;
  g.c = y; g.ldc = m;
  gemm(kc.f32, g, threads);
  if (b) {
#pragma omp parallel for num_threads(threads) schedule(static) if (n * m > 65536)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) y[i * m + j] += b[j];
  }
}

// dx[n, k] = dy W (or += when accumulate), dW[m, k] = dyᵀ x, db[m] = Σ dy.
void linear_backward(const KernelConfig& kc, bool reference, const float* x, int64_t n, int64_t k,
                     const float* w, int64_t m, const float* dy, float* dx, bool accumulate, float* dw, float* db,
                     int threads) {
  if (reference) {
    reference::linear_backward(x, n, k, w, m, dy, dx, accumulate, dw);
  } else {
    GemmArgs g;  // dx = dy · W
    g.m = n; g.n = k; g.k = m;
    g.a = dy; g.rsa = m; g.csa = 1;
    g.b = w; g.ldb = k; g.psb = kPanel;
    g.c = dx; g.ldc = k;
    g.accumulate = accumulate;
    if (n > 0) gemm(kc.f32, g, threads);
    GemmArgs h;  // dW = dyᵀ · x
    h.m = m; h.n = k; h.k = n;
    h.a = dy; h.rsa = 1; h.csa = m;
    h.b = x; h.ldb = k; h.psb = kPanel;
    h.c = dw; h.ldc = k;
    gemm(kc.f32, h, threads);
  }
  if (db) {
    std::vector<double> s(size_t(m), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) s[size_t(j)] += double(dy[i * m + j]);
    for (int64_t j = 0; j < m; ++j) db[j] = float(s[size_t(j)]);
  }
}

}  // namespace ffn::nn
