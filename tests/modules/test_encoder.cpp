// The encoder layer and multi-head attention against PyTorch
// (tests/data/encoder_golden.safetensors, scripts/make_encoder_golden.py),
// the tiled attention against the reference, finite differences of the
// attention backward, and invariance over threads and batch composition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "ffn/diagnostics.hpp"
#include "ffn/encoder.hpp"
#include "ops/attention.hpp"
#include "backends/cpu/activation_simd.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "core/philox.hpp"
#include "reference/attention_reference.hpp"
#include "encoder_golden.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace ffn {
namespace {

using test::randn;

const SafetensorsFile& golden() { return test::encoder_golden(); }
using Case = test::EncoderCase;
std::vector<Case> cases(const std::string& kind) { return test::encoder_cases(kind); }

// Values at the valid positions only (padding is NaN in the golden inputs
// and must be zero in our outputs).
std::vector<float> valid(const std::vector<float>& v, const Shape& s, int64_t d) {
  std::vector<float> out;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = s.lengths.empty() ? s.seq : s.lengths[size_t(b)];
    for (int64_t i = 0; i < len; ++i)
      out.insert(out.end(), v.begin() + (b * s.seq + i) * d, v.begin() + (b * s.seq + i + 1) * d);
  }
  return out;
}

void expect_padding_zero(const std::vector<float>& v, const Shape& s, int64_t d, const std::string& what) {
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = s.lengths.empty() ? s.seq : s.lengths[size_t(b)];
    for (int64_t i = len; i < s.seq; ++i)
      for (int64_t j = 0; j < d; ++j) ASSERT_EQ(v[size_t((b * s.seq + i) * d + j)], 0.0f) << what;
  }
}

std::vector<int64_t> offsets(const Shape& s) {
  std::vector<int64_t> off{0};
  for (int64_t b = 0; b < s.batch; ++b) off.push_back(off.back() + (s.lengths.empty() ? s.seq : s.lengths[size_t(b)]));
  return off;
}

double worst_seen = 0;  // printed: the measured error behind the tolerances

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Comparison c = compare(got.data(), want.data(), got.size());
  worst_seen = std::max(worst_seen, c.max_error);
  EXPECT_TRUE(c.ok(tol)) << what << ": " << c.describe();
}

// ---- nn.MultiheadAttention: projections in double here, the core ours ----

