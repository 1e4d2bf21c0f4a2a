// d_ff in shards (DffShards, tensor parallelism's seam): the forward in two
// stages gives the one-call forward's bits, and so do the layers of aligned
// blocks of the shards whose partial sums are added over the same tree —
// the property that makes `mpirun -np P ffn run --tensor-parallel` equal to
// one process. Odd sizes, every activation kind, norm placement, dropout,
// int8 (with fp32 input channels) and bf16 compute.
#include <gtest/gtest.h>

#include "ffn/ffn.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

std::vector<float> whole(const FeedForward& l, const std::vector<float>& x, const RunOptions& o) {
  std::vector<float> y(x.size());
  l.forward(x.data(), y.data(), Shape::tokens(int64_t(x.size()) / l.config().d_model), o);
  return y;
}

// P layers of count/P shards each; their partials added over the tree of
// the ranks (split in the middle, as the shards' tree), then the tail.
std::vector<float> sharded(const FeedForward& l, int64_t P, const std::vector<float>& x, const RunOptions& o,
                           const Shape* padded = nullptr) {
  const Shape shape = padded ? *padded : Shape::tokens(int64_t(x.size()) / l.config().d_model);
  const int64_t count = l.shards().count;
  const size_t rows = size_t(valid_tokens(shape) * l.config().d_model);
  std::vector<std::vector<float>> part(static_cast<size_t>(P), std::vector<float>(rows));
  std::vector<FeedForward> ranks;
  for (int64_t r = 0; r < P; ++r) {
    ranks.push_back(l.shard(count * r / P, count * (r + 1) / P));
    ranks.back().forward_partial(x.data(), shape, part[size_t(r)].data(), o);
  }
  auto tree = [&](auto& self, int64_t lo, int64_t hi) -> void {
    if (hi - lo < 2) return;
    const int64_t mid = (lo + hi) / 2;
    self(self, lo, mid);
    self(self, mid, hi);
    for (size_t i = 0; i < rows; ++i) part[size_t(lo)][i] += part[size_t(mid)][i];
  };
  tree(tree, 0, P);
  std::vector<float> y(x.size(), -1.0f);
  ranks[0].forward_tail(x.data(), shape, part[0].data(), y.data(), o);
  return y;
}

