// The linear op on block-quantized weights (src/backends/cpu/qgemm.hpp):
// y[n, m] = x[n, k] · Wᵀ with W kept as the file's blocks (a native type of
// src/core/quant_types.hpp), on the kernel set's kernel for the type
// (qgemm_kernel: the set's own, else the scalar set's). Work is split into units of 4
// groups of 16 rows × 64 tokens; over 64 tokens the activations are quantized
// per 64-token piece in a job of the thread pool before the products. Each (token, row) result is
// computed by one thread in the rule's order, so the bits do not depend on the
// thread count, the batch or the ISA.
#pragma once

#include <cstdint>
#include <span>

#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/qgemm.hpp"

namespace ffn::nn {

// acts: scratch for the quantized activations (reused between calls).
// ctx.reference(): the scalar kernel set (the integer rule's reference bits).
void qlinear_forward(const Context& ctx, const QPanels& w, const float* x, int64_t n, float* y, QActs& acts);
// W stacked by rows from parts of one k, each of its own type (a file's Q, K
// and V of different types): y [n, Σ m], part i's rows after part i − 1's.
void qlinear_forward(const Context& ctx, std::span<const QPanels> parts, const float* x, int64_t n, float* y,
                     QActs& acts);

}  // namespace ffn::nn
