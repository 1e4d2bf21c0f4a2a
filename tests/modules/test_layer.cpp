// The public FeedForward: the fused path against the reference on odd sizes, the
// invariances (threads, batch composition, layout), padding, dropout at the
// layer level, initialization, files and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "test_util.hpp"
#include "modules/cache_access.hpp"
#include "ops/forward_cache.hpp"
#include "tolerances.hpp"

namespace fs = std::filesystem;
using namespace ffn;

namespace {

using test::randn;

// A layer with non-trivial norm parameters (init gives γ=1, β=0).
FeedForward make_layer(Config cfg, uint64_t seed) {
  FeedForward l(cfg, seed);
  Weights w = l.weights();
  for (size_t i = 0; i < w.norm_weight.size(); ++i) w.norm_weight[i] = 1.0f + 0.1f * std::sin(float(i));
  for (size_t i = 0; i < w.norm_bias.size(); ++i) w.norm_bias[i] = 0.1f * std::cos(float(i));
  l.set_weights(w);
  return l;
}

fs::path temp_dir() {
  static const fs::path d = ffn::test::scratch_dir("layer");
  return d;
}

struct Variant {
  int64_t d, F, T;
  Activation act;
  NormPlacement norm;
  NormType type;
  bool bias;
};

// Sizes around the fast path's blocking: 96-token blocks and per-thread token
// shares (so every remainder of the 6-row micro-tile, 1..5, occurs), 256-wide
// chunks of d_ff in four shards (some empty when d_ff < 769), 16-column panels with partial last panels, k blocked by 256 (d_model,
// d_ff and, in backward, tokens above 256), GEMM row blocks of 48.
const Variant kVariants[] = {
    {300, 520, 70, Activation::relu, NormPlacement::post, NormType::layernorm, true},
    {5, 40, 300, Activation::swiglu, NormPlacement::post, NormType::layernorm, true},
    {17, 301, 37, Activation::relu, NormPlacement::post, NormType::layernorm, true},
    {1, 1, 5, Activation::relu, NormPlacement::none, NormType::layernorm, true},
    {3, 513, 33, Activation::gelu, NormPlacement::pre, NormType::rmsnorm, false},
    {64, 256, 16, Activation::silu, NormPlacement::post, NormType::rmsnorm, true},
    {31, 257, 17, Activation::swiglu, NormPlacement::pre, NormType::layernorm, false},
    {8, 100, 1, Activation::geglu, NormPlacement::none, NormType::layernorm, true},
    {40, 96, 50, Activation::reglu, NormPlacement::post, NormType::layernorm, true},
    {12, 300, 15, Activation::gelu_tanh, NormPlacement::pre, NormType::layernorm, true},
    {23, 130, 41, Activation::geglu_tanh, NormPlacement::pre, NormType::rmsnorm, false},
};

Config config_of(const Variant& v) {
  Config c;
  c.d_model = v.d;
  c.d_ff = v.F;
  c.activation = v.act;
  c.norm = v.norm;
  c.norm_type = v.type;
  c.bias = v.bias;
  return c;
}

}  // namespace

// Every fused-path test runs once per ISA; an ISA this CPU (or build) lacks is
// reported as skipped, never passed.
class PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << to_string(GetParam()) << " not supported here";
  }
};

