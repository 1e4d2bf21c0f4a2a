// The linear op, y[n, m] = x[n, k] Wᵀ + b (W [m, k] row-major, as nn.Linear),
// and its backward, on the ISA's fp32 GEMM or on the reference
// (src/reference/linear_reference.hpp). The encoder's attention projections
// use it; the FFN's two products are fused with their epilogues instead
// (src/ops/fused_forward.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/kernel_config.hpp"

namespace ffn::nn {

// W in the GEMM's B panels for the forward (x · Wᵀ), packed once per weight.
std::vector<float> pack_linear_weight(const float* w, int64_t k, int64_t m);

// y = x Wᵀ + b (b may be null); `packed` is pack_linear_weight(w) (unused by the reference).
void linear_forward(const KernelConfig& kc, bool reference, const float* x, int64_t n, int64_t k, const float* w,
                    const std::vector<float>& packed, const float* b, int64_t m, float* y, int threads);

// dx[n, k] = dy W (or += when accumulate), dW[m, k] = dyᵀ x, db[m] = Σ dy (db may be null).
void linear_backward(const KernelConfig& kc, bool reference, const float* x, int64_t n, int64_t k, const float* w,
                     int64_t m, const float* dy, float* dx, bool accumulate, float* dw, float* db, int threads);

}  // namespace ffn::nn
