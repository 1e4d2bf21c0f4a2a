// Training: the output head's cross-entropy (against finite differences and
// PyTorch), the optimizers (closed-form first steps, and 20-step runs against
// torch.optim from tests/data/train_golden.safetensors), least squares, the
// training loop's determinism, and the two demonstrations' claims.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "ffn/diagnostics.hpp"
#include "demo/demos.hpp"
#include "ffn/train.hpp"
#include "tolerances.hpp"
#include "demo/lstsq.hpp"

using namespace ffn;
using namespace ffn::test;

namespace {

const SafetensorsFile& golden() {
  static const SafetensorsFile f = read_safetensors(FFN_TRAIN_GOLDEN);
  return f;
}
const NamedTensor& tensor(const std::string& name) { return golden().tensors.at(name); }
std::vector<int64_t> labels_of(const std::string& name) {
  std::vector<int64_t> l;
  for (float v : tensor(name).data) l.push_back(int64_t(v));
  return l;
}

OutputHead head_of(const std::string& prefix) {
  OutputHead h;
  const NamedTensor& w = tensor(prefix + "weight");
  h.vocab = w.shape[0];
  h.d_model = w.shape[1];
  h.weight = w.data;
  h.bias = tensor(prefix + "bias").data;
  return h;
}

// Independent double-precision cross-entropy: the oracle for finite differences.
double xent_double(const OutputHead& h, const std::vector<double>& y, const std::vector<double>& w,
                   const std::vector<double>& b, const std::vector<int64_t>& labels) {
  const int64_t t = int64_t(labels.size()), V = h.vocab, d = h.d_model;
  double total = 0.0;
  for (int64_t i = 0; i < t; ++i) {
    std::vector<double> z(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) {
      z[size_t(v)] = b[size_t(v)];
      for (int64_t j = 0; j < d; ++j) z[size_t(v)] += y[size_t(i * d + j)] * w[size_t(v * d + j)];
    }
    const double m = *std::max_element(z.begin(), z.end());
    double s = 0.0;
    for (double e : z) s += std::exp(e - m);
    total += m + std::log(s) - z[size_t(labels[size_t(i)])];
  }
  return total / double(t);
}

}  // namespace

TEST(OutputHead, MatchesPyTorch) {
  for (const std::string p : {"head0.", "head1."}) {
    SCOPED_TRACE(p);
    const OutputHead h = head_of(p);
    const NamedTensor& y = tensor(p + "y");
    const std::vector<int64_t> labels = labels_of(p + "labels");
    const int64_t t = y.shape[0];
    std::vector<float> dy(y.data.size());
    OutputHead g;
    const double loss = h.cross_entropy(y.data.data(), labels.data(), t, dy.data(), &g, 2);
    const double want = tensor(p + "loss").data[0];
    EXPECT_NEAR(loss, want, 1e-6 * std::max(1.0, std::abs(want)));
    const auto cy = compare(dy.data(), tensor(p + "dy").data.data(), dy.size());
    const auto cw = compare(g.weight.data(), tensor(p + "grad_weight").data.data(), g.weight.size());
    const auto cb = compare(g.bias.data(), tensor(p + "grad_bias").data.data(), g.bias.size());
    EXPECT_TRUE(cy.ok(kVsTorchDx)) << cy.describe();
    EXPECT_TRUE(cw.ok(kVsTorchDw)) << cw.describe();
    EXPECT_TRUE(cb.ok(kVsTorchDw)) << cb.describe();
  }
  // head1's logits are in the hundreds: exp alone would overflow float.
  const OutputHead h = head_of("head1.");
  std::vector<float> logits(size_t(7 * h.vocab));
  h.cross_entropy(tensor("head1.y").data.data(), labels_of("head1.labels").data(), 7, nullptr, nullptr, 1,
                  logits.data());
  EXPECT_GT(*std::max_element(logits.begin(), logits.end()), 100.0f);
}