void mha_case(const Case& c, Path path) {
  const int64_t d = c.meta["d_model"], H = c.meta["heads"];
  const Shape s = c.shape();
  const std::vector<float> x = valid(c.t("x").data, s, d), dy = valid(c.t("dy").data, s, d);
  const int64_t n = int64_t(x.size()) / d;
  const auto& W = c.t("in_proj_weight").data;
  const auto& bW = c.t("in_proj_bias").data;
  const auto& O = c.t("out_proj.weight").data;
  const auto& bO = c.t("out_proj.bias").data;
  reference::AttentionShape a;
  a.d = d;
  a.heads = H;
  a.S = s.seq;
  a.off = offsets(s);
  a.causal = c.meta["causal"];
  std::vector<float> qkv(size_t(n * 3 * d)), ctx(size_t(n * d)), lse(size_t(n * H)), y(size_t(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < 3 * d; ++j) {
      double acc = bW[size_t(j)];
      for (int64_t p = 0; p < d; ++p) acc += double(x[size_t(i * d + p)]) * W[size_t(j * d + p)];
      qkv[size_t(i * 3 * d + j)] = float(acc);
    }
  if (path == Path::reference) reference::attention_forward(a, qkv.data(), ctx.data(), lse.data());
  else nn::attention_forward(nn::Context(Isa::automatic, 2), a, qkv.data(), ctx.data(), lse.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      double acc = bO[size_t(j)];
      for (int64_t p = 0; p < d; ++p) acc += double(ctx[size_t(i * d + p)]) * O[size_t(j * d + p)];
      y[size_t(i * d + j)] = float(acc);
    }
  expect_close(y, valid(c.t("y").data, s, d), test::kVsTorchY, c.prefix + " y");
  // Backward: dctx = dy O, the core, then dx = dqkv W and dW = dqkvᵀ x.
  std::vector<float> dctx(size_t(n * d)), dqkv(size_t(n * 3 * d)), dx(size_t(n * d)), dW(size_t(3 * d * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < d; ++p) {
      double acc = 0;
      for (int64_t j = 0; j < d; ++j) acc += double(dy[size_t(i * d + j)]) * O[size_t(j * d + p)];
      dctx[size_t(i * d + p)] = float(acc);
    }
  if (path == Path::reference) reference::attention_backward(a, qkv.data(), dctx.data(), dqkv.data());
  else nn::attention_backward(nn::Context(Isa::automatic, 2), a, qkv.data(), ctx.data(), lse.data(), dctx.data(), dqkv.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < d; ++p) {
      double acc = 0;
      for (int64_t j = 0; j < 3 * d; ++j) acc += double(dqkv[size_t(i * 3 * d + j)]) * W[size_t(j * d + p)];
      dx[size_t(i * d + p)] = float(acc);
    }
  for (int64_t j = 0; j < 3 * d; ++j)
    for (int64_t p = 0; p < d; ++p) {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += double(dqkv[size_t(i * 3 * d + j)]) * x[size_t(i * d + p)];
      dW[size_t(j * d + p)] = float(acc);
    }
  expect_close(dx, valid(c.t("grad_input").data, s, d), test::kVsTorchDx, c.prefix + " dx");
  expect_close(dW, c.t("grad.in_proj_weight").data, test::kVsTorchDw, c.prefix + " d in_proj_weight");
}

TEST(Attention, MatchesTorchMultiheadAttention) {
  const auto cs = cases("mha");
  ASSERT_GE(cs.size(), 5u);
  for (const Case& c : cs) {
    SCOPED_TRACE(c.prefix + c.meta.dump());
    mha_case(c, Path::reference);
    mha_case(c, Path::automatic);
  }
  std::printf("[ measured ] attention vs PyTorch: worst scaled error %.2e (tolerance 1e-5)\n", worst_seen);
}

// ---- nn.TransformerEncoder -------------------------------------------------

Encoder load_case(const Case& c) {
  EncoderLoadOptions o;
  o.prefix = c.prefix;
  o.heads = c.meta["heads"].get<int64_t>();
  o.activation = parse_activation(c.meta["activation"].get<std::string>());
  o.norm = c.meta["norm_first"].get<bool>() ? NormPlacement::pre : NormPlacement::post;
  o.eps = c.meta["eps"].get<float>();
  return Encoder::load(FFN_ENCODER_GOLDEN, o);
}

TEST(Encoder, MatchesTorchTransformerEncoder) {
  const auto cs = cases("encoder");
  ASSERT_GE(cs.size(), 7u);
  const auto dir = test::scratch_dir("encoder");
  worst_seen = 0;
  for (const Case& c : cs) {
    SCOPED_TRACE(c.prefix + c.meta.dump());
    const Encoder e = load_case(c);
    EXPECT_EQ(e.config().layers, c.meta["layers"].get<int64_t>());
    EXPECT_EQ(e.config().final_norm, c.meta["final_norm"].get<bool>());
    const Shape s = c.shape();
    const int64_t d = e.config().d_model;
    for (Path path : {Path::reference, Path::automatic}) {
      EncoderRunOptions ro;
      ro.path = path;
      ro.causal = c.meta["causal"];
      ro.threads = 2;
      std::vector<float> y(c.t("x").data.size(), -1.0f), dx(y.size(), -1.0f);
      EncoderCache cache;
      e.forward(c.t("x").data.data(), y.data(), s, ro, &cache);
      expect_padding_zero(y, s, d, "y");
      expect_close(valid(y, s, d), valid(c.t("y").data, s, d), test::kVsTorchY, c.prefix + " y");
      EncoderWeights g;
      e.backward(c.t("x").data.data(), c.t("dy").data.data(), s, cache, dx.data(), g, ro);
      expect_padding_zero(dx, s, d, "dx");
      expect_close(valid(dx, s, d), valid(c.t("grad_input").data, s, d), test::kVsTorchDx, c.prefix + " dx");
      const std::string gp = (dir / "g.safetensors").string();
      e.save_gradients(gp, g);
      const SafetensorsFile gf = read_safetensors(gp);
      size_t checked = 0;
      for (const auto& [name, t] : gf.tensors) {
        ASSERT_EQ(name.rfind(c.prefix, 0), 0u) << name;
        const std::string want = c.prefix + "grad." + name.substr(c.prefix.size());
        ASSERT_TRUE(golden().tensors.count(want)) << want;
        expect_close(t.data, golden().tensors.at(want).data, test::kVsTorchDw, name);
        ++checked;
      }
      size_t params = 0;
      for (const auto& [name, t] : golden().tensors)
        if (name.rfind(c.prefix + "grad.", 0) == 0) ++params;
      EXPECT_EQ(checked, params) << "every parameter's gradient is compared";
    }
  }
  std::printf("[ measured ] encoder vs PyTorch: worst scaled error %.2e (tolerance 1e-5)\n", worst_seen);
}

// ---- the tiled attention against the reference ----------------------------

double worst_forward = 0, worst_backward = 0;

struct AttnData {
  reference::AttentionShape a;
  std::vector<float> qkv, dctx;
};

AttnData attn_data(int64_t d, int64_t H, std::vector<int64_t> lengths, bool causal, float dropout, uint64_t seed) {
  AttnData t;
  t.a.d = d;
  t.a.heads = H;
  t.a.off = {0};
  for (int64_t l : lengths) {
    t.a.off.push_back(t.a.off.back() + l);
    t.a.S = std::max(t.a.S, l);
  }
  t.a.causal = causal;
  t.a.dropout = dropout;
  t.a.training = dropout > 0;
  t.a.seed = seed;
  const int64_t n = t.a.rows();
  t.qkv = randn(size_t(n * 3 * d), seed, 1.5f);  // scores of a few units: a peaked softmax
  t.dctx = randn(size_t(n * d), seed + 1);
  return t;
}

void expect_tiled_matches_reference(const AttnData& t, bool backward, const std::string& what) {
  const int64_t n = t.a.rows(), d = t.a.d, H = t.a.heads;
  worst_seen = 0;
  std::vector<float> ref(size_t(n * d)), got(size_t(n * d)), lse_r(size_t(n * H)), lse(size_t(n * H));
  reference::attention_forward(t.a, t.qkv.data(), ref.data(), lse_r.data());
  nn::attention_forward(nn::Context(Isa::automatic, 2), t.a, t.qkv.data(), got.data(), lse.data());
  expect_close(got, ref, test::kAttentionForwardVsReference, what + " ctx");
  expect_close(lse, lse_r, test::kAttentionForwardVsReference, what + " lse");
  worst_forward = std::max(worst_forward, worst_seen);
  if (!backward) return;
  std::vector<float> dref(size_t(n * 3 * d)), dgot(size_t(n * 3 * d), NAN);
  reference::attention_backward(t.a, t.qkv.data(), t.dctx.data(), dref.data());
  nn::attention_backward(nn::Context(Isa::automatic, 2), t.a, t.qkv.data(), got.data(), lse.data(), t.dctx.data(), dgot.data());
  worst_seen = 0;
  expect_close(dgot, dref, test::kAttentionBackwardVsReference, what + " dqkv");
  worst_backward = std::max(worst_backward, worst_seen);
}

TEST(Attention, TiledMatchesReferenceAtEveryTileEdge) {
  worst_seen = 0;
  // Query tiles of 96 and key tiles of 256 (src/ops/attention.cpp), 16-key
  // panels: lengths around each.
  for (int64_t len : {1, 2, 15, 16, 17, 95, 96, 97, 191, 192, 193, 255, 256, 257, 300, 513}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE("len " + std::to_string(len) + (causal ? " causal" : ""));
      expect_tiled_matches_reference(attn_data(24, 3, {len, 5, 1}, causal, 0.0f, uint64_t(len)), true, "tiles");
    }
  }
  // Head dims that are not a multiple of the 16-column panel: 1, 7, 20, 33.
  for (auto [d, H] : {std::pair<int64_t, int64_t>{4, 4}, {14, 2}, {40, 2}, {33, 1}})
    expect_tiled_matches_reference(attn_data(d, H, {70, 3}, true, 0.0f, 7), true, "head dim " + std::to_string(d / H));
  // Dropout on the probabilities: the same masks on both paths.
  expect_tiled_matches_reference(attn_data(16, 2, {150, 9, 1}, false, 0.2f, 11), true, "dropout");
  expect_tiled_matches_reference(attn_data(16, 2, {150, 9, 1}, true, 0.5f, 12), true, "dropout causal");
  std::printf("[ measured ] tiled attention vs reference: worst scaled error forward %.2e (tolerance %.0e), "
              "backward %.2e (tolerance %.0e)\n",
              worst_forward, test::kAttentionForwardVsReference, worst_backward, test::kAttentionBackwardVsReference);
}

TEST(Attention, TiledMatchesReferenceOnLongSequences) {
  expect_tiled_matches_reference(attn_data(16, 2, {4096}, false, 0.0f, 21), false, "S 4096");
  expect_tiled_matches_reference(attn_data(16, 2, {4096}, true, 0.0f, 22), false, "S 4096 causal");
  expect_tiled_matches_reference(attn_data(16, 2, {1500}, true, 0.1f, 23), true, "S 1500 causal dropout backward");
  std::printf("[ measured ] tiled attention vs reference, long sequences so far: forward %.2e, backward %.2e\n",
              worst_forward, worst_backward);
}

// ---- the per-ISA softmax rows ------------------------------------------------

TEST(Attention, SoftmaxRowsOfEveryIsaMatchThePortableForm) {
  // The exponentials are the same operations as simd::exp_approx (bit for
  // bit); the sums differ only in their order (a few ulps) on AVX-512 and are
  // the portable form's bits on AVX2 (its 16 partial sums in the same order).
  std::vector<float> row = randn(301, 41, 6.0f);
  row[7] = -200.0f;  // underflows to 0
  row[8] = 150.0f;   // the maximum
  for (Isa isa : all_isas()) {
    if (!isa_supported(isa)) {
      std::printf("[ skipped  ] softmax rows on %s: not supported by this CPU\n", std::string(to_string(isa)).c_str());
      continue;
    }
    const nn::KernelConfig& kc = nn::kernel_config(isa);
    for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 301}) {
      std::vector<float> p(static_cast<size_t>(n)), s(row.begin(), row.begin() + n);
      const float sum = kc.exp_rows(row.data(), n, 0.5f, 3.0f, p.data());
      double want_sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(p[size_t(j)], nn::simd::exp_approx(row[size_t(j)] * 0.5f - 3.0f)) << to_string(isa) << " " << j;
        want_sum += p[size_t(j)];
      }
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
      std::vector<float> p_portable(static_cast<size_t>(n));
      const float sum_portable = nn::simd::exp_rows(row.data(), n, 0.5f, 3.0f, p_portable.data());
      if (isa == Isa::scalar || isa == Isa::avx2) {
        EXPECT_EQ(sum, sum_portable) << to_string(isa) << " n=" << n;
      }
      float m = 1.0f, l = 2.0f, m_portable = 1.0f, l_portable = 2.0f;
      std::vector<float> s_portable = s;
      nn::simd::softmax_step(s_portable.data(), n, 0.5f, &m_portable, &l_portable);
      const float alpha = kc.softmax_step(s.data(), n, 0.5f, &m, &l);
      if (isa == Isa::scalar || isa == Isa::avx2) {
        EXPECT_EQ(l, l_portable) << to_string(isa) << " n=" << n;
      }
      float mx = 1.0f;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[size_t(j)] * 0.5f);
      EXPECT_EQ(m, mx);
      EXPECT_EQ(alpha, nn::simd::exp_approx(1.0f - mx));
      double sl = 2.0 * alpha;
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(s[size_t(j)], nn::simd::exp_approx(row[size_t(j)] * 0.5f - mx));
        sl += s[size_t(j)];
      }
      EXPECT_NEAR(l, sl, 1e-6 * sl);
    }
    float m = -INFINITY, l = 0.0f;
    std::vector<float> s{1.0f, 2.0f};
    EXPECT_EQ(kc.softmax_step(s.data(), 2, 1.0f, &m, &l), 0.0f) << "nothing accumulated yet: alpha 0";
  }
}

