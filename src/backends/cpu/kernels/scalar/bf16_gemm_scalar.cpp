// bf16 compute, portable C++: the bf16 × bf16 → fp32 product of
// src/backends/cpu/gemm.hpp (Bf16GemmArgs) and the float → bf16 rounding, plainly. The
// fallback where the CPU has neither AVX512_BF16 nor AMX (slow; `ffn bench`
// names it). Each C element sums its pairs in k order, even element first.
#include <cmath>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::scalar {
namespace {

void gemm_bf16(const Bf16GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      const uint16_t* b = g.b + (j / kPanel) * g.psb + (j % kPanel) * 2;
      const uint16_t* a = g.a + i * 2 * g.kp;  // plain rows (a_rows = 1)
      float s = g.accumulate ? g.c[i * g.ldc + j] : 0.0f;
      for (int64_t p = 0; p < g.kp; ++p) {
        s = std::fma(bf16_to_float(a[2 * p]), bf16_to_float(b[p * 32]), s);
        s = std::fma(bf16_to_float(a[2 * p + 1]), bf16_to_float(b[p * 32 + 1]), s);
      }
      g.c[i * g.ldc + j] = s;
    }
}

void to_bf16(const float* v, int64_t n, uint16_t* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = float_to_bf16(v[j]);
}

}  // namespace

const Bf16Kernels bf16_kernels{&gemm_bf16, &to_bf16, 1, "portable fp32 multiply-add on bf16 values"};

}  // namespace ffn::nn::scalar