// Training through the stages: forward with caches, backward in two stages
// with dIn summed over the ranks' tree. dx and b2's and the norm's gradients
// equal the whole layer's bit for bit on every rank; each rank's W1, Wg, b1
// rows and W2 columns equal the whole layer's gradients there.
TEST(Shards, BackwardInStagesGivesTheWholeBackwardsBits) {
  for (Activation act : {Activation::relu, Activation::swiglu})
    for (NormPlacement norm : {NormPlacement::none, NormPlacement::pre, NormPlacement::post}) {
      Config cfg;
      cfg.d_model = 24;
      cfg.d_ff = 1300;
      cfg.activation = act;
      cfg.norm = norm;
      cfg.dropout_hidden = 0.2f;
      cfg.dropout_output = 0.1f;
      const FeedForward layer(cfg, uint64_t(7));
      const Shape shape{2, 9, Layout::tokens, {9, 4}};
      const std::vector<float> x = test::randn(size_t(18 * 24), 1), dy = test::randn(x.size(), 2);
      RunOptions o;
      o.training = true;
      o.seed = 5;
      o.threads = 2;
      ForwardCache cache;
      std::vector<float> y(x.size()), dx(x.size());
      Weights g;
      layer.forward(x.data(), y.data(), shape, o, &cache);
      layer.backward(x.data(), dy.data(), shape, cache, dx.data(), g, o);
      const int64_t n = valid_tokens(shape), d = 24, F = 1300;
      for (int64_t P : {1, 2, 4}) {
        std::vector<FeedForward> ranks;
        std::vector<ForwardCache> caches(static_cast<size_t>(P));
        std::vector<std::vector<float>> part(static_cast<size_t>(P), std::vector<float>(size_t(n * d)));
        auto tree = [&](auto& self, int64_t lo, int64_t hi) -> void {
          if (hi - lo < 2) return;
          const int64_t mid = (lo + hi) / 2;
          self(self, lo, mid);
          self(self, mid, hi);
          for (size_t i = 0; i < part[0].size(); ++i) part[size_t(lo)][i] += part[size_t(mid)][i];
        };
        for (int64_t r = 0; r < P; ++r) {
          ranks.push_back(layer.shard(4 * r / P, 4 * (r + 1) / P));
          ranks.back().forward_partial(x.data(), shape, part[size_t(r)].data(), o, &caches[size_t(r)]);
        }
        tree(tree, 0, P);
        const std::vector<float> sum = part[0];
        std::vector<Weights> gr(static_cast<size_t>(P));
        for (int64_t r = 0; r < P; ++r) {
          std::vector<float> yr(x.size(), -1.0f);
          ranks[size_t(r)].forward_tail(x.data(), shape, sum.data(), yr.data(), o, &caches[size_t(r)]);
          ASSERT_EQ(yr, y) << "P=" << P << " r=" << r;
          ranks[size_t(r)].backward_partial(x.data(), dy.data(), shape, caches[size_t(r)], part[size_t(r)].data(),
                                            gr[size_t(r)], o);
        }
        tree(tree, 0, P);
        for (int64_t r = 0; r < P; ++r) {
          std::vector<float> dxr(x.size(), -1.0f);
          ranks[size_t(r)].backward_finish(x.data(), dy.data(), shape, caches[size_t(r)], part[0].data(), dxr.data(),
                                           gr[size_t(r)], o);
          const std::string at = std::string(to_string(act)) + " " + std::string(to_string(norm)) +
                                 " P=" + std::to_string(P) + " r=" + std::to_string(r);
          EXPECT_EQ(dxr, dx) << at;
          EXPECT_EQ(gr[size_t(r)].b2, g.b2) << at;
          EXPECT_EQ(gr[size_t(r)].norm_weight, g.norm_weight) << at;
          EXPECT_EQ(gr[size_t(r)].norm_bias, g.norm_bias) << at;
          const auto [b, e] = DffShards::units(F, 4, 4 * r / P, 4 * (r + 1) / P);
          EXPECT_TRUE(std::equal(gr[size_t(r)].w1.begin(), gr[size_t(r)].w1.end(), g.w1.begin() + b * d)) << at;
          EXPECT_TRUE(std::equal(gr[size_t(r)].b1.begin(), gr[size_t(r)].b1.end(), g.b1.begin() + b)) << at;
          if (!g.wg.empty()) {
            EXPECT_TRUE(std::equal(gr[size_t(r)].wg.begin(), gr[size_t(r)].wg.end(), g.wg.begin() + b * d)) << at;
          }
          for (int64_t row = 0; row < d; ++row)
            ASSERT_TRUE(std::equal(gr[size_t(r)].w2.begin() + row * (e - b), gr[size_t(r)].w2.begin() + (row + 1) * (e - b),
                                   g.w2.begin() + row * F + b)) << at << " W2 row " << row;
        }
      }
    }
}

TEST(Shards, PaddedAndChannelsFirstInputs) {
  Config cfg;
  cfg.d_model = 6;
  cfg.d_ff = 1000;
  cfg.dropout_hidden = 0.3f;
  const FeedForward layer(cfg, uint64_t(2));
  for (Layout layout : {Layout::tokens, Layout::ncw}) {
    const Shape shape{3, 5, layout, {5, 2, 0}};
    const std::vector<float> x = test::randn(size_t(15 * 6), 4);
    RunOptions o;
    o.training = true;
    o.seed = 3;
    std::vector<float> want(x.size());
    layer.forward(x.data(), want.data(), shape, o);
    for (int64_t P : {1, 2, 4}) EXPECT_EQ(sharded(layer, P, x, o, &shape), want) << "P=" << P;
  }
}

