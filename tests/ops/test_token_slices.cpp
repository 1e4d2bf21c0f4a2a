// Token slices (RunOptions::partition.token_slices and position_offset, data
// parallelism's seam): the weight gradients summed per slice and added over
// the slices' tree equal, bit for bit, those of processes that each hold a
// subtree's rows (with their first row as position_offset) added over the
// same tree — the property that makes `mpirun -np P ffn train` give one
// process's loss curve. dx does not depend on the slices; the sums stay
// within the fused-vs-reference tolerance of the unsliced ones.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <utility>

#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace ffn {
namespace {

struct Result {
  std::vector<float> y, dx;
  Weights g;
};

// Forward and backward of rows [r0, r1) of x/dy ([n, d]), with slices
// given relative to r0 (empty: none) and position_offset r0.
Result run(const FeedForward& l, const std::vector<float>& x, const std::vector<float>& dy, int64_t r0, int64_t r1,
           std::vector<int64_t> slices, RunOptions o) {
  const int64_t d = l.config().d_model, n = r1 - r0;
  o.partition.position_offset = r0;
  o.partition.token_slices = std::move(slices);
  Result r;
  r.y.resize(size_t(n * d));
  r.dx.resize(size_t(n * d));
  ForwardCache cache;
  l.forward(x.data() + r0 * d, r.y.data(), Shape::tokens(n), o, &cache);
  l.backward(x.data() + r0 * d, dy.data() + r0 * d, Shape::tokens(n), cache, r.dx.data(), r.g, o);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

Config config(Activation act, NormPlacement norm, NormType type, bool bias) {
  Config cfg;
  cfg.d_model = 40;
  cfg.d_ff = 300;  // two 256-wide gradient tiles, the second partial
  cfg.activation = act;
  cfg.norm = norm;
  cfg.norm_type = type;
  cfg.bias = bias;
  cfg.dropout_hidden = 0.2f;
  cfg.dropout_output = 0.1f;
  return cfg;
}

const Config kConfigs[] = {
    config(Activation::relu, NormPlacement::post, NormType::layernorm, true),
    config(Activation::swiglu, NormPlacement::pre, NormType::rmsnorm, false),
    config(Activation::gelu, NormPlacement::none, NormType::layernorm, true),
    config(Activation::geglu, NormPlacement::pre, NormType::layernorm, true),
};

// Slice k of 4 over n rows: [n·k/4, n·(k+1)/4) (the trainer's split).
int64_t bound(int64_t n, int64_t k) { return n * k / 4; }

TEST(TokenSlices, RanksHoldingSubtreesAddUpToOneProcessBits) {
  for (const Config& cfg : kConfigs)
    for (int64_t n : {1, 3, 37, 301, 1023}) {  // 1023: one process's 255-row slice takes 256-wide gradient
                                               // tiles, a rank's 256-row slice 512-wide ones
      const FeedForward layer(cfg, uint64_t(3));
      const int64_t d = cfg.d_model;
      const std::vector<float> x = test::randn(size_t(n * d), 11), dy = test::randn(x.size(), 12);
      RunOptions o;
      o.training = true;
      o.seed = 9;
      o.threads = 2;
      const std::vector<int64_t> four = {0, bound(n, 1), bound(n, 2), bound(n, 3), n};
      const Result one = run(layer, x, dy, 0, n, four, o);
      for (int64_t P : {2, 4}) {
        std::vector<Result> ranks;
        for (int64_t r = 0; r < P; ++r) {
          const int64_t k0 = 4 * r / P, k1 = 4 * (r + 1) / P, r0 = bound(n, k0);
          std::vector<int64_t> local;
          for (int64_t k = k0; k <= k1; ++k) local.push_back(bound(n, k) - r0);
          ranks.push_back(run(layer, x, dy, r0, bound(n, k1), local, o));
        }
        // The ranks' tree: split in the middle, as Comm::sum_tree.
        auto tree = [&](auto& self, int64_t lo, int64_t hi) -> void {
          if (hi - lo < 2) return;
          const int64_t mid = (lo + hi) / 2;
          self(self, lo, mid);
          self(self, mid, hi);
          const auto a = ranks[size_t(lo)].g.all(), b = ranks[size_t(mid)].g.all();
          for (size_t t = 0; t < 8; ++t)
            for (size_t i = 0; i < a[t]->size(); ++i) (*a[t])[i] += (*b[t])[i];
        };
        tree(tree, 0, P);
        std::vector<float> y, dx;
        for (const Result& r : ranks) {
          y.insert(y.end(), r.y.begin(), r.y.end());
          dx.insert(dx.end(), r.dx.begin(), r.dx.end());
        }
        const std::string where = std::string(to_string(cfg.activation)) + " n=" + std::to_string(n) +
                                  " P=" + std::to_string(P);
        EXPECT_TRUE(same_bits(y, one.y)) << where;  // dropout keyed by the global row
        EXPECT_TRUE(same_bits(dx, one.dx)) << where;
        const auto a = std::as_const(ranks[0].g).all(), b = one.g.all();
        for (size_t t = 0; t < 8; ++t) EXPECT_TRUE(same_bits(*a[t], *b[t])) << where << " tensor " << t;
      }
    }
}

TEST(TokenSlices, SlicesChangeOnlyTheSumsOrder) {
  for (const Config& cfg : kConfigs) {
    const FeedForward layer(cfg, uint64_t(4));
    const int64_t n = 150, d = cfg.d_model;
    const std::vector<float> x = test::randn(size_t(n * d), 21), dy = test::randn(x.size(), 22);
    RunOptions o;
    o.training = true;
    o.seed = 2;
    o.threads = 2;
    const std::vector<int64_t> four = {0, 37, 75, 112, n};
    Result plain = run(layer, x, dy, 0, n, {}, o);
    Result sliced = run(layer, x, dy, 0, n, four, o);
    EXPECT_TRUE(same_bits(plain.y, sliced.y));
    EXPECT_TRUE(same_bits(plain.dx, sliced.dx));
    RunOptions ref = o;
    ref.path = Path::reference;
    Result reference = run(layer, x, dy, 0, n, four, ref);
    Result one_thread = run(layer, x, dy, 0, n, four, [&] { RunOptions t = o; t.threads = 1; return t; }());
    const auto p = plain.g.all(), s = sliced.g.all(), r = reference.g.all(), t1 = one_thread.g.all();
    for (size_t t = 0; t < 8; ++t) {
      ASSERT_EQ(p[t]->size(), s[t]->size());
      EXPECT_TRUE(compare(s[t]->data(), p[t]->data(), p[t]->size()).ok(test::kFusedVsReference)) << t;
      EXPECT_TRUE(compare(s[t]->data(), r[t]->data(), r[t]->size()).ok(test::kFusedVsReference)) << t;
      EXPECT_TRUE(same_bits(*s[t], *t1[t])) << "threads changed tensor " << t;
    }
    // A slice of no rows adds zeros: slices {0, 0, n} give the one-slice sums' bits.
    Result empty_first = run(layer, x, dy, 0, n, {0, 0, n}, o);
    Result single = run(layer, x, dy, 0, n, {0, n}, o);
    const auto e = empty_first.g.all(), g1 = single.g.all();
    for (size_t t = 0; t < 8; ++t) EXPECT_TRUE(same_bits(*e[t], *g1[t])) << t;
  }
}

TEST(TokenSlices, BadSlicesAndOffsetsAreErrors) {
  const FeedForward layer(kConfigs[0], uint64_t(1));
  const int64_t n = 8, d = layer.config().d_model;
  const std::vector<float> x = test::randn(size_t(n * d), 1);
  std::vector<float> y(x.size()), dx(x.size());
  RunOptions o;
  o.training = true;
  ForwardCache cache;
  layer.forward(x.data(), y.data(), Shape::tokens(n), o, &cache);
  Weights g;
  for (const std::vector<int64_t>& bad : std::vector<std::vector<int64_t>>{{0}, {1, 8}, {0, 5, 3, 8}, {0, 9}}) {
    o.partition.token_slices = bad;
    try {
      layer.backward(x.data(), y.data(), Shape::tokens(n), cache, dx.data(), g, o);
      ADD_FAILURE() << "accepted slices " << bad.size();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token_slices: expected non-decreasing boundaries from 0 to the 8"),
                std::string::npos)
          << e.what();
    }
  }
  o.partition.token_slices.clear();
  o.partition.position_offset = -1;
  EXPECT_THROW(layer.forward(x.data(), y.data(), Shape::tokens(n), o), Error);
}

}  // namespace
}  // namespace ffn