// ---- finite differences of the attention backward (double) ----------------

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    AttnData t = attn_data(6, 2, {5, 1, 3}, causal, 0.3f, 31);
    const int64_t n = t.a.rows(), d = t.a.d;
    std::vector<double> qkv(t.qkv.begin(), t.qkv.end()), dctx(t.dctx.begin(), t.dctx.end());
    std::vector<double> grad(qkv.size()), ctx(size_t(n * d));
    reference::attention_backward(t.a, qkv.data(), dctx.data(), grad.data());
    auto loss = [&](const std::vector<double>& v) {
      reference::attention_forward(t.a, v.data(), ctx.data());
      double l = 0;
      for (size_t i = 0; i < ctx.size(); ++i) l += ctx[i] * dctx[i];
      return l;
    };
    std::vector<double> fd(qkv.size());
    const double h = 1e-6;
    for (size_t e = 0; e < qkv.size(); ++e) {
      std::vector<double> p = qkv, m = qkv;
      p[e] += h;
      m[e] -= h;
      fd[e] = (loss(p) - loss(m)) / (2 * h);
    }
    const Comparison c = compare(grad.data(), fd.data(), fd.size());
    EXPECT_TRUE(c.ok(test::kFiniteDifference)) << (causal ? "causal " : "") << c.describe();
  }
}