TEST(OutputHead, GradientsMatchFiniteDifferences) {
  const int64_t t = 5, d = 4, V = 6;
  OutputHead h = OutputHead::init(V, d, 3);
  std::vector<float> y(size_t(t * d));
  for (size_t i = 0; i < y.size(); ++i) y[i] = float(std::sin(0.7 * double(i) + 0.3)) * 2.0f;
  const std::vector<int64_t> labels = {0, 5, 2, 2, 4};
  std::vector<float> dy(y.size());
  OutputHead g;
  h.cross_entropy(y.data(), labels.data(), t, dy.data(), &g, 1);

  std::vector<double> yd(y.begin(), y.end()), wd(h.weight.begin(), h.weight.end()), bd(h.bias.begin(), h.bias.end());
  auto fd = [&](std::vector<double>& v, size_t i) {
    const double keep = v[i], step = 1e-6;
    v[i] = keep + step;
    const double up = xent_double(h, yd, wd, bd, labels);
    v[i] = keep - step;
    const double down = xent_double(h, yd, wd, bd, labels);
    v[i] = keep;
    return (up - down) / (2 * step);
  };
  std::vector<double> ny(yd.size()), nw(wd.size()), nb(bd.size());
  for (size_t i = 0; i < ny.size(); ++i) ny[i] = fd(yd, i);
  for (size_t i = 0; i < nw.size(); ++i) nw[i] = fd(wd, i);
  for (size_t i = 0; i < nb.size(); ++i) nb[i] = fd(bd, i);
  // Our gradients are float32 (u = 6e-8, sums of V and t terms): within
  // kVsTorch of the exact derivative; the finite differences are exact to ~1e-9.
  const auto cy = compare(dy.data(), ny.data(), ny.size());
  const auto cw = compare(g.weight.data(), nw.data(), nw.size());
  const auto cb = compare(g.bias.data(), nb.data(), nb.size());
  EXPECT_TRUE(cy.ok(kVsTorchDx)) << cy.describe();
  EXPECT_TRUE(cw.ok(kVsTorchDw)) << cw.describe();
  EXPECT_TRUE(cb.ok(kVsTorchDw)) << cb.describe();
  // Each token's softmax sums to one, so the bias gradient sums to zero.
  EXPECT_NEAR(std::accumulate(g.bias.begin(), g.bias.end(), 0.0), 0.0, 1e-6);
}

TEST(OutputHead, RejectsLabelsOutsideTheVocabulary) {
  const OutputHead h = OutputHead::init(3, 2, 0);
  const std::vector<float> y = {1, 2, 3, 4};
  for (int64_t bad : {int64_t(-1), int64_t(3)}) {
    const std::vector<int64_t> labels = {0, bad};
    try {
      h.cross_entropy(y.data(), labels.data(), 2, nullptr, nullptr);
      ADD_FAILURE() << "label " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
    }
  }
}

TEST(Loss, MseAndItsGradient) {
  const std::vector<float> y = {1, 2, 3, 4}, t = {0, 2, 5, 4};
  std::vector<float> dy(4);
  EXPECT_DOUBLE_EQ(mse_loss(y.data(), t.data(), 4, dy.data()), (1.0 + 0 + 4 + 0) / 4);
  EXPECT_EQ(dy, (std::vector<float>{0.5f, 0.0f, -1.0f, 0.0f}));
}

TEST(Optimizer, ClosedFormSteps) {
  // SGD with momentum: the first step copies the gradient into the buffer.
  std::vector<float> p = {1.0f}, g = {0.5f};
  OptimizerConfig c;
  c.kind = OptimizerKind::sgd;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.weight_decay = 0.2f;
  Optimizer sgd(c);
  const ParamRef ref{p.data(), g.data(), 1};
  sgd.step({&ref, 1});  // d = 0.5 + 0.2·1 = 0.7; p = 1 - 0.07
  EXPECT_FLOAT_EQ(p[0], 0.93f);
  sgd.step({&ref, 1});  // d = 0.5 + 0.2·0.93 = 0.686; buf = 0.9·0.7 + 0.686 = 1.316; p = 0.93 - 0.1316
  EXPECT_NEAR(p[0], 0.93 - 0.1316, 1e-6);

  // Adam's first step moves every parameter by lr·sign(g) (up to eps).
  for (OptimizerKind k : {OptimizerKind::adam, OptimizerKind::adamw}) {
    std::vector<float> q = {1.0f, -2.0f, 3.0f}, gq = {0.01f, -300.0f, 2.0f};
    OptimizerConfig a;
    a.kind = k;
    a.lr = 0.01f;
    Optimizer adam(a);
    const ParamRef r{q.data(), gq.data(), 3};
    adam.step({&r, 1});
    EXPECT_NEAR(q[0], 0.99, 1e-5);
    EXPECT_NEAR(q[1], -1.99, 1e-5);
    EXPECT_NEAR(q[2], 2.99, 1e-5);
  }
  // AdamW decays the parameter itself: with a zero gradient p ← p(1 - lr·wd).
  std::vector<float> w = {2.0f}, zero = {0.0f};
  OptimizerConfig aw;
  aw.kind = OptimizerKind::adamw;
  aw.lr = 0.1f;
  aw.weight_decay = 0.5f;
  Optimizer adamw(aw);
  const ParamRef rw{w.data(), zero.data(), 1};
  adamw.step({&rw, 1});
  EXPECT_FLOAT_EQ(w[0], 1.9f);
}

