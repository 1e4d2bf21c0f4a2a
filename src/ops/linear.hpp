// The linear op, y[n, m] = x[n, k] Wᵀ + b (W [m, k] row-major, as nn.Linear),
// and its backward, on the ISA's fp32 GEMM or on the reference
// (src/reference/linear_reference.hpp). The encoder's attention projections
// use it; the FFN's two products are fused with their epilogues instead
// (src/ops/fused_forward.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn {

// W in the GEMM's B panels for the forward (x · Wᵀ), packed once per weight.
std::vector<float> pack_linear_weight(const float* w, int64_t k, int64_t m);

// y = x Wᵀ + b (b may be null); `packed` is pack_linear_weight(w) (unused by
// the reference, which runs when ctx.reference()).
void linear_forward(const Context& ctx, const float* x, int64_t n, int64_t k, const float* w,
                    const std::vector<float>& packed, const float* b, int64_t m, float* y);

// ---- int8 (inference) --------------------------------------------------------
// W [m, k] in the int8 scheme of src/backends/cpu/quantize.hpp: one scale per
// output row (s = max|w|/127), each token's input row quantized to 8-bit
// levels (asymmetric, its own scale), optionally a few input channels kept in
// float32 (outlier features: zeroed in q and in the quantized row, their
// products added in double). The encoder's attention projections use it.
struct Int8Linear {
  int64_t k = 0, m = 0;
  std::vector<int8_t> q;             // [m, k], as W
  std::vector<float> scale;          // [m]
  std::vector<int64_t> fp32_inputs;  // ascending
  std::vector<float> w32;            // [fp32_inputs.size(), m]: W's columns for them
  AlignedVector<int8_t> pairs;       // q as the int16 × int8 product's B panels
};
// Throws Error naming `name` for a non-finite weight or a bad channel list.
Int8Linear quantize_linear(const float* w, int64_t k, int64_t m, const std::vector<int64_t>& fp32_inputs,
                           const std::string& name);
// Whether kc runs linear_forward_int8: the int16 × int8 product (scalar;
// AVX2's vpmaddwd, which the AVX-512, VNNI and AMX sets borrow). Where it is
// false callers keep the fp32 weights and use linear_forward.
inline bool int8_linear_supported(const KernelConfig& kc) { return kc.int8 && kc.int8->igemm; }
// y = x Wᵀ + b; the bits of reference::linear_forward_int8 for any thread count.
void linear_forward_int8(const Context& ctx, const Int8Linear& w, const float* x, int64_t n, const float* b,
                         float* y);

// dx[n, k] = dy W (or += when accumulate), dW[m, k] = dyᵀ x, db[m] = Σ dy (db may be null).
void linear_backward(const Context& ctx, const float* x, int64_t n, int64_t k, const float* w, int64_t m,
                     const float* dy, float* dx, bool accumulate, float* dw, float* db);

}  // namespace ffn::nn
