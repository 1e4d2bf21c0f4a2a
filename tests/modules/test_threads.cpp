// Thread safety: one loaded FeedForward used from several threads at once (forward
// and backward, each thread its own buffers and cache) gives exactly the
// results of the same calls made one after another. Run under
// ThreadSanitizer by scripts/sanitize.sh (with --threads 1 inside each call,
// so the only threads are the callers').
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "ffn/ffn.hpp"
#include "core/buffer_pool.hpp"
#include "ops/fused_forward.hpp"

using namespace ffn;

namespace {

struct Call {
  std::vector<float> x, y, dx, dy;
  Weights grads;
};

void run(const FeedForward& layer, Call& c, int64_t t, int threads) {
  RunOptions ro;
  ro.threads = threads;
  ro.training = true;
  ro.seed = 7;
  ForwardCache cache;
  layer.forward(c.x.data(), c.y.data(), Shape::tokens(t), ro, &cache);
  layer.backward(c.x.data(), c.dy.data(), Shape::tokens(t), cache, c.dx.data(), c.grads, ro);
}

}  // namespace

TEST(Threads, ConcurrentCallsOnOneLayerMatchSequentialOnes) {
  for (int inner : {1, 2}) {
    Config cfg;
    cfg.d_model = 24;
    cfg.d_ff = 70;
    cfg.activation = Activation::swiglu;
    cfg.norm = NormPlacement::pre;
    cfg.dropout_hidden = 0.1f;
    const FeedForward layer(cfg, 11);  // backward's weight panels are packed lazily: first use races here
    const int callers = 4;
    const int64_t t = 37;
    std::vector<Call> seq(callers), par(callers);
    for (int k = 0; k < callers; ++k) {
      for (Call* c : {&seq[size_t(k)], &par[size_t(k)]}) {
        c->x.resize(size_t(t * cfg.d_model));
        c->dy.resize(c->x.size());
        for (size_t i = 0; i < c->x.size(); ++i) {
          c->x[i] = float(std::sin(0.1 * double(i) + k));
          c->dy[i] = float(std::cos(0.3 * double(i) - k));
        }
        c->y.resize(c->x.size());
        c->dx.resize(c->x.size());
      }
    }
    std::vector<std::thread> pool;
    for (int k = 0; k < callers; ++k)
      pool.emplace_back([&, k] {
        for (int rep = 0; rep < 3; ++rep) run(layer, par[size_t(k)], t, inner);
      });
    for (auto& th : pool) th.join();
    for (int k = 0; k < callers; ++k) run(layer, seq[size_t(k)], t, inner);
    for (int k = 0; k < callers; ++k) {
      EXPECT_EQ(par[size_t(k)].y, seq[size_t(k)].y) << "caller " << k;
      EXPECT_EQ(par[size_t(k)].dx, seq[size_t(k)].dx) << "caller " << k;
      EXPECT_EQ(par[size_t(k)].grads.w1, seq[size_t(k)].grads.w1) << "caller " << k;
      EXPECT_EQ(par[size_t(k)].grads.w2, seq[size_t(k)].grads.w2) << "caller " << k;
      EXPECT_EQ(par[size_t(k)].grads.norm_weight, seq[size_t(k)].grads.norm_weight) << "caller " << k;
    }
    EXPECT_NE(seq[0].y, seq[1].y);
  }
}

// Backward's scratch is kept between calls in one pool for the process,
// bounded: a small call's set is kept for the next call (on any thread), a
// set bigger than the bound is released on return, and calls from several
// threads at once leave at most the bound behind.
TEST(Threads, BackwardScratchIsBoundedAndReleased) {
  auto make = [](int64_t d_ff) {
    Config cfg;
    cfg.d_model = 16;
    cfg.d_ff = d_ff;
    return FeedForward(cfg, 1);
  };
  auto run = [](const FeedForward& layer, int64_t t) {
    const int64_t d = layer.config().d_model;
    std::vector<float> x(size_t(t * d), 0.25f), y(x.size()), dy(x.size(), 1.0f), dx(x.size());
    ForwardCache cache;
    RunOptions ro;
    ro.threads = 1;
    layer.forward(x.data(), y.data(), Shape::tokens(t), ro, &cache);
    Weights g;
    layer.backward(x.data(), dy.data(), Shape::tokens(t), cache, dx.data(), g, ro);
    return nn::backward_scratch_bytes();
  };
  const FeedForward small = make(64), big = make(8192);
  EXPECT_GT(run(small, 16), 0u);  // kept
  // 3072 tokens x 8192 hidden x 4 bytes x 3 hidden-sized buffers = 288 MiB > the bound.
  static_assert(size_t(3072) * 8192 * 4 * 3 > nn::kBackwardScratchKeepBytes);
  EXPECT_LE(run(big, 3072), nn::kBackwardScratchKeepBytes);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { run(small, 64 + 16 * i); });
  for (auto& t : threads) t.join();
  EXPECT_GT(nn::backward_scratch_bytes(), 0u);
  EXPECT_LE(nn::backward_scratch_bytes(), nn::kBackwardScratchKeepBytes);
}

// The forward cache's buffers come from a bounded process-wide pool: a cache
// destroyed gives its buffers back, the next cache of the same shape takes
// them (the pool shrinks again), and the pool never keeps more than its bound.
TEST(Threads, ForwardCacheBuffersAreReusedAndBounded) {
  Config cfg;
  cfg.d_model = 16;
  cfg.d_ff = 96;
  const FeedForward layer(cfg, 3);
  const int64_t t = 512;
  std::vector<float> x(size_t(t * cfg.d_model), 0.5f), y(x.size());
  RunOptions ro;
  ro.threads = 1;
  {
    ForwardCache c;
    layer.forward(x.data(), y.data(), Shape::tokens(t), ro, &c);
  }
  const size_t kept = nn::pool_bytes();
  EXPECT_GE(kept, size_t(t * cfg.d_ff) * 4);  // z1 came back
  {
    ForwardCache c;
    layer.forward(x.data(), y.data(), Shape::tokens(t), ro, &c);
    EXPECT_LE(nn::pool_bytes() + size_t(t * cfg.d_ff) * 4, kept);  // and was taken again
  }
  // Many caches alive at once from several threads, then all freed: bounded.
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      std::vector<ForwardCache> caches(8);
      std::vector<float> yy(y.size());
      for (ForwardCache& c : caches) layer.forward(x.data(), yy.data(), Shape::tokens(t), ro, &c);
    });
  for (auto& th : threads) th.join();
  EXPECT_LE(nn::pool_bytes(), nn::kBufferPoolKeepBytes);
  // A buffer larger than the bound is never kept.
  void* big = nn::pool_take(nn::kBufferPoolKeepBytes + 64);
  const size_t before = nn::pool_bytes();
  nn::pool_give(big, nn::kBufferPoolKeepBytes + 64);
  EXPECT_EQ(nn::pool_bytes(), before);
}
