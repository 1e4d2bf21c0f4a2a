// The contents of ffn::ForwardCache (see ffn/forward_cache.hpp for what is saved and why);
// the modules reach them through detail::CacheAccess (src/modules/cache_access.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer_pool.hpp"
#include "ffn/forward_cache.hpp"
#include "ffn/types.hpp"

namespace ffn {

struct ForwardCache::Data {
  bool filled = false;
  Config cfg;  // the layer's settings at forward time
  Layout layout = Layout::tokens;
  int64_t batch = 0, seq = 0;
  bool training = false;
  uint64_t seed = 0;
  int64_t position_offset = 0;  // RunOptions::partition.position_offset of the forward call
  std::vector<int64_t> pos;  // global positions of the valid tokens
  // From the process's buffer pool (src/core/buffer_pool.hpp): a new cache at
  // every training step reuses the last step's pages.
  using Buffer = std::vector<float, nn::PoolAllocator<float>>;
  Buffer z1, zg, mean, rstd, xhat;
};

}  // namespace ffn
