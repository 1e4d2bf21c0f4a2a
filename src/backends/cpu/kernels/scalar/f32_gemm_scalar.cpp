// f32 GEMM block, portable C++ (baseline flags; the compiler may vectorize the
// 16-wide inner loop), with float32, bf16 or fp16 B. Contract: src/backends/cpu/gemm.hpp.
#include <algorithm>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::scalar {
namespace {

inline float widen(const float* row, int64_t j) { return row[j]; }
inline float widen(const bf16_t* row, int64_t j) { return bf16_to_float(row[bf16_slot(j)].bits); }
inline float widen(const fp16_t* row, int64_t j) { return fp16_to_float(row[j].bits); }

template <typename TB>
void block(const GemmArgsT<TB>& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t q = 0; q < panels(g.n); ++q) {
      const int64_t w = std::min(kPanel, g.n - q * kPanel);
      float* c = g.c + i * g.ldc + q * kPanel;
      float s[kPanel] = {};
      if (g.accumulate) std::copy(c, c + w, s);
      const float* a = g.a + i * g.rsa;
      const TB* b = g.b + q * g.psb;
      for (int64_t p = 0; p < g.k; ++p) {
        const float av = a[p * g.csa];
        const TB* bp = b + p * g.ldb;
        for (int64_t j = 0; j < w; ++j) s[j] += av * widen(bp, j);
      }
      std::copy(s, s + w, c);
    }
  }
}

}  // namespace

void gemm_block(const GemmArgs& g) { block(g); }
void gemm_block(const GemmArgsT<bf16_t>& g) { block(g); }
void gemm_block(const GemmArgsT<fp16_t>& g) { block(g); }

}  // namespace ffn::nn::scalar
