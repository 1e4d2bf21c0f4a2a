// ffn::ForwardCache (include/ffn/forward_cache.hpp): its contents are
// src/ops/forward_cache.hpp's.
#include "ops/forward_cache.hpp"

namespace ffn {

ForwardCache::ForwardCache() : data_(std::make_unique<Data>()) {}
ForwardCache::~ForwardCache() = default;
ForwardCache::ForwardCache(ForwardCache&&) noexcept = default;
ForwardCache& ForwardCache::operator=(ForwardCache&&) noexcept = default;
ForwardCache::Data& ForwardCache::data() { return *data_; }
const ForwardCache::Data& ForwardCache::data() const { return *data_; }
size_t ForwardCache::bytes() const {
  const Data& d = *data_;
  return d.pos.size() * 8 + (d.z1.size() + d.zg.size() + d.mean.size() + d.rstd.size() + d.xhat.size()) * 4;
}

}  // namespace ffn
