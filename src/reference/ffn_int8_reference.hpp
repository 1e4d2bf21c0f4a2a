// The int8 reference: the layer exactly as src/backends/cpu/quantize.hpp defines its
// int8 arithmetic, in plain loops over the unpacked int8 matrices — one
// token, one output at a time, int32 dot products. Norm statistics in double
// as the float reference. The fast path must reproduce every quantized value
// and int32 sum; only the float order of the final sums (the fast path adds
// four shards of d_ff over a tree) and a pre-LN input rounded differently can differ.
#pragma once

#include "backends/cpu/quantize.hpp"
#include "reference/ffn_reference.hpp"

namespace ffn::reference {

// y[n, d_model] = sublayer(x) with int8 weights q (biases and norm from p).
void forward_int8(const Config& cfg, const nn::QuantizedWeights& q, const Params<float>& p, const float* x,
                  int64_t n, float* y);

// The int32 product C[m, n] = A[m, k] · Bᵀ with B[n, k] int8 (PyTorch layout).
void igemm_int8(const int16_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c);

}  // namespace ffn::reference