// ---- invariance -------------------------------------------------------------

EncoderConfig small_config() {
  EncoderConfig cfg;
  cfg.d_model = 40;
  cfg.heads = 4;
  cfg.d_ff = 72;
  cfg.layers = 2;
  cfg.activation = Activation::gelu;
  cfg.final_norm = true;
  return cfg;
}

// One forward + backward step: y, dx and the gradients.
struct Step {
  std::vector<float> y, dx;
  EncoderWeights g;
};
Step step(const Encoder& e, const std::vector<float>& x, const std::vector<float>& dy, const Shape& s,
          const EncoderRunOptions& o) {
  Step r{std::vector<float>(x.size()), std::vector<float>(x.size()), {}};
  EncoderCache c;
  e.forward(x.data(), r.y.data(), s, o, &c);
  e.backward(x.data(), dy.data(), s, c, r.dx.data(), r.g, o);
  return r;
}

TEST(Encoder, BitwiseSameForAnyThreadCount) {
  for (NormPlacement norm : {NormPlacement::post, NormPlacement::pre}) {
    EncoderConfig cfg = small_config();
    cfg.norm = norm;
    cfg.dropout = 0.1f;
    const Encoder e(cfg, 5);
    Shape s{3, 150, Layout::tokens, {150, 1, 77}};
    const auto x = randn(size_t(s.positions() * cfg.d_model), 1), dy = randn(x.size(), 2);
    std::vector<Step> r;
    for (int threads : {1, 2, 3}) {
      EncoderRunOptions o;
      o.threads = threads;
      o.training = true;
      o.seed = 99;
      o.causal = true;
      r.push_back(step(e, x, dy, s, o));
    }
    for (size_t i = 1; i < r.size(); ++i) {
      EXPECT_EQ(r[i].y, r[0].y);
      EXPECT_EQ(r[i].dx, r[0].dx);
      EXPECT_EQ(r[i].g.layers[0].in_proj_weight, r[0].g.layers[0].in_proj_weight);
      EXPECT_EQ(r[i].g.layers[1].ffn.w1, r[0].g.layers[1].ffn.w1);
      EXPECT_EQ(r[i].g.norm_weight, r[0].g.norm_weight);
    }
  }
}