TEST_P(PerIsa, FusedMatchesReferenceOnOddSizes) {
  for (const Variant& v : kVariants) {
    for (bool training : {false, true}) {
      Config cfg = config_of(v);
      cfg.dropout_hidden = 0.2f;
      cfg.dropout_output = 0.1f;
      const FeedForward layer = make_layer(cfg, 11);
      const auto x = randn(size_t(v.T * v.d), 5);
      std::vector<float> y_fast(x.size()), y_ref(x.size());
      RunOptions fast, ref;
      fast.isa = GetParam();
      fast.training = ref.training = training;
      fast.seed = ref.seed = 77;
      ref.path = Path::reference;
      ForwardCache c_fast, c_ref;
      layer.forward(x.data(), y_fast.data(), Shape::tokens(v.T), fast, &c_fast);
      layer.forward(x.data(), y_ref.data(), Shape::tokens(v.T), ref, &c_ref);
      const Comparison c = compare(y_fast.data(), y_ref.data(), x.size());
      EXPECT_TRUE(c.ok(test::kFusedVsReference)) << "d=" << v.d << " F=" << v.F << " T=" << v.T << " "
                                                  << to_string(v.act) << ": " << c.describe();
      EXPECT_GT(nonzero_fraction(y_ref.data(), y_ref.size()), 0.5);
      // What the two paths save for backward agrees as well.
      const auto& a = detail::CacheAccess::data(c_fast);
      const auto& b = detail::CacheAccess::data(c_ref);
      EXPECT_TRUE(compare(a.z1.data(), b.z1.data(), a.z1.size()).ok(test::kFusedVsReference));
      EXPECT_TRUE(compare(a.zg.data(), b.zg.data(), a.zg.size()).ok(test::kFusedVsReference));
      EXPECT_TRUE(compare(a.rstd.data(), b.rstd.data(), a.rstd.size()).ok(test::kFusedVsReference));
      EXPECT_TRUE(compare(a.xhat.data(), b.xhat.data(), a.xhat.size()).ok(test::kFusedVsReference));
    }
  }
}

TEST_P(PerIsa, BitwiseIdenticalForAnyThreadCount) {
  for (const Variant& v : kVariants) {
    Config cfg = config_of(v);
    cfg.dropout_hidden = 0.3f;
    cfg.dropout_output = 0.2f;
    const FeedForward layer = make_layer(cfg, 3);
    const auto x = randn(size_t(v.T * v.d), 6);
    std::vector<float> y1(x.size());
    RunOptions ro;
    ro.isa = GetParam();
    ro.training = true;
    ro.seed = 123;
    ro.threads = 1;
    layer.forward(x.data(), y1.data(), Shape::tokens(v.T), ro);
    for (int t : {2, 3, 4}) {
      std::vector<float> yt(x.size());
      ro.threads = t;
      layer.forward(x.data(), yt.data(), Shape::tokens(v.T), ro);
      EXPECT_EQ(std::memcmp(y1.data(), yt.data(), x.size() * 4), 0) << "threads=" << t << " d=" << v.d;
    }
  }
}

TEST_P(PerIsa, TokenResultIndependentOfTheBatch) {
  const Variant& v = kVariants[0];
  const FeedForward layer = make_layer(config_of(v), 4);
  const auto x = randn(size_t(v.T * v.d), 7);
  std::vector<float> y_all(x.size());
  RunOptions ro;
  ro.isa = GetParam();
  layer.forward(x.data(), y_all.data(), Shape::tokens(v.T), ro);
  for (int64_t t : {int64_t(0), int64_t(15), int64_t(16), v.T - 1}) {
    std::vector<float> y_one(size_t(v.d));
    layer.forward(x.data() + t * v.d, y_one.data(), Shape::tokens(1), ro);
    EXPECT_EQ(std::memcmp(y_one.data(), y_all.data() + t * v.d, size_t(v.d) * 4), 0) << "token " << t;
  }
}

