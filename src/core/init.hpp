// Deterministic uniform fills from Philox, for initialization and test data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/philox.hpp"

namespace ffn::nn {

// v[i] = bound * (2u - 1), u uniform in [0, 1) with 24 random bits, from
// Philox(seed, stream init, index (tensor_id << 48) | i).
inline void fill_uniform(float* v, size_t n, float bound, uint64_t seed, uint64_t tensor_id) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = random_bits(seed, Stream::init, (tensor_id << 48) | i);
    const float u = float(bits >> 8) * (1.0f / 16777216.0f);
    v[i] = bound * (2.0f * u - 1.0f);
  }
}

}  // namespace ffn::nn