// RunOptions::interrupted (issue 31, item 3: Ctrl-C in Python): asked before
// each sublayer and inside the FFN sublayers. A hook that never stops changes
// no bit; a stop at each of the questions in turn throws Interrupted there,
// leaves the forward's cache refused by backward, and the next calls give
// the same bits.
TEST(Encoder, InterruptedAtEverySafePointAndUsableAfter) {
  EncoderConfig cfg = small_config();
  cfg.dropout = 0.1f;
  const Encoder e(cfg, 8);
  const Shape s{2, 60, Layout::tokens, {60, 31}};
  const auto x = randn(size_t(s.positions() * cfg.d_model), 4), dy = randn(x.size(), 5);
  EncoderRunOptions o;
  o.training = true;
  o.seed = 3;
  const Step want = step(e, x, dy, s, o);

  int asked = 0, stop_at = 0;
  EncoderRunOptions hooked = o;
  hooked.interrupted = [&] { return ++asked == stop_at; };
  const Step got = step(e, x, dy, s, hooked);
  const int questions = asked;  // forward's and backward's
  EXPECT_GE(questions, 4 * int(cfg.layers));
  EXPECT_EQ(got.y, want.y);
  EXPECT_EQ(got.dx, want.dx);
  EXPECT_EQ(got.g.layers[1].in_proj_weight, want.g.layers[1].in_proj_weight);
  EXPECT_EQ(got.g.layers[0].ffn.w1, want.g.layers[0].ffn.w1);

  for (stop_at = 1; stop_at <= questions; ++stop_at) {
    asked = 0;
    std::vector<float> y(x.size()), dx(x.size());
    EncoderWeights g;
    EncoderCache c;
    bool stopped_in_forward = false;
    try {
      e.forward(x.data(), y.data(), s, hooked, &c);
    } catch (const Interrupted&) {
      stopped_in_forward = true;
    }
    if (stopped_in_forward) {
      EXPECT_EQ(asked, stop_at);
      EXPECT_THROW(e.backward(x.data(), dy.data(), s, c, dx.data(), g, o), Error) << "stop " << stop_at;
      e.forward(x.data(), y.data(), s, o, &c);  // again, without a stop
    } else {
      EXPECT_THROW(e.backward(x.data(), dy.data(), s, c, dx.data(), g, hooked), Interrupted) << "stop " << stop_at;
      EXPECT_EQ(asked, stop_at);
    }
    e.backward(x.data(), dy.data(), s, c, dx.data(), g, o);
    EXPECT_EQ(y, want.y) << "stop " << stop_at;
    EXPECT_EQ(dx, want.dx) << "stop " << stop_at;
    EXPECT_EQ(g.layers[0].in_proj_weight, want.g.layers[0].in_proj_weight) << "stop " << stop_at;
    EXPECT_EQ(g.norm_weight, want.g.norm_weight) << "stop " << stop_at;
  }
}

