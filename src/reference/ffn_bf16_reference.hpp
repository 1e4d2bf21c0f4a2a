// The reference of the bf16 compute mode (RunOptions::compute = bf16): the
// layer with the operands of its two matrix products rounded to bfloat16 —
// the FFN input (after a pre-norm), W1, Wg, W2 and the hidden activation —
// and everything else as the float reference computes it: products and sums
// in double, bias, activation, residual and norm on unrounded values.
// Inference only. The fast path differs by its fp32 sums (in the kernels'
// order) and, where a hidden value lies within those rounding errors of a
// bf16 rounding boundary, by one bf16 step of that value.
#pragma once

#include "reference/ffn_reference.hpp"

namespace ffn::reference {

// y[n, d_model] = sublayer(x) in the bf16 compute mode.
void forward_bf16(const Config& cfg, const Params<float>& p, const float* x, int64_t n, float* y);

}  // namespace ffn::reference