TEST(Optimizer, RejectsBadSettings) {
  OptimizerConfig c;
  c.lr = -1;
  EXPECT_THROW(Optimizer{c}, Error);
  c = {};
  c.beta2 = 1.0f;
  EXPECT_THROW(Optimizer{c}, Error);
  EXPECT_THROW(parse_optimizer("lamb", "--optimizer"), Error);
}

// 20 steps on the golden runs: the loss curve and the final weights match torch.optim.
TEST(Training, ReproducesPyTorchLossCurves) {
  for (int run = 0; run < 4; ++run) {
    const std::string p = "run" + std::to_string(run) + ".";
    const nlohmann::json m = nlohmann::json::parse(golden().metadata.at("run" + std::to_string(run)));
    SCOPED_TRACE(m.dump());
    Config cfg;
    cfg.d_model = 8;
    cfg.d_ff = 16;
    cfg.activation = parse_activation(m["activation"].get<std::string>());
    cfg.norm = parse_norm_placement(m["norm"].get<std::string>());
    cfg.norm_type = parse_norm_type(m["norm_type"].get<std::string>());
    cfg.bias = m["bias"].get<bool>();
    Weights w;
    auto get = [&](const std::string& n) { return golden().tensors.count(p + n) ? tensor(p + n).data : std::vector<float>{}; };
    w.w1 = get("linear1.weight");
    w.b1 = get("linear1.bias");
    w.wg = get("gate.weight");
    w.bg = get("gate.bias");
    w.w2 = get("linear2.weight");
    w.b2 = get("linear2.bias");
    w.norm_weight = get("norm.weight");
    w.norm_bias = get("norm.bias");
    FeedForward layer(cfg, w);
    const LossKind loss = parse_loss(m["loss"].get<std::string>());
    std::optional<OutputHead> head;
    if (loss == LossKind::xent) head = head_of(p + "head.");
    OptimizerConfig oc;
    oc.kind = parse_optimizer(m["optimizer"].get<std::string>());
    oc.lr = m["lr"].get<float>();
    oc.momentum = m["momentum"].get<float>();
    oc.weight_decay = m["weight_decay"].get<float>();
    Trainer trainer(layer, head, loss, oc, 2);
    const std::vector<float>& x = tensor(p + "x").data;
    const std::vector<int64_t> labels = loss == LossKind::xent ? labels_of(p + "labels") : std::vector<int64_t>{};
    const std::vector<float>& losses = tensor(p + "losses").data;
    double worst = 0.0;
    for (int s = 0; s < 20; ++s) {
      const int64_t r0 = 8 * (s % 3);
      Batch b;
      b.x = x.data() + r0 * 8;
      b.n = 8;
      if (loss == LossKind::xent) b.labels = labels.data() + r0;
      else b.targets = tensor(p + "targets").data.data() + r0 * 8;
      const double l = trainer.step(b, 0);
      worst = std::max(worst, std::abs(l - double(losses[size_t(s)])));
      EXPECT_NEAR(l, losses[size_t(s)], kLossCurve) << "step " << s;
    }
    std::printf("[ measured ] run%d (%s): worst loss difference over 20 steps %.2e\n", run,
                m["optimizer"].get<std::string>().c_str(), worst);
    // The loss must actually move, or matching it would prove little.
    EXPECT_GT(std::abs(double(losses[0]) - double(losses[18])), 1e-2);
    const Weights& got = trainer.layer().weights();
    auto check = [&](const std::vector<float>& v, const std::string& n) {
      if (v.empty()) return;
      const auto c = compare(v.data(), tensor(p + "final." + n).data.data(), v.size());
      EXPECT_TRUE(c.ok(kTrainedWeights)) << n << ": " << c.describe();
    };
    check(got.w1, "linear1.weight");
    check(got.b1, "linear1.bias");
    check(got.wg, "gate.weight");
    check(got.w2, "linear2.weight");
    check(got.b2, "linear2.bias");
    check(got.norm_weight, "norm.weight");
    check(got.norm_bias, "norm.bias");
  }
}