// In inference a hook makes the forward run a large batch's sequences in
// groups (of about 2^31 flops per thread: 1000 sequences of up to 60 tokens
// here are two groups at one thread): the same bits, asked in each group.
TEST(Encoder, InferenceInGroupsOfSequencesGivesTheSameBits) {
  const EncoderConfig cfg = small_config();
  const Encoder e(cfg, 9);
  Shape s{1000, 60, Layout::tokens, {}};
  for (int64_t b = 0; b < s.batch; ++b) s.lengths.push_back(1 + (b * 37) % 60);
  const auto x = randn(size_t(s.positions() * cfg.d_model), 6);
  EncoderRunOptions o;
  o.threads = 1;
  std::vector<float> want(x.size()), got(x.size());
  e.forward(x.data(), want.data(), s, o);
  int asked = 0;
  o.interrupted = [&] { return ++asked < 0; };
  e.forward(x.data(), got.data(), s, o);
  const int questions = asked;  // one batch: 3 per layer (2 sublayers, the FFN's one piece)
  EXPECT_EQ(questions, 2 * 3 * int(cfg.layers)) << "two groups, each asked before each sublayer";
  EXPECT_EQ(got, want);
  asked = 0;
  o.interrupted = [&] { return ++asked == questions / 2 + 1; };  // the second group's first question
  EXPECT_THROW(e.forward(x.data(), got.data(), s, o), Interrupted);
  EXPECT_EQ(asked, questions / 2 + 1);
}

TEST(Encoder, ASequenceGivesTheSameBitsAloneOrInABatch) {
  const EncoderConfig cfg = small_config();
  const Encoder e(cfg, 6);
  const int64_t d = cfg.d_model, S = 90;
  Shape batch{3, S, Layout::tokens, {40, 90, 3}};
  const auto x = randn(size_t(batch.positions() * d), 3);
  std::vector<float> y(x.size());
  e.forward(x.data(), y.data(), batch);
  // Sequence 1 alone (its full length), and sequence 0 alone padded to another S.
  Shape one{1, S, Layout::tokens, {}};
  std::vector<float> y1(size_t(S * d));
  e.forward(x.data() + S * d, y1.data(), one);
  EXPECT_TRUE(std::equal(y1.begin(), y1.end(), y.begin() + S * d));
  Shape zero{1, 40, Layout::tokens, {}};
  std::vector<float> y0(size_t(40 * d));
  e.forward(x.data(), y0.data(), zero);
  EXPECT_TRUE(std::equal(y0.begin(), y0.end(), y.begin()));
}

