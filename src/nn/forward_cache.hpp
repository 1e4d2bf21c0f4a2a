// The contents of ffn::ForwardCache (see ffn.hpp for what is saved and why).
#pragma once

#include <cstdint>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn {

struct ForwardCache::Data {
  bool filled = false;
  int64_t d_model = 0, d_ff = 0, positions = 0;
  bool training = false;
  uint64_t seed = 0;
  std::vector<int64_t> pos;  // global positions of the valid tokens
  std::vector<float> z1, zg, mean, rstd, xhat;
};

}  // namespace ffn
