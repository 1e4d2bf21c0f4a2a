// Valid positions, thread counts and the rows of the user's buffers (see
// core/positions.hpp).
#include "core/positions.hpp"

#include <omp.h>

#include <algorithm>
#include <string>

namespace ffn {

namespace nn {

std::vector<int64_t> valid_positions(const Shape& s, std::vector<int64_t>* offsets) {
  if (s.batch < 0) throw Error("shape: batch must be >= 0, got " + std::to_string(s.batch));
  if (s.seq < 0) throw Error("shape: sequence length must be >= 0, got " + std::to_string(s.seq));
  if (!s.lengths.empty() && int64_t(s.lengths.size()) != s.batch) {
    throw Error("lengths: expected " + std::to_string(s.batch) + " lengths (one per sequence), got " +
                std::to_string(s.lengths.size()));
  }
  std::vector<int64_t> pos;
  pos.reserve(size_t(s.positions()));
  if (offsets) offsets->assign(1, 0);
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t len = s.seq;
    if (!s.lengths.empty()) {
      len = s.lengths[size_t(b)];
      if (len < 0 || len > s.seq) {
        throw Error("lengths: sequence " + std::to_string(b) + " has length " + std::to_string(len) +
                    ", expected 0.." + std::to_string(s.seq));
      }
    }
    for (int64_t i = 0; i < len; ++i) pos.push_back(b * s.seq + i);
    if (offsets) offsets->push_back(int64_t(pos.size()));
  }
  return pos;
}

int thread_count(const RunOptions& o) { return resolve_threads(o.threads); }

}  // namespace nn

int resolve_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw Error("threads must be in 0.." + std::to_string(kMaxThreads) + " (0 = all), got " + std::to_string(threads));
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace ffn