TEST(LeastSquares, RecoversAnExactSolutionAndR2) {
  // y = 2a - 3b + 0.5 exactly: the fit recovers the coefficients, R² = 1.
  std::vector<double> a, y;
  for (int i = 0; i < 50; ++i) {
    const double u = std::sin(i * 1.3), v = std::cos(i * 0.7);
    a.insert(a.end(), {u, v, 1.0});
    y.push_back(2 * u - 3 * v + 0.5);
  }
  const std::vector<double> c = train::least_squares(a, 50, 3, y, 1);
  EXPECT_NEAR(c[0], 2.0, 1e-12);
  EXPECT_NEAR(c[1], -3.0, 1e-12);
  EXPECT_NEAR(c[2], 0.5, 1e-12);
  EXPECT_NEAR(train::r_squared(y, y), 1.0, 1e-15);
  // A duplicated column is dependent: it gets 0 and the fit is unchanged.
  std::vector<double> a2;
  for (int i = 0; i < 50; ++i) a2.insert(a2.end(), {a[size_t(3 * i)], a[size_t(3 * i)], a[size_t(3 * i + 1)], 1.0});
  const std::vector<double> c2 = train::least_squares(a2, 50, 4, y, 1);
  EXPECT_NEAR(c2[0] + c2[1], 2.0, 1e-10);
  EXPECT_NEAR(c2[2], -3.0, 1e-10);

  // A dependent column before an independent one must not cost the later
  // column its row: columns (1,0,0), (1,0,0), (1,1,0), b = (1,1,0) fit exactly.
  const std::vector<double> c3 = train::least_squares({1, 1, 1, 0, 0, 1, 0, 0, 0}, 3, 3, {1, 1, 0}, 1);
  EXPECT_NEAR(c3[0] + c3[1] + c3[2], 1.0, 1e-12);  // row 0
  EXPECT_NEAR(c3[2], 1.0, 1e-12);                  // row 1

  // Noisy targets: the solution satisfies the normal equations Aᵀ(Ax - y) = 0.
  std::vector<double> a4, y4;
  for (int i = 0; i < 40; ++i) {
    const double u = std::sin(i * 0.9), v = std::cos(i * 2.1);
    a4.insert(a4.end(), {u, u, v, 1.0});  // column 1 duplicates column 0
    y4.push_back(std::sin(i * 7.7) + u * v);
  }
  const std::vector<double> c4 = train::least_squares(a4, 40, 4, y4, 1);
  for (int col = 0; col < 4; ++col) {
    double g = 0.0;
    for (int i = 0; i < 40; ++i) {
      double p = 0.0;
      for (int l = 0; l < 4; ++l) p += a4[size_t(4 * i + l)] * c4[size_t(l)];
      g += a4[size_t(4 * i + col)] * (p - y4[size_t(i)]);
    }
    EXPECT_NEAR(g, 0.0, 1e-10) << "column " << col;
  }
}