// The bf16 compute mode (inference): every projection's operands rounded to
// bf16 (Linear::Run::bf16, the FFN's compute bf16); attention's own products
// in fp32. Against its reference path (the same rounded operands, double
// sums): kBf16EncoderVsReference (a value near a bf16 boundary may round one
// step the other way; the next layer carries it on).
// Against fp32 compute: 2e-2 scaled
// (bf16 operands, 2^-8 relative each, through two layers: measured worst
// printed below). With the FFNs' weights zero the attention projections
// alone must still move the output (their rounding is wired). Each
// sequence's bits are its own, on 1 or 2 threads; training and a cache are
// refused.
TEST(Encoder, Bf16ComputeMatchesItsReferenceAndKeepsEachSequencesBits) {
  for (NormPlacement norm : {NormPlacement::post, NormPlacement::pre}) {
    EncoderConfig cfg = small_config();
    cfg.norm = norm;
    const Encoder e(cfg, 7);
    const int64_t d = cfg.d_model;
    Shape s{3, 70, Layout::tokens, {70, 33, 5}};
    const auto x = randn(size_t(s.positions() * d), 6);
    std::vector<float> y32(x.size()), yb(x.size()), yb1(x.size()), yref(x.size());
    EncoderRunOptions o;
    e.forward(x.data(), y32.data(), s, o);
    o.compute = Compute::bf16;
    o.threads = 2;
    e.forward(x.data(), yb.data(), s, o);
    o.threads = 1;
    e.forward(x.data(), yb1.data(), s, o);
    EXPECT_EQ(yb, yb1) << "1 thread against 2";
    o.path = Path::reference;
    e.forward(x.data(), yref.data(), s, o);
    const Comparison cr = compare(yb.data(), yref.data(), yb.size());
    std::printf("  %s-LN: bf16 compute against its reference: worst scaled error %.2e (tolerance %.0e)\n",
                norm == NormPlacement::pre ? "pre" : "post", cr.max_error, test::kBf16EncoderVsReference);
    EXPECT_TRUE(cr.ok(test::kBf16EncoderVsReference)) << cr.describe();
    const Comparison c32 = compare(yb.data(), y32.data(), yb.size());
    std::printf("  %s-LN: bf16 compute against fp32: worst scaled error %.2e\n", norm == NormPlacement::pre ? "pre" : "post",
                c32.max_error);
    EXPECT_TRUE(c32.ok(2e-2)) << c32.describe();
    EXPECT_NE(yb, y32) << "bf16 compute rounded nothing";
    o.path = Path::automatic;
    Shape one{1, 33, Layout::tokens, {}};
    std::vector<float> y1(size_t(33 * d));
    e.forward(x.data() + 70 * d, y1.data(), one, o);
    EXPECT_TRUE(std::equal(y1.begin(), y1.end(), yb.begin() + 70 * d)) << "sequence 1 alone";
    // The attention projections alone: with the FFNs' weights zero (their
    // sublayers add nothing), bf16 compute still moves the output.
    EncoderWeights w0 = e.weights();
    for (auto& l : w0.layers)
      for (auto* v : {&l.ffn.w1, &l.ffn.b1, &l.ffn.w2, &l.ffn.b2}) std::fill(v->begin(), v->end(), 0.0f);
    const Encoder e0(cfg, w0);
    std::vector<float> z32(x.size()), zb(x.size());
    EncoderRunOptions o0;
    e0.forward(x.data(), z32.data(), s, o0);
    o0.compute = Compute::bf16;
    e0.forward(x.data(), zb.data(), s, o0);
    EXPECT_NE(zb, z32) << "the attention projections were not rounded";
    EXPECT_TRUE(compare(zb.data(), z32.data(), zb.size()).ok(2e-2));
    o.training = true;
    EXPECT_THROW(e.forward(x.data(), yb.data(), s, o), Error);
    o.training = false;
    EncoderCache cache;
    EXPECT_THROW(e.forward(x.data(), yb.data(), s, o, &cache), Error);
  }
}

TEST(Encoder, FastPathMatchesReferenceInTraining) {
  for (NormPlacement norm : {NormPlacement::post, NormPlacement::pre}) {
    EncoderConfig cfg = small_config();
    cfg.norm = norm;
    cfg.norm_type = norm == NormPlacement::pre ? NormType::rmsnorm : NormType::layernorm;
    cfg.activation = norm == NormPlacement::pre ? Activation::swiglu : Activation::relu;
    cfg.dropout = 0.2f;
    const Encoder e(cfg, 8);
    Shape s{2, 70, Layout::tokens, {70, 33}};
    const auto x = randn(size_t(s.positions() * cfg.d_model), 4), dy = randn(x.size(), 5);
    std::vector<Step> r;
    for (Path path : {Path::reference, Path::automatic}) {
      EncoderRunOptions o;
      o.path = path;
      o.training = true;
      o.seed = 3;
      o.causal = norm == NormPlacement::pre;
      r.push_back(step(e, x, dy, s, o));
    }
    std::vector<EncoderWeights> gs{r[0].g, r[1].g};
    expect_close(r[1].y, r[0].y, test::kAttentionForwardVsReference, "y");
    expect_close(r[1].dx, r[0].dx, test::kAttentionBackwardVsReference, "dx");
    for (size_t l = 0; l < 2; ++l) {
      expect_close(gs[1].layers[l].in_proj_weight, gs[0].layers[l].in_proj_weight, test::kAttentionBackwardVsReference, "dW_in");
      expect_close(gs[1].layers[l].out_proj_bias, gs[0].layers[l].out_proj_bias, test::kAttentionBackwardVsReference, "db_O");
      expect_close(gs[1].layers[l].norm1_weight, gs[0].layers[l].norm1_weight, test::kAttentionBackwardVsReference, "dγ1");
      expect_close(gs[1].layers[l].ffn.wg, gs[0].layers[l].ffn.wg, test::kAttentionBackwardVsReference, "dWg");
    }
  }
}