// Gradients of the fast backward against the reference backward (double
// accumulation), and bitwise the same for any thread count.
TEST_P(PerIsa, FastBackwardMatchesReference) {
  for (const Variant& v : kVariants) {
    for (bool training : {false, true}) {
      Config cfg = config_of(v);
      cfg.dropout_hidden = 0.2f;
      cfg.dropout_output = 0.1f;
      const FeedForward layer = make_layer(cfg, 12);
      const auto x = randn(size_t(v.T * v.d), 13);
      const auto dy = randn(size_t(v.T * v.d), 14);
      std::vector<float> y(x.size()), dx_fast(x.size()), dx_ref(x.size()), dx_t(x.size());
      RunOptions ro;
      ro.isa = GetParam();
      ro.training = training;
      ro.seed = 5;
      ForwardCache cache;
      layer.forward(x.data(), y.data(), Shape::tokens(v.T), ro, &cache);
      Weights g_fast, g_ref, g_t;
      ro.threads = 1;
      layer.backward(x.data(), dy.data(), Shape::tokens(v.T), cache, dx_fast.data(), g_fast, ro);
      RunOptions ref = ro;
      ref.path = Path::reference;
      layer.backward(x.data(), dy.data(), Shape::tokens(v.T), cache, dx_ref.data(), g_ref, ref);
      const std::string where = "d=" + std::to_string(v.d) + " F=" + std::to_string(v.F) + " T=" +
                                std::to_string(v.T) + " " + std::string(to_string(v.act));
      const Comparison cx = compare(dx_fast.data(), dx_ref.data(), x.size());
      EXPECT_TRUE(cx.ok(test::kFusedVsReference)) << where << " dx: " << cx.describe();
      const std::pair<const char*, std::vector<float> Weights::*> fields[] = {
          {"w1", &Weights::w1}, {"b1", &Weights::b1}, {"wg", &Weights::wg}, {"bg", &Weights::bg},
          {"w2", &Weights::w2}, {"b2", &Weights::b2}, {"norm_weight", &Weights::norm_weight},
          {"norm_bias", &Weights::norm_bias}};
      for (const auto& [name, f] : fields) {
        ASSERT_EQ((g_fast.*f).size(), (g_ref.*f).size()) << name;
        const Comparison c = compare((g_fast.*f).data(), (g_ref.*f).data(), (g_ref.*f).size());
        EXPECT_TRUE(c.ok(test::kFusedVsReference)) << where << " d" << name << ": " << c.describe();
      }
      ro.threads = 3;
      layer.backward(x.data(), dy.data(), Shape::tokens(v.T), cache, dx_t.data(), g_t, ro);
      EXPECT_EQ(std::memcmp(dx_fast.data(), dx_t.data(), x.size() * 4), 0) << where;
      for (const auto& [name, f] : fields)
        EXPECT_TRUE((g_fast.*f) == (g_t.*f)) << where << " d" << name << " differs with 3 threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, PerIsa, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(Layer, UnsupportedIsaIsAnError) {
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 6;
  const FeedForward l(cfg, 1);
  std::vector<float> x(8), y(8);
  for (Isa i : all_isas()) {
    RunOptions ro;
    ro.isa = i;
    if (isa_supported(i)) EXPECT_NO_THROW(l.forward(x.data(), y.data(), Shape::tokens(2), ro));
    else EXPECT_THROW(l.forward(x.data(), y.data(), Shape::tokens(2), ro), Error);
  }
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_THROW(parse_isa("sse9", "FFN_ISA"), Error);
}

TEST(Layer, NcwLayoutIsTheTransposedTokensLayout) {
  const int64_t B = 2, S = 7, d = 6;
  Config cfg;
  cfg.d_model = d;
  cfg.d_ff = 20;
  const FeedForward layer = make_layer(cfg, 8);
  const auto x = randn(size_t(B * S * d), 9);  // [B, S, d]
  std::vector<float> xc(x.size()), y(x.size()), yc(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t j = 0; j < d; ++j) xc[size_t((b * d + j) * S + s)] = x[size_t((b * S + s) * d + j)];
  layer.forward(x.data(), y.data(), Shape{B, S, Layout::tokens, {}});
  layer.forward(xc.data(), yc.data(), Shape{B, S, Layout::ncw, {}});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t j = 0; j < d; ++j)
        ASSERT_EQ(yc[size_t((b * d + j) * S + s)], y[size_t((b * S + s) * d + j)]);
}

TEST(Layer, PaddingIsNeverReadAndComesOutZero) {
  const int64_t B = 3, S = 5, d = 4;
  Config cfg;
  cfg.d_model = d;
  cfg.d_ff = 9;
  const FeedForward layer = make_layer(cfg, 2);
  auto x = randn(size_t(B * S * d), 10);
  const std::vector<int64_t> lengths = {5, 0, 2};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = lengths[size_t(b)]; s < S; ++s)
      for (int64_t j = 0; j < d; ++j) x[size_t((b * S + s) * d + j)] = NAN;
  std::vector<float> y(x.size(), 7.0f), dx(x.size(), 7.0f), dy = randn(x.size(), 11);
  for (int64_t s = 2; s < S; ++s) dy[size_t((2 * S + s) * d)] = NAN;  // padding in dy is ignored too
  const Shape shape{B, S, Layout::tokens, lengths};
  ForwardCache cache;
  layer.forward(x.data(), y.data(), shape, {}, &cache);
  Weights g;
  layer.backward(x.data(), dy.data(), shape, cache, dx.data(), g);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t j = 0; j < d; ++j) {
        const size_t i = size_t((b * S + s) * d + j);
        if (s >= lengths[size_t(b)]) {
          EXPECT_EQ(y[i], 0.0f);
          EXPECT_EQ(dx[i], 0.0f);
        } else {
          EXPECT_TRUE(std::isfinite(y[i]) && std::isfinite(dx[i]));
        }
      }
  for (float v : g.w1) ASSERT_TRUE(std::isfinite(v));
  // The valid tokens give what they give alone.
  std::vector<float> y0(size_t(S * d));
  layer.forward(x.data(), y0.data(), Shape::tokens(S));
  EXPECT_EQ(std::memcmp(y0.data(), y.data(), y0.size() * 4), 0);
}

