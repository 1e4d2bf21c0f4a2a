// The library's calls of a FeedForward inside an enclosing public call (an
// encoder's or decoder's layer, a model's FFN sublayer): they run on that
// call's execution context (one per public call, src/backends/context.hpp)
// instead of making one per sublayer. Users call FeedForward's public
// forward and backward, which make their own.
#pragma once

#include "backends/context.hpp"
#include "ffn/feed_forward.hpp"

namespace ffn::detail {

struct FfnAccess {
  static void forward(const FeedForward& f, const nn::Context& ctx, const float* x, float* y, const Shape& shape,
                      const RunOptions& opts, ForwardCache* cache = nullptr) {
    f.forward_impl(&ctx, x, y, shape, opts, cache);
  }
  static void backward(const FeedForward& f, const nn::Context& ctx, const float* x, const float* dy,
                       const Shape& shape, const ForwardCache& cache, float* dx, Weights& grads,
                       const RunOptions& opts) {
    f.backward_impl(&ctx, x, dy, shape, cache, dx, grads, opts, nullptr, nullptr);
  }
};

}  // namespace ffn::detail
