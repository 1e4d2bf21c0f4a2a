// The norm as an op on rows (LayerNorm with γ, β and biased variance, as
// PyTorch; RMSNorm with γ): forward saving mean and 1/σ, backward from them.
// Statistics in double; used by the encoder's attention sublayer and final
// norm and by the sentence pipeline's embedding norm. The row forward is the
// one of src/backends/cpu/norm_row.hpp, which the fused FFN runs in float;
// the backward here recomputes x̂ from v, mean and rstd (the fused FFN's
// starts from a saved x̂: norm_backward_row).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/norm_row.hpp"
#include "backends/context.hpp"
#include "core/thread_pool.hpp"
#include "ffn/types.hpp"

namespace ffn::nn {

// out[n, d] = Norm(v[n, d]); mean, rstd: [n] (mean is 0 for RMSNorm). out may be v.
inline void norm_forward(const Context& ctx, NormType type, float eps, const float* v, int64_t n, int64_t d,
                         const float* gamma, const float* beta, float* out, float* mean, float* rstd) {
  const int threads = ctx.threads();
  const auto rows = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i)
      normalize_row<double>(type, v + i * d, d, eps, gamma, beta, out + i * d, nullptr, mean + i, rstd + i);
  };
  if (n * d > 65536) parallel_range(threads, n, grain_for(n, threads), rows);
  else rows(0, n, 0);
}

// dv[n, d] (= or +=) from dout through out = γ·x̂ + β, x̂ = (v − mean)·rstd:
//   g = dout·γ;  dv = rstd (g − mean(g) − x̂·mean(g·x̂))   (RMSNorm: no mean(g))
// and dγ = Σ dout·x̂, dβ = Σ dout over the rows, in row order (overwritten).
inline void norm_backward(const Context& ctx, NormType type, const float* v, const float* mean, const float* rstd,
                          int64_t n, int64_t d, const float* gamma, const float* dout, float* dv, bool accumulate,
                          float* dgamma, float* dbeta) {
  const int threads = ctx.threads();
  const auto rows = [&](int64_t i0, int64_t i1, int) {
  for (int64_t i = i0; i < i1; ++i) {
    const float* x = v + i * d;
    const float* g = dout + i * d;
    const double mu = mean[i], r = rstd[i];
    double mg = 0.0, mgx = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double gj = double(g[j]) * double(gamma[j]);
      mg += gj;
      mgx += gj * (x[j] - mu) * r;
    }
    mg = type == NormType::rmsnorm ? 0.0 : mg / double(d);
    mgx /= double(d);
    for (int64_t j = 0; j < d; ++j) {
      const double xh = (x[j] - mu) * r;
      const float val = float(r * (double(g[j]) * double(gamma[j]) - mg - xh * mgx));
      dv[i * d + j] = accumulate ? dv[i * d + j] + val : val;
    }
  }
  };
  if (n * d > 65536) parallel_range(threads, n, grain_for(n, threads), rows);
  else rows(0, n, 0);
  std::vector<double> sg(size_t(d), 0.0), sb(size_t(d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float* x = v + i * d;
    const float* g = dout + i * d;
    const double mu = mean[i], r = rstd[i];
    for (int64_t j = 0; j < d; ++j) {
      sg[size_t(j)] += double(g[j]) * ((x[j] - mu) * r);
      sb[size_t(j)] += double(g[j]);
    }
  }
  for (int64_t j = 0; j < d; ++j) {
    dgamma[j] = float(sg[size_t(j)]);
    if (dbeta) dbeta[j] = float(sb[size_t(j)]);
  }
}

}  // namespace ffn::nn