TEST(Layer, DropoutAtTheLayer) {
  Config cfg;
  cfg.d_model = 64;
  cfg.d_ff = 128;
  cfg.norm = NormPlacement::none;
  cfg.dropout_output = 0.4f;
  const FeedForward layer(cfg, 1);
  const int64_t T = 256;
  const auto x = randn(size_t(T * cfg.d_model), 12);
  std::vector<float> y1(x.size()), y2(x.size()), y3(x.size()), yeval(x.size());
  RunOptions ro;
  ro.training = true;
  ro.seed = 5;
  layer.forward(x.data(), y1.data(), Shape::tokens(T), ro);
  layer.forward(x.data(), y2.data(), Shape::tokens(T), ro);
  EXPECT_EQ(y1, y2) << "same seed, same mask";
  ro.seed = 6;
  layer.forward(x.data(), y3.data(), Shape::tokens(T), ro);
  EXPECT_NE(y1, y3) << "another seed, another mask";
  layer.forward(x.data(), yeval.data(), Shape::tokens(T));  // inference: identity
  size_t zeros = 0;
  for (size_t i = 0; i < y1.size(); ++i) {
    if (y1[i] == 0.0f) ++zeros;
    else ASSERT_NEAR(y1[i], yeval[i] / 0.6f, 1e-5f * std::fabs(yeval[i]) + 1e-6f) << "kept values scaled by 1/(1-p)";
  }
  const double n = double(y1.size()), frac = double(zeros) / n, sd = std::sqrt(0.4 * 0.6 / n);
  EXPECT_NEAR(frac, 0.4, 5 * sd);
}