TEST(Fit, PermutationSplitAndDeterminism) {
  const std::vector<int64_t> p = train::permutation(1000, 5, 2);
  EXPECT_EQ(std::set<int64_t>(p.begin(), p.end()).size(), 1000u);
  EXPECT_NE(p, train::permutation(1000, 5, 3));
  EXPECT_EQ(p, train::permutation(1000, 5, 2));
  std::vector<int64_t> tr, va;
  train::split(1000, 0.1, 1, tr, va);
  EXPECT_EQ(tr.size(), 900u);
  EXPECT_EQ(va.size(), 100u);
  std::set<int64_t> all(tr.begin(), tr.end());
  all.insert(va.begin(), va.end());
  EXPECT_EQ(all.size(), 1000u);

  // Same seed, same weights (with dropout on), for any thread count.
  train::Dataset data;
  data.n = 200;
  data.d = 6;
  for (int i = 0; i < 200 * 6; ++i) {
    data.x.push_back(float(std::sin(i * 0.37)));
    data.targets.push_back(float(std::cos(i * 0.11)));
  }
  auto train_once = [&](int threads) {
    Config cfg;
    cfg.d_model = 6;
    cfg.d_ff = 20;
    cfg.dropout_hidden = 0.1f;
    FeedForward layer(cfg, 4);
    Trainer t(layer, std::nullopt, LossKind::mse, OptimizerConfig{}, threads);
    train::FitOptions fo;
    fo.epochs = 3;
    fo.batch = 16;
    fo.seed = 9;
    const train::FitResult r = train::fit(t, data, tr, {}, fo);
    EXPECT_EQ(r.epochs.size(), 3u);
    EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
    return layer.weights().w1;
  };
  train::split(200, 0.1, 1, tr, va);
  EXPECT_EQ(train_once(1), train_once(1));
  EXPECT_EQ(train_once(1), train_once(3));
}

TEST(Fit, StopsBetweenSteps) {
  train::Dataset data;
  data.n = 64;
  data.d = 4;
  data.x.assign(64 * 4, 0.5f);
  data.targets.assign(64 * 4, 0.25f);
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 8;
  FeedForward layer(cfg, 1);
  Trainer t(layer, std::nullopt, LossKind::mse, OptimizerConfig{}, 1);
  std::vector<int64_t> rows(64);
  std::iota(rows.begin(), rows.end(), 0);
  std::atomic<bool> stop{false};
  train::FitCallbacks cb;
  cb.stop = &stop;
  cb.on_step = [&](const train::StepReport& s) {
    if (s.epoch == 2 && s.step == 3) stop = true;
  };
  train::FitOptions fo;
  fo.epochs = 5;
  fo.batch = 8;
  const train::FitResult r = train::fit(t, data, rows, {}, fo, cb);
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.step_losses.size(), 8u + 3u);
  EXPECT_EQ(t.steps(), 11);
}

// A non-finite loss or gradient stops fit at that step, and the step is not
// applied: the weights stay those of the step before (bitwise).
TEST(Fit, StopsAtTheFirstNonFiniteLossOrGradientWithoutApplyingIt) {
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 8;
  cfg.norm = NormPlacement::none;
  for (const bool nan_target : {true, false}) {
    train::Dataset data;
    data.n = 64;
    data.d = 4;
    data.x.assign(64 * 4, 0.5f);
    data.targets.assign(64 * 4, 0.25f);
    // Row 20: a NaN target makes the loss NaN, an infinite one Inf.
    data.targets[20 * 4 + 1] = nan_target ? NAN : INFINITY;
    FeedForward layer(cfg, 1);
    Trainer t(layer, std::nullopt, LossKind::mse, OptimizerConfig{}, 1);
    std::vector<int64_t> rows(64);
    std::iota(rows.begin(), rows.end(), 0);
    Weights before;
    train::FitCallbacks cb;
    train::FitOptions fo;
    fo.epochs = 2;
    fo.batch = 8;
    // fit shuffles the rows; find the step that holds row 20.
    const std::vector<int64_t> order = train::permutation(64, fo.seed, 0);
    const int64_t pos = std::find(order.begin(), order.end(), 20) - order.begin();
    const int64_t bad_step = pos / 8 + 1;
    cb.on_step = [&](const train::StepReport& s) {
      if (s.epoch == 1 && s.step == bad_step - 1) before = layer.weights();
    };
    if (bad_step == 1) before = layer.weights();
    const train::FitResult r = train::fit(t, data, rows, {}, fo, cb);
    ASSERT_FALSE(r.diverged.empty()) << "nan_target=" << nan_target;
    EXPECT_EQ(r.diverged, nan_target ? "loss is nan" : "loss is inf");
    EXPECT_EQ(r.diverged_epoch, 1);
    EXPECT_EQ(r.diverged_step, bad_step);
    EXPECT_EQ(int64_t(r.step_losses.size()), bad_step);
    EXPECT_EQ(t.steps(), bad_step - 1);  // the optimizer never saw the bad step
    EXPECT_EQ(layer.weights().w1, before.w1);
    EXPECT_EQ(layer.weights().w2, before.w2);
    EXPECT_EQ(layer.weights().b1, before.b1);
  }
}

