// Thread safety: one loaded Layer used from several threads at once (forward
// and backward, each thread its own buffers and cache) gives exactly the
// results of the same calls made one after another. Run under
// ThreadSanitizer by scripts/sanitize.sh (with --threads 1 inside each call,
// so the only threads are the callers').
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "ffn/ffn.hpp"
#include "nn/fused_forward.hpp"

using namespace ffn;

namespace {

struct Call {
  std::vector<float> x, y, dx, dy;
  Weights grads;
};

void run(const Layer& layer, Call& c, int64_t t, int threads) {
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
    const Layer layer(cfg, 11);  // backward's weight panels are packed lazily: first use races here
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

// Backward's per-thread scratch is bounded: a call on many tokens releases it
// on return (a long-lived thread does not keep ~50 MB), a small call keeps its
// buffers for the next one. Checked on a thread of its own and on this one.
TEST(Threads, BackwardScratchIsBoundedAndReleased) {
  Config cfg;
  cfg.d_model = 64;
  cfg.d_ff = 2048;
  const Layer layer(cfg, 1);
  auto run = [&](int64_t t) {
    std::vector<float> x(size_t(t * cfg.d_model), 0.25f), y(x.size()), dy(x.size(), 1.0f), dx(x.size());
    ForwardCache cache;
    RunOptions ro;
    ro.threads = 1;
    layer.forward(x.data(), y.data(), Shape::tokens(t), ro, &cache);
    Weights g;
    layer.backward(x.data(), dy.data(), Shape::tokens(t), cache, dx.data(), g, ro);
    return nn::backward_scratch_bytes();
  };
  // 2048 tokens x 2048 hidden x 4 bytes x 3 hidden-sized buffers = 48 MiB > the bound.
  static_assert(size_t(2048) * 2048 * 4 * 3 > nn::kBackwardScratchKeepBytes);
  std::thread([&] {
    EXPECT_GT(run(16), 0u);  // small: kept
    EXPECT_LE(run(2048), nn::kBackwardScratchKeepBytes);
    EXPECT_EQ(nn::backward_scratch_bytes(), 0u);  // released
  }).join();
  EXPECT_LE(run(2048), nn::kBackwardScratchKeepBytes);
}