TEST(Layer, InitIsDeterministicWithTorchBounds) {
  Config cfg;
  cfg.d_model = 100;
  cfg.d_ff = 400;
  const FeedForward a(cfg, 9), b(cfg, 9), c(cfg, 10);
  EXPECT_EQ(a.weights().w1, b.weights().w1);
  EXPECT_NE(a.weights().w1, c.weights().w1);
  auto stats = [](const std::vector<float>& v, float bound) {
    double mean = 0, var = 0, mx = 0;
    for (float e : v) { mean += e; mx = std::max(mx, double(std::fabs(e))); }
    mean /= double(v.size());
    for (float e : v) var += (e - mean) * (e - mean);
    var /= double(v.size());
    EXPECT_LE(mx, bound);
    EXPECT_GT(mx, 0.99 * bound);
    EXPECT_NEAR(mean, 0.0, 5 * bound / std::sqrt(3.0 * double(v.size())));
    EXPECT_NEAR(var, bound * bound / 3, 0.05 * bound * bound / 3);  // U(-b, b) has variance b²/3
  };
  stats(a.weights().w1, 1.0f / 10.0f);   // 1/sqrt(d_model)
  stats(a.weights().w2, 1.0f / 20.0f);   // 1/sqrt(d_ff)
  stats(a.weights().b1, 1.0f / 10.0f);
  for (float g : a.weights().norm_weight) ASSERT_EQ(g, 1.0f);
  for (float bb : a.weights().norm_bias) ASSERT_EQ(bb, 0.0f);
}

TEST(Layer, SaveLoadRoundTripKeepsSettings) {
  Config cfg;
  cfg.d_model = 6;
  cfg.d_ff = 10;
  cfg.activation = Activation::geglu;
  cfg.norm = NormPlacement::pre;
  cfg.norm_type = NormType::rmsnorm;
  cfg.eps = 1e-6f;
  const FeedForward a = make_layer(cfg, 4);
  const std::string p = (temp_dir() / "rt.safetensors").string();
  a.save(p);
  const FeedForward b = FeedForward::load(p);
  EXPECT_EQ(b.config().activation, Activation::geglu);
  EXPECT_EQ(b.config().norm, NormPlacement::pre);
  EXPECT_EQ(b.config().norm_type, NormType::rmsnorm);
  EXPECT_EQ(b.config().eps, 1e-6f);
  EXPECT_EQ(b.weights().wg, a.weights().wg);
  EXPECT_EQ(b.weights().norm_weight, a.weights().norm_weight);
  EXPECT_TRUE(b.weights().norm_bias.empty());
  // Options override the file's settings.
  LoadOptions o;
  o.activation = Activation::swiglu;
  o.norm = NormPlacement::none;
  const FeedForward c = FeedForward::load(p, o);
  EXPECT_EQ(c.config().activation, Activation::swiglu);
  EXPECT_EQ(c.config().norm, NormPlacement::none);
}

TEST(Layer, LoadsBf16AndF16Weights) {
  // A file with BF16 linear1.weight and F16 linear2.weight, d_model 2, d_ff 1, no bias.
  const uint16_t w1[2] = {0x3f80, 0xc000};  // bf16 1, -2
  const uint16_t w2[2] = {0x3800, 0x3c00};  // f16 0.5, 1
  std::string h = R"({"linear1.weight":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},)"
                  R"("linear2.weight":{"dtype":"F16","shape":[2,1],"data_offsets":[4,8]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((h.size() >> (8 * i)) & 0xff);
  bytes += h + std::string(reinterpret_cast<const char*>(w1), 4) + std::string(reinterpret_cast<const char*>(w2), 4);
  const auto p = temp_dir() / "half.safetensors";
  std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  const FeedForward l = FeedForward::load(p.string());
  EXPECT_EQ(l.weights().w1, (std::vector<float>{1, -2}));
  EXPECT_EQ(l.weights().w2, (std::vector<float>{0.5f, 1}));
  EXPECT_FALSE(l.config().bias);
  EXPECT_EQ(l.config().norm, NormPlacement::none);
  // relu(1·3 − 2·1) = 1 → y = [0.5, 1]
  const float x[2] = {3, 1};
  float y[2];
  l.forward(x, y, Shape::tokens(1));
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], 1.0f);
}

