// The library's access to what ForwardCache and EncoderCache hold: their
// contents are private in the public headers (a user holds a cache and
// passes it back, never reads it); the ops and modules that fill and read
// them go through here. The types are defined where they are filled:
// ForwardCache::Data in src/ops/forward_cache.hpp, EncoderCache::Data in
// src/modules/encoder.cpp.
#pragma once

#include "ffn/decoder.hpp"
#include "ffn/encoder.hpp"
#include "ffn/feed_forward.hpp"
#include "ops/forward_cache.hpp"

namespace ffn::detail {

struct CacheAccess {
  using ForwardData = ForwardCache::Data;
  using EncoderData = EncoderCache::Data;
  using DecoderData = DecoderCache::Data;
  static ForwardData& data(ForwardCache& c) { return c.data(); }
  static const ForwardData& data(const ForwardCache& c) { return c.data(); }
  static EncoderData& data(EncoderCache& c) { return c.data(); }
  static const EncoderData& data(const EncoderCache& c) { return c.data(); }
  static DecoderData& data(DecoderCache& c) { return c.data(); }
  static const DecoderData& data(const DecoderCache& c) { return c.data(); }
};

}  // namespace ffn::detail

namespace ffn {
using ForwardCacheData = detail::CacheAccess::ForwardData;
}  // namespace ffn
