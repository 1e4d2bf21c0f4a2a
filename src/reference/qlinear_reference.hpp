// The reference of the block-quantized product (src/backends/cpu/qgemm.hpp):
// the rule's operations in plain loops, read from the file's own rows (so it
// also checks the repacking): the activations quantized by the scalar rule,
// then each (token, row) by the type's reference (its row of
// src/core/quant_types.hpp). Every ISA's kernel gives its bits.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/qgemm.hpp"

namespace ffn::reference {

// y[n, m] = x[n, k] · Wᵀ, W's rows as in repack_rows (row r at rows[r]).
void qlinear_forward(GgmlType type, const std::vector<const uint8_t*>& rows, int64_t k, const float* x, int64_t n,
                     float* y);

}  // namespace ffn::reference