namespace {
// Writes a native-format file with some tensors removed or reshaped, then
// expects FeedForward::load to fail with a message containing `needle`.
void expect_load_error(const std::string& name, const std::function<void(SafetensorsFile&)>& edit,
                       const std::string& needle, LoadOptions opts = {}) {
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 6;
  const FeedForward l(cfg, 1);
  const std::string p = (temp_dir() / name).string();
  l.save(p);
  SafetensorsFile f = read_safetensors(p);
  edit(f);
  write_safetensors(p, f);
  try {
    FeedForward::load(p, opts);
    ADD_FAILURE() << name << ": loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << name << ": " << e.what();
  }
}
}  // namespace

TEST(Layer, InconsistentWeightsAreRefused) {
  expect_load_error("no_w1.st", [](auto& f) { f.tensors.erase("linear1.weight"); }, "'linear1.weight' (or 'mlp.up_proj.weight') not found");
  expect_load_error("no_w2.st", [](auto& f) { f.tensors.erase("linear2.weight"); }, "'linear2.weight' not found");
  expect_load_error("w2_shape.st", [](auto& f) { f.tensors["linear2.weight"].shape = {6, 4}; },
                    "linear2.weight has shape [6, 4], expected [4, 6]");
  expect_load_error("w1_rank.st", [](auto& f) { f.tensors["linear1.weight"].shape = {24}; },
                    "expected [d_ff, d_model]");
  expect_load_error("b2_shape.st", [](auto& f) { f.tensors["linear2.bias"] = {{3}, {1, 2, 3}}; },
                    "linear2.bias has shape [3], expected [4]");
  expect_load_error("half_bias.st", [](auto& f) { f.tensors.erase("linear2.bias"); }, "all present or all absent");
  expect_load_error("no_norm.st", [](auto& f) { f.tensors.erase("norm.weight"); }, "'norm.weight' not found");
  expect_load_error("no_beta.st", [](auto& f) { f.tensors.erase("norm.bias"); }, "'norm.bias' not found",
                    LoadOptions{.norm_type = NormType::layernorm});
  expect_load_error("gated_no_gate.st", [](auto&) {}, "swiglu is gated but tensor 'gate.weight' was not found",
                    LoadOptions{.activation = Activation::swiglu});
  expect_load_error("bad_meta.st", [](auto& f) { f.metadata["ffn.activation"] = "tanh"; }, "unknown value 'tanh'");
  expect_load_error("bad_eps.st", [](auto& f) { f.metadata["ffn.eps"] = "abc"; }, "ffn.eps");
  expect_load_error("prefix.st",
                    [](auto& f) {
                      auto t = f.tensors;
                      f.tensors.clear();
                      for (auto& [k, v] : t) f.tensors["layers.3." + k] = v;
                    },
                    "under --prefix 'layers.3.'");
}