TEST(Shards, StagesAndShardLayersGiveTheWholeForwardsBits) {
  for (Activation act : {Activation::relu, Activation::gelu, Activation::swiglu})
    for (NormPlacement norm : {NormPlacement::none, NormPlacement::pre, NormPlacement::post})
      for (int64_t F : {1000, 1300}) {  // 4 chunks; 6 chunks (shards of 1, 2, 1, 2)
        Config cfg;
        cfg.d_model = 37;
        cfg.d_ff = F;
        cfg.activation = act;
        cfg.norm = norm;
        cfg.bias = F == 1000;
        cfg.dropout_hidden = 0.2f;
        cfg.dropout_output = 0.1f;
        const FeedForward layer(cfg, uint64_t(F));
        for (int64_t t : {1, 13, 100}) {
          const std::vector<float> x = test::randn(size_t(t * cfg.d_model), uint64_t(t));
          for (bool training : {false, true}) {
            RunOptions o;
            o.threads = 2;
            o.training = training;
            o.seed = 9;
            const std::vector<float> want = whole(layer, x, o);
            for (int64_t P : {1, 2, 4})
              ASSERT_EQ(sharded(layer, P, x, o), want) << to_string(act) << " " << to_string(norm) << " F=" << F
                                                       << " T=" << t << " training=" << training << " P=" << P;
          }
        }
      }
}

TEST(Shards, LowPrecisionShardsToo) {
  Config cfg;
  cfg.d_model = 40;
  cfg.d_ff = 1100;
  cfg.activation = Activation::swiglu;
  const FeedForward base(cfg, uint64_t(4));
  const std::vector<float> x = test::randn(size_t(30 * cfg.d_model), 5);
  RunOptions o;
  o.threads = 2;
  for (const FeedForward& l : {base.converted(WeightDtype::int8), base.converted(WeightDtype::int8, Int8Options{{0, 7, 39}}),
                         base.converted(WeightDtype::bf16)}) {
    const std::vector<float> want = whole(l, x, o);
    for (int64_t P : {2, 4}) EXPECT_EQ(sharded(l, P, x, o), want) << to_string(l.weight_dtype()) << " P=" << P;
  }
  o.compute = Compute::bf16;
  const std::vector<float> want = whole(base, x, o);
  EXPECT_EQ(sharded(base, 4, x, o), want) << "compute bf16";
}

// An int8 file whose scales are not max|w|/127 of its values (one W2 scale
// per row, as files before the 256-column groups; or another tool's): the
// shards slice the stored values and scales, so they still give the bits.
TEST(Shards, Int8FileShardsAreSlicedAsStored) {
  const auto dir = test::scratch_dir("shards_int8");
  Config cfg;
  cfg.d_model = 20;
  cfg.d_ff = 1100;
  SafetensorsFile f = FeedForward(cfg, uint64_t(5)).converted(WeightDtype::int8, Int8Options{{3, 11}}).to_safetensors();
  std::vector<float> per_row(20);
  for (size_t r = 0; r < 20; ++r) per_row[r] = 0.003f + 0.0007f * float(r);
  f.tensors["linear2.weight_scale"] = NamedTensor{{20}, per_row};
  for (float& v : f.tensors["linear1.weight_scale"].data) v *= 1.37f;  // not max|w|/127 of anything
  const std::string path = (dir / "q.safetensors").string();
  write_safetensors(path, f);
  const FeedForward l = FeedForward::load(path);
  const std::vector<float> x = test::randn(size_t(9 * 20), 6);
  RunOptions o;
  o.threads = 2;
  const std::vector<float> want = whole(l, x, o);
  for (int64_t P : {2, 4}) EXPECT_EQ(sharded(l, P, x, o), want) << "P=" << P;
}

