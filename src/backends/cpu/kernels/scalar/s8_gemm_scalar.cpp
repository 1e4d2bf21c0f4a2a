// int8 kernels, portable C++: the integer product, activation quantization and
// dequantization of src/backends/cpu/gemm.hpp / src/backends/cpu/quantize.hpp, plainly.
#include <cmath>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::scalar {
namespace {

void igemm(const IGemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t q = 0; q < panels(g.n); ++q) {
      const int8_t* b = g.b + q * g.psb;
      for (int64_t j = 0; j < kPanel; ++j) {
        int32_t s = 0;
        for (int64_t p = 0; p < 2 * g.kp; ++p)
          s += int32_t(g.a[i * g.lda + p]) * int32_t(b[(p / 2) * 32 + j * 2 + p % 2]);
        g.c[i * g.ldc + q * kPanel + j] = s;
      }
    }
}

void dequant(const int32_t* acc, int64_t n, float s_a, const float* s_w, const float* prev, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = std::fma(float(acc[j]), s_a * s_w[j], prev ? prev[j] : 0.0f);
}

// fp32_input_part (src/backends/cpu/quantize.hpp) compiled for this ISA.
void fp32_part(const float* xs, int64_t k, int64_t rows, const float* wt, int64_t ld, const float* b, int64_t n,
               float* prev, int64_t ldp) {
  fp32_input_part(xs, k, rows, wt, ld, b, n, prev, ldp);
}

}  // namespace

const Int8Kernels int8_kernels{&igemm, nullptr, &quantize_row_ref, nullptr, &dequant, &fp32_part};

}  // namespace ffn::nn::scalar