TEST(Encoder, StackedLayersDropDifferentElements) {
  // One user seed, two layers: each sublayer's masks come from its own seed.
  std::set<uint64_t> seeds;
  for (uint32_t l = 0; l < 4; ++l)
    for (uint32_t sub = 0; sub < 2; ++sub) seeds.insert(nn::derive_seed(42, l, sub));
  EXPECT_EQ(seeds.size(), 8u);
  const auto rule = nn::DropoutRule::make(0.5f);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i)
    same += rule.factor(nn::derive_seed(42, 0, 0), nn::Stream::attention, i) ==
            rule.factor(nn::derive_seed(42, 1, 0), nn::Stream::attention, i);
  EXPECT_LT(same, 600) << "layer 0's and layer 1's masks agree on " << same << " of 1000 elements";
}

// ---- files ------------------------------------------------------------------

TEST(Encoder, SaveAndLoadRoundTrip) {
  const auto dir = test::scratch_dir("encoder_io");
  EncoderConfig cfg = small_config();
  cfg.norm = NormPlacement::pre;
  cfg.eps = 1e-6f;
  const Encoder e(cfg, 9);
  const std::string p = (dir / "enc.safetensors").string();
  e.save(p);
  const Encoder back = Encoder::load(p);
  EXPECT_EQ(back.config().heads, cfg.heads);
  EXPECT_EQ(back.config().layers, cfg.layers);
  EXPECT_EQ(back.config().norm, NormPlacement::pre);
  EXPECT_EQ(back.config().activation, Activation::gelu);
  EXPECT_EQ(back.config().eps, 1e-6f);
  EXPECT_TRUE(back.config().final_norm);
  EXPECT_EQ(back.weights().layers[1].in_proj_weight, e.weights().layers[1].in_proj_weight);
  EXPECT_EQ(back.weights().layers[1].ffn.w2, e.weights().layers[1].ffn.w2);
}

TEST(Encoder, LoadErrorsNameTheTensorOrSetting) {
  auto message = [](const std::string& path, const EncoderLoadOptions& o) {
    try {
      Encoder::load(path, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Case c = cases("encoder").at(0);
  EncoderLoadOptions o;
  o.prefix = c.prefix;
  EXPECT_NE(message(FFN_ENCODER_GOLDEN, o).find("number of attention heads"), std::string::npos)
      << message(FFN_ENCODER_GOLDEN, o);
  o.heads = 3;  // does not divide 16
  EXPECT_NE(message(FFN_ENCODER_GOLDEN, o).find("does not divide d_model"), std::string::npos);
  o.prefix = "nothing.";
  EXPECT_NE(message(FFN_ENCODER_GOLDEN, o).find("not an encoder's state_dict"), std::string::npos);
  // A wrong shape and a missing tensor.
  const auto dir = test::scratch_dir("encoder_err");
  SafetensorsFile f;
  for (const auto& [name, t] : golden().tensors)
    if (name.rfind(c.prefix, 0) == 0 && name.find(".grad.") == std::string::npos && name.find("grad.") != c.prefix.size())
      f.tensors[name.substr(c.prefix.size())] = t;
  f.metadata["ffn.heads"] = "4";
  auto broken = f;
  broken.tensors["layers.0.linear2.bias"].shape = {1, broken.tensors["layers.0.linear2.bias"].shape[0]};
  write_safetensors((dir / "shape.safetensors").string(), broken);
  EXPECT_NE(message((dir / "shape.safetensors").string(), {}).find("layers.0.linear2.bias has shape [1, 16], expected [16]"),
            std::string::npos) << message((dir / "shape.safetensors").string(), {});
  broken = f;
  broken.tensors.erase("layers.0.norm2.weight");
  write_safetensors((dir / "missing.safetensors").string(), broken);
  EXPECT_NE(message((dir / "missing.safetensors").string(), {}).find("missing tensor layers.0.norm2.weight"),
            std::string::npos) << message((dir / "missing.safetensors").string(), {});
}

}  // namespace
}  // namespace ffn