TEST(Shards, MisuseIsAnError) {
  Config cfg;
  cfg.d_model = 8;
  cfg.d_ff = 1000;
  const FeedForward l(cfg, uint64_t(1));
  using test::expect_error;
  const FeedForward s = l.shard(2, 4);
  EXPECT_EQ(s.config().d_ff, 488);  // chunks 2, 3: units [512, 1000)
  std::vector<float> x(8), y(8);
  expect_error([&] { s.forward(x.data(), y.data(), Shape::tokens(1)); }, "holds shards 2..3 of 4");
  expect_error([&] { l.shard(1, 5); }, "expected 0 <= first < last <= count = 4, got [1, 5)");
  expect_error([&] { l.shard(1, 3); }, "[1, 3) is not an aligned block of the 4 shards");
  expect_error([&] { l.shard(0, 3); }, "[0, 3) is not an aligned block");
  expect_error([&] { FeedForward(cfg, uint64_t(1)).set_shards(DffShards{128, 0, 128, 0}); }, "power of two from 1 to 64");
  FeedForward t(cfg, uint64_t(1));
  expect_error([&] { t.set_shards(DffShards{4, 0, 2, 2000}); }, "are hidden units [0, 1024), but this layer's d_ff is 1000");
  expect_error([&] { t.set_shards(DffShards{3, 0, 3, 0}); }, "power of two");
  Config small = cfg;
  small.d_ff = 300;  // 2 chunks: shards 0 and 2 are empty
  expect_error([&] { FeedForward(small, uint64_t(1)).shard(0, 1); }, "hold no hidden units");
  RunOptions ref;
  ref.path = Path::reference;
  expect_error([&] { l.forward_partial(x.data(), Shape::tokens(1), y.data(), ref); }, "the fast path only");
}

}  // namespace
}  // namespace ffn

namespace ffn {
namespace {

// Each shard read from the file alone (LoadOptions::shards) computes what
// the whole file's layer does; a block read equals the full read's slice.
TEST(Shards, LoadedShardsMatchTheWholeFile) {
  const auto dir = test::scratch_dir("shards_load");
  Config cfg;
  cfg.d_model = 24;
  cfg.d_ff = 1300;
  cfg.activation = Activation::swiglu;
  cfg.norm = NormPlacement::pre;
  const FeedForward base(cfg, uint64_t(8));
  const std::vector<float> x = test::randn(size_t(11 * cfg.d_model), 3);
  RunOptions o;
  o.threads = 2;
  for (WeightDtype dt : {WeightDtype::fp32, WeightDtype::bf16}) {
    const std::string path = (dir / (std::string(to_string(dt)) + ".safetensors")).string();
    base.converted(dt).save(path);
    const FeedForward all = FeedForward::load(path);
    const std::vector<float> want = whole(all, x, o);
    for (int64_t P : {2, 4}) {
      std::vector<std::vector<float>> part(static_cast<size_t>(P), std::vector<float>(x.size()));
      std::vector<FeedForward> ranks;
      for (int64_t r = 0; r < P; ++r) {
        LoadOptions lo;
        lo.shards = DffShards{4, 4 * r / P, 4 * (r + 1) / P, 0};
        ranks.push_back(FeedForward::load(path, lo));
        EXPECT_EQ(ranks.back().weight_dtype(), dt);
        ranks.back().forward_partial(x.data(), Shape::tokens(11), part[size_t(r)].data(), o);
      }
      if (P == 4)
        for (size_t i = 0; i < x.size(); ++i) part[0][i] += part[1][i], part[2][i] += part[3][i];
      for (size_t i = 0; i < x.size(); ++i) part[0][i] += part[size_t(P / 2)][i];
      std::vector<float> y(x.size());
      ranks[0].forward_tail(x.data(), Shape::tokens(11), part[0].data(), y.data(), o);
      EXPECT_EQ(y, want) << to_string(dt) << " P=" << P;
    }
  }
  io::SafetensorsReader r((dir / "fp32.safetensors").string());
  const std::vector<float> w2 = r.read_f32("linear2.weight"), blk = r.read_f32_block("linear2.weight", 3, 9, 256, 700);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 444; ++j) ASSERT_EQ(blk[size_t(i * 444 + j)], w2[size_t((3 + i) * 1300 + 256 + j)]);
  test::expect_error([&] { r.read_f32_block("linear2.weight", 0, 25, 0, 1); }, "outside its shape");
  LoadOptions bad;
  bad.shards = DffShards{4, 0, 1, 0};
  base.converted(WeightDtype::int8).save((dir / "int8.safetensors").string());
  test::expect_error([&] { FeedForward::load((dir / "int8.safetensors").string(), bad); }, "not read by shards yet");
}

}  // namespace
}  // namespace ffn