TEST(Layer, BadShapesAndOptionsAreRefused) {
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 6;
  const FeedForward l(cfg, 1);
  std::vector<float> x(40), y(40);
  EXPECT_THROW(l.forward(x.data(), y.data(), Shape{2, 5, Layout::tokens, {5}}), Error);      // wrong count
  EXPECT_THROW(l.forward(x.data(), y.data(), Shape{2, 5, Layout::tokens, {5, 6}}), Error);   // longer than S
  EXPECT_THROW(l.forward(x.data(), y.data(), Shape{2, 5, Layout::tokens, {-1, 2}}), Error);  // negative
  EXPECT_THROW(l.forward(x.data(), y.data(), Shape{-1, 5, Layout::tokens, {}}), Error);
  RunOptions bad;
  bad.threads = -1;
  EXPECT_THROW(l.forward(x.data(), y.data(), Shape::tokens(10), bad), Error);
  bad.threads = kMaxThreads + 1;
  EXPECT_THROW(l.forward(x.data(), y.data(), Shape::tokens(10), bad), Error);
  Config c2 = cfg;
  c2.d_model = 0;
  EXPECT_THROW(FeedForward(c2, 1), Error);
  c2 = cfg;
  c2.dropout_hidden = 1.5f;
  EXPECT_THROW(FeedForward(c2, 1), Error);
  Weights w = l.weights();
  w.w1.pop_back();
  EXPECT_THROW(FeedForward(cfg, w), Error);
  // backward with a cache from another shape
  ForwardCache cache;
  l.forward(x.data(), y.data(), Shape::tokens(10), {}, &cache);
  Weights g;
  EXPECT_THROW(l.backward(x.data(), y.data(), Shape::tokens(9), cache, y.data(), g), Error);
  // ... or from a layer with other settings (here: gated, so the cache has no zg).
  Config gated_cfg = cfg;
  gated_cfg.activation = Activation::swiglu;
  const FeedForward gl(gated_cfg, 1);
  EXPECT_THROW(gl.backward(x.data(), y.data(), Shape::tokens(10), cache, y.data(), g), Error);
  // ... or another layout with the same number of positions.
  EXPECT_THROW(l.backward(x.data(), y.data(), Shape{1, 10, Layout::ncw, {}}, cache, y.data(), g), Error);
  ForwardCache empty;
  EXPECT_THROW(l.backward(x.data(), y.data(), Shape::tokens(10), empty, y.data(), g), Error);
  EXPECT_THROW(parse_activation("tanh", "--activation"), Error);
}

namespace {
// A safetensors file from a header and raw data.
void write_st(const std::string& path, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  bytes += header + data;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}
}  // namespace

TEST(Layer, UnconvertibleDtypeElsewhereInTheFileIsIgnored) {
  Config cfg;
  cfg.d_model = 2;
  cfg.d_ff = 3;
  cfg.norm = NormPlacement::none;
  cfg.bias = false;
  const FeedForward l(cfg, 2);
  const std::string p = (temp_dir() / "other_dtype.safetensors").string();
  // Another tensor of the checkpoint has a dtype (known to the format) this
  // reader does not convert. (An unknown dtype makes the file invalid, as for
  // the official reader: tests/python/test_formats.py.)
  write_st(p,
           R"({"other.weight":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]},)"
           R"("linear1.weight":{"dtype":"F32","shape":[3,2],"data_offsets":[4,28]},)"
           R"("linear2.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[28,52]}})",
           std::string(4, '\x7f') + std::string(reinterpret_cast<const char*>(l.weights().w1.data()), 24) +
               std::string(reinterpret_cast<const char*>(l.weights().w2.data()), 24));
  EXPECT_EQ(FeedForward::load(p).weights().w1, l.weights().w1);
  // ...but it is refused where it is a tensor the layer needs.
  write_st(p, R"({"linear1.weight":{"dtype":"F8_E4M3","shape":[3,2],"data_offsets":[0,6]}})", std::string(6, '\0'));
  try {
    FeedForward::load(p);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has dtype F8_E4M3, expected F32"), std::string::npos) << e.what();
  }
}

TEST(Layer, ZeroTokensIsANoOp) {
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 6;
  const FeedForward l(cfg, 1);
  ForwardCache cache;
  l.forward(nullptr, nullptr, Shape::tokens(0), {}, &cache);
  Weights g;
  l.backward(nullptr, nullptr, Shape::tokens(0), cache, nullptr, g);
  for (float v : g.w1) EXPECT_EQ(v, 0.0f);
}

