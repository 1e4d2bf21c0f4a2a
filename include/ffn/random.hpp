// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a counter-based generator. The random bits for an element are a
// pure function of (key, counter), so a dropout mask keyed by the element's
// global position is the same for any thread count or blocking, and backward
// regenerates it instead of storing it.
//
// Also the initialization rule (fill_uniform: nn.Linear's uniform draws from
// Philox, so the same seed gives the same weights on every machine).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ffn {


inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(M0) * c[0];
    const uint64_t p1 = uint64_t(M1) * c[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

// Streams keep the different uses of one seed independent.
enum class Stream : uint32_t {
  dropout_hidden = 1, dropout_output = 2, init = 3, shuffle = 4, data = 5,
  attention = 6,        // the encoder's dropout on attention probabilities
  attention_output = 7, // the encoder's dropout on the attention sublayer's output
  sublayer_seed = 8,    // derive_seed: one seed per encoder layer and sublayer
};

// The seed of sublayer `sub` of encoder layer `layer`: stacked layers run with
// one user seed must not drop the same elements, so each sublayer's masks
// are keyed by a seed drawn from Philox(seed, (layer, sub)).
inline uint64_t derive_seed(uint64_t seed, uint32_t layer, uint32_t sub) {
  const auto r = philox4x32_10({layer, sub, uint32_t(Stream::sublayer_seed), 0u}, {uint32_t(seed), uint32_t(seed >> 32)});
  return uint64_t(r[0]) | (uint64_t(r[1]) << 32);
}

// 32 random bits for element `index` of `stream` under `seed`: element i uses
// word i % 4 of the block with counter (i / 4, stream).
inline uint32_t random_bits(uint64_t seed, Stream stream, uint64_t index) {
  const uint64_t block = index >> 2;
  auto r = philox4x32_10({uint32_t(block), uint32_t(block >> 32), uint32_t(stream), 0u},
                         {uint32_t(seed), uint32_t(seed >> 32)});
  return r[index & 3];
}

// Dropout with probability p: an element is dropped when its bits < threshold.
struct DropoutRule {
  uint64_t threshold = 0;  // in [0, 2^32]; 2^32 drops everything (p = 1)
  float scale = 1.0f;      // 1 / (1 - p), 0 when p = 1

  static DropoutRule make(float p) {
    DropoutRule r;
    if (p <= 0.0f) return r;
    if (p >= 1.0f) return DropoutRule{1ull << 32, 0.0f};
    r.threshold = static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
    r.scale = 1.0f / (1.0f - p);
    return r;
  }
  bool active() const { return threshold != 0; }
  // The factor (0 or scale) for element `index`.
  float factor(uint64_t seed, Stream s, uint64_t index) const {
    if (!active()) return 1.0f;
    return random_bits(seed, s, index) < threshold ? 0.0f : scale;
  }
};


// v[i] = bound * (2u - 1), u uniform in [0, 1) with 24 random bits, from
// Philox(seed, stream init, index (tensor_id << 48) | i).
inline void fill_uniform(float* v, size_t n, float bound, uint64_t seed, uint64_t tensor_id) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = random_bits(seed, Stream::init, (tensor_id << 48) | i);
    const float u = float(bits >> 8) * (1.0f / 16777216.0f);
    v[i] = bound * (2.0f * u - 1.0f);
  }
}

}  // namespace ffn
