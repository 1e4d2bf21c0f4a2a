// The checks and bookkeeping every sublayer does on its call's Shape and
// RunOptions (src/modules/feed_forward.cpp defines them; the encoder uses them too).
#pragma once

#include <cstdint>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn::nn {

// Global positions (b * S + s) of the valid tokens, in order; with `offsets`,
// also the B + 1 offsets of each sequence's first valid token among them.
// Throws Error naming lengths or shape when they are out of range.
std::vector<int64_t> valid_positions(const Shape& s, std::vector<int64_t>* offsets = nullptr);

// opts.threads, checked (0..kMaxThreads), with 0 meaning all hardware threads.
int thread_count(const RunOptions& opts);

}  // namespace ffn::nn