// RunOptions::interrupted (issue 31, item 3: Ctrl-C in Python). With a hook
// the forward runs its rows in pieces (about 2^29 flops per thread each) and
// backward its row blocks and weight gradients in pieces (2^31): the sizes
// below give several of each at one thread. The pieces must not change a
// bit (they rest on TokenResultIndependentOfTheBatch, tested per ISA), a
// stop must come at the next safe point as Interrupted, leave the cache
// unusable, and leave the layer as it was.
TEST(Interrupt, PiecesGiveTheSameBitsAndAStopLeavesTheLayerUsable) {
  struct Case {
    Activation act;
    NormPlacement norm;
    std::vector<int64_t> lengths;  // padding: the pieces are of the gathered valid rows
  };
  const Case cases[] = {{Activation::gelu, NormPlacement::post, {}},
                        {Activation::swiglu, NormPlacement::pre, {900, 700, 800}}};
  for (const Case& k : cases) {
    Config cfg;
    cfg.d_model = 256;
    cfg.d_ff = 2048;
    cfg.activation = k.act;
    cfg.norm = k.norm;
    cfg.dropout_hidden = 0.1f;
    cfg.dropout_output = 0.1f;
    const FeedForward layer = make_layer(cfg, 21);
    const Shape shape = k.lengths.empty() ? Shape::tokens(2500) : Shape{3, 900, Layout::tokens, k.lengths};
    const size_t size = size_t(shape.positions() * cfg.d_model);
    const auto x = randn(size, 22), dy = randn(size, 23);
    RunOptions ro;
    ro.threads = 1;
    ro.training = true;
    ro.seed = 9;
    const std::string where = std::string(to_string(k.act)) + " " + std::string(to_string(k.norm));

    // Without a hook: one piece.
    std::vector<float> y(size), dx(size);
    ForwardCache cache;
    Weights g;
    layer.forward(x.data(), y.data(), shape, ro, &cache);
    layer.backward(x.data(), dy.data(), shape, cache, dx.data(), g, ro);

    // A hook that never stops: asked more than once (pieces), the same bits.
    int asked = 0;
    RunOptions hooked = ro;
    hooked.interrupted = [&] { return ++asked < 0; };
    std::vector<float> y2(size), dx2(size);
    ForwardCache cache2;
    Weights g2;
    layer.forward(x.data(), y2.data(), shape, hooked, &cache2);
    EXPECT_GE(asked, 3) << where << ": the forward's rows in pieces";
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), size * 4), 0) << where;
    const auto& a = detail::CacheAccess::data(cache);
    const auto& b = detail::CacheAccess::data(cache2);
    EXPECT_TRUE(a.z1 == b.z1 && a.zg == b.zg && a.mean == b.mean && a.rstd == b.rstd && a.xhat == b.xhat) << where;
    asked = 0;
    layer.backward(x.data(), dy.data(), shape, cache2, dx2.data(), g2, hooked);
    EXPECT_GE(asked, 8) << where << ": backward's stages, row blocks and weight gradients in pieces";
    EXPECT_EQ(std::memcmp(dx.data(), dx2.data(), size * 4), 0) << where;
    for (size_t t = 0; t < 8; ++t) EXPECT_TRUE(*g.all()[t] == *g2.all()[t]) << where << " gradient " << t;

    // A stop at the second question: Interrupted at once, the cache refused
    // by backward, and the next calls give the same bits.
    asked = 0;
    hooked.interrupted = [&] { return ++asked == 2; };
    ForwardCache stopped;
    EXPECT_THROW(layer.forward(x.data(), y2.data(), shape, hooked, &stopped), Interrupted) << where;
    EXPECT_EQ(asked, 2) << where;
    EXPECT_THROW(layer.backward(x.data(), dy.data(), shape, stopped, dx2.data(), g2, ro), Error) << where;
    asked = 0;
    EXPECT_THROW(layer.backward(x.data(), dy.data(), shape, cache2, dx2.data(), g2, hooked), Interrupted) << where;
    EXPECT_EQ(asked, 2) << where;
    layer.forward(x.data(), y2.data(), shape, ro, &cache2);
    layer.backward(x.data(), dy.data(), shape, cache2, dx2.data(), g2, ro);
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), size * 4), 0) << where;
    EXPECT_EQ(std::memcmp(dx.data(), dx2.data(), size * 4), 0) << where;
    for (size_t t = 0; t < 8; ++t) EXPECT_TRUE(*g.all()[t] == *g2.all()[t]) << where << " gradient " << t;
  }
}
