// What a forward call saves for its backward (FeedForward::forward with a
// cache; the encoder's and decoder's caches hold one per FFN sublayer). The
// ops room's public header: its contents are defined and filled there
// (src/ops/forward_cache.hpp).
#pragma once

#include <cstddef>
#include <memory>

namespace ffn {

namespace detail {
struct CacheAccess;  // the library's access to the caches' contents
}  // namespace detail

// What forward saves for backward (filled when a cache is passed to forward):
//   z1  [N, d_ff]   pre-activation x W1ᵀ + b1 of every valid token (N = valid tokens)
//   zg  [N, d_ff]   gate pre-activation (gated activations only)
//   rstd [N]        1/σ of the normalized vector (x for pre, x + o for post)
//   mean [N]        its mean (pre only: with x it gives the normalized input back)
//   xhat [N, d_model]  normalized x + o (post only; γ may be zero, so y alone is not enough)
// plus the run options (training, seed) so backward regenerates the same dropout masks.
// The hidden activation, the masks and the pre-LN normalized input are recomputed.
class ForwardCache {
 public:
  ForwardCache();
  ~ForwardCache();
  ForwardCache(ForwardCache&&) noexcept;
  ForwardCache& operator=(ForwardCache&&) noexcept;
  // Bytes held, for users who budget memory.
  size_t bytes() const;

 private:
  // The contents (src/ops/forward_cache.hpp, src/modules/encoder.cpp): the
  // library's own, reached through detail::CacheAccess.
  struct Data;
  friend struct detail::CacheAccess;
  Data& data();
  const Data& data() const;
  std::unique_ptr<Data> data_;
};

}  // namespace ffn