// Demonstration 1 (seed 000): N ReLU units approximate x² within 3× of the
// best any continuous piecewise-linear function with N kinks can do, and the
// error falls like N^-2.
TEST(Demo, ApproximateIsWithinThreeTimesTheBest) {
  for (int64_t n : {4, 8, 16}) {
    demo::ApproximateOptions o;
    o.neurons = n;
    const demo::ApproximateResult r = demo::approximate(o);
    const double best = 4.0 / (8.0 * double(n + 1) * double(n + 1));
    EXPECT_DOUBLE_EQ(r.best_error, best);
    EXPECT_LE(r.max_error, 3.0 * best) << "N=" << n;
    EXPECT_GE(r.max_error, best * (1 - 1e-3)) << "N=" << n << ": better than the proven optimum?";
    EXPECT_EQ(r.kinks_inside, n);
    // Beyond the last kink the model is a straight line: its error grows.
    EXPECT_GT(std::abs(r.outside[0][1] - r.outside[0][2]), 100 * r.max_error);
    std::printf("[ measured ] N=%lld: max error %.3g, best %.3g (ratio %.2f)\n", (long long)n, r.max_error, best,
                r.max_error / best);
  }
}

TEST(Demo, ApproximateSavedLayerReproducesTheErrorAndLineBeyond) {
  demo::ApproximateOptions o;
  o.neurons = 6;
  o.steps = 200;
  const demo::ApproximateResult r = demo::approximate(o);
  // Past the last kink, three model values lie on one line.
  const float xs[3] = {3.0f, 4.0f, 5.0f};
  float ys[3];
  r.layer.forward(xs, ys, Shape::tokens(3));
  EXPECT_NEAR((ys[2] - ys[1]) - (ys[1] - ys[0]), 0.0, 1e-4);
  // The reported error is the layer's own on the interval.
  std::vector<float> x(2001), y(2001);
  for (int i = 0; i <= 2000; ++i) x[size_t(i)] = float(-1.0 + i * 0.001);
  r.layer.forward(x.data(), y.data(), Shape::tokens(2001));
  double e = 0;
  for (int i = 0; i <= 2000; ++i) e = std::max(e, std::abs(double(y[size_t(i)]) - double(x[size_t(i)]) * x[size_t(i)]));
  EXPECT_LE(e, r.max_error * (1 + 1e-6));
  EXPECT_GE(e, r.max_error * 0.95);
}

TEST(Demo, SweepSlopeIsNearMinusTwo) {
  demo::ApproximateOptions o;
  o.steps = 500;  // the spread start is already near the optimum; keep the test quick
  const demo::SweepResult s = demo::approximate_sweep(o, {2, 4, 8, 16, 32, 64});
  std::printf("[ measured ] sweep slope %.3f\n", s.slope);
  EXPECT_GE(s.slope, -2.5);
  EXPECT_LE(s.slope, -1.5);
}

// Demonstration 2: a linear map cannot compute a·b; a small FFN can.
TEST(Demo, InteractionLinearFailsFfnSucceeds) {
  const demo::InteractionResult r = demo::interaction({});
  std::printf("[ measured ] R² linear %.4f FFN %.4f; accuracy linear %.4f FFN %.4f (majority %.4f)\n", r.linear_r2,
              r.ffn_r2, r.linear_accuracy, r.ffn_accuracy, r.majority_accuracy);
  EXPECT_LT(r.linear_r2, 0.05);
  EXPECT_GT(r.ffn_r2, 0.99);
  EXPECT_GT(r.ffn_accuracy, 0.99);
  // The linear model does no better than always answering "no".
  EXPECT_LE(r.linear_accuracy, r.majority_accuracy + 0.005);
  EXPECT_LT(r.linear_accuracy, r.ffn_accuracy - 0.04);
}
