// The plain oracle of the linear op (src/ops/linear.hpp): double sums in the
// natural order, one rounding to float per result.
#pragma once

#include <cstdint>

namespace ffn::reference {

// y[n, m] = x[n, k] Wᵀ + b  (W [m, k] row-major, as nn.Linear; b [m] or null).
void linear_forward(const float* x, int64_t n, int64_t k, const float* w, const float* b, int64_t m, float* y);

// dx[n, k] = dy W (or += when accumulate), dW[m, k] = dyᵀ x (overwritten).
void linear_backward(const float* x, int64_t n, int64_t k, const float* w, int64_t m, const float* dy, float* dx,
                     bool accumulate, float* dw);

}  // namespace ffn::reference
