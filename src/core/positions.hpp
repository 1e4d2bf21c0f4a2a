// The checks and bookkeeping every sublayer does on its call's Shape and
// RunOptions, and the one gather/scatter of its valid rows (the feed-forward
// sublayer and the encoder).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ffn/types.hpp"

namespace ffn::nn {

// Global positions (b * S + s) of the valid tokens, in order; with `offsets`,
// also the B + 1 offsets of each sequence's first valid token among them.
// Throws Error naming lengths or shape when they are out of range.
std::vector<int64_t> valid_positions(const Shape& s, std::vector<int64_t>* offsets = nullptr);

// opts.threads, checked (0..kMaxThreads), with 0 meaning all hardware threads.
int thread_count(const RunOptions& opts);

// Offset and stride (in floats) of feature j of position p in the user's buffer.
struct Addressing {
  int64_t d, S;
  Layout layout;
  int64_t base(int64_t p) const {  // position p = b * S + s
    if (layout == Layout::tokens) return p * d;
    const int64_t b = p / S, s = p % S;
    return b * d * S + s;
  }
  int64_t stride() const { return layout == Layout::tokens ? 1 : S; }
};

// True when the valid tokens are exactly the buffer's rows, in order.
inline bool contiguous(const Shape& s, const std::vector<int64_t>& pos) {
  return s.layout == Layout::tokens && int64_t(pos.size()) == s.positions();
}

inline void gather(const float* src, const Addressing& a, const std::vector<int64_t>& pos, float* dst) {
  const int64_t st = a.stride();
  for (size_t i = 0; i < pos.size(); ++i) {
    const float* p = src + a.base(pos[i]);
    for (int64_t j = 0; j < a.d; ++j) dst[i * size_t(a.d) + size_t(j)] = p[j * st];
  }
}

// Writes rows to their positions and zeros to the padding positions.
inline void scatter(const float* rows, const Addressing& a, const std::vector<int64_t>& pos, int64_t positions,
                    float* dst) {
  std::fill(dst, dst + positions * a.d, 0.0f);
  const int64_t st = a.stride();
  for (size_t i = 0; i < pos.size(); ++i) {
    float* p = dst + a.base(pos[i]);
    for (int64_t j = 0; j < a.d; ++j) p[j * st] = rows[i * size_t(a.d) + size_t(j)];
  }
}

// Throws Error("<what><name>: expected N values, got M") unless v holds
// `expected` values; the message is only built then (the feed-forward
// sublayer checks its weights at every training step).
inline void check_size(const std::vector<float>& v, size_t expected, std::string_view what,
                       std::string_view name = {}) {
  if (v.size() != expected)
    throw Error(std::string(what) + std::string(name) + ": expected " + std::to_string(expected) + " values, got " +
                std::to_string(v.size()));
}

}  // namespace ffn::nn
