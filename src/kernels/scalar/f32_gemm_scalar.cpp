// f32 GEMM block, portable C++ (baseline flags; the compiler may vectorize the
// 16-wide inner loop). Contract: src/nn/gemm.hpp.
#include <algorithm>

#include "nn/gemm.hpp"

namespace ffn::nn::scalar {

void gemm_block(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t q = 0; q < panels(g.n); ++q) {
      const int64_t w = std::min(kPanel, g.n - q * kPanel);
      float* c = g.c + i * g.ldc + q * kPanel;
      float s[kPanel] = {};
      if (g.accumulate) std::copy(c, c + w, s);
      const float* a = g.a + i * g.rsa;
      const float* b = g.b + q * g.psb;
      for (int64_t p = 0; p < g.k; ++p) {
        const float av = a[p * g.csa];
        const float* bp = b + p * g.ldb;
        for (int64_t j = 0; j < w; ++j) s[j] += av * bp[j];
      }
      std::copy(s, s + w, c);
    }
  }
}

}  // namespace ffn::nn::scalar
