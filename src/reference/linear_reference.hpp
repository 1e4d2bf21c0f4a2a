// The plain oracle of the linear op (src/ops/linear.hpp): double sums in the
// natural order, one rounding to float per result.
#pragma once

#include <cstdint>

namespace ffn::reference {

// y[n, m] = x[n, k] Wᵀ + b  (W [m, k] row-major, as nn.Linear; b [m] or null).
void linear_forward(const float* x, int64_t n, int64_t k, const float* w, const float* b, int64_t m, float* y);

// The bf16 compute mode (Linear::Run::bf16): x and W each rounded to bf16
// (round to nearest even), then linear_forward's double sums.
void linear_forward_bf16(const float* x, int64_t n, int64_t k, const float* w, const float* b, int64_t m, float* y);

// The int8 linear (src/ops/linear.hpp, Int8Linear), integer oracle: each row
// of x quantized by quantize_row_ref with the fp32 input channels zeroed
// first, Σ a·q in int64, y = fma(float(Σ), s_a · scale[j], prev[j]), prev =
// b[j] (or 0) + Σ_s x[c_s]·w32[s, j] by float fmas in order of s (src/backends/cpu/quantize.hpp).
// q [m, k] and w32 [n32, m] as Int8Linear holds them.
void linear_forward_int8(const float* x, int64_t n, int64_t k, const int8_t* q, const float* scale,
                         const int64_t* fp32_inputs, int64_t n32, const float* w32, const float* b, int64_t m,
                         float* y);

// dx[n, k] = dy W (or += when accumulate), dW[m, k] = dyᵀ x (overwritten).
void linear_backward(const float* x, int64_t n, int64_t k, const float* w, int64_t m, const float* dy, float* dx,
                     bool accumulate, float* dw);

}  // namespace ffn::reference
