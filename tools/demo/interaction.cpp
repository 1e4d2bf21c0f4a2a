// Demonstration 2: a linear map cannot compute a·b.
//
// Data: a, b uniform in [-1, 1); targets a·b and [a > 0.5 and b > 0.5] (0 or 1).
// The linear model is the closed-form least-squares fit on (a, b, 1) of each
// target. The FFN (2 → d_ff → 2, ReLU, norm none) learns both at once: output
// 0 is a·b, output 1 the threshold's score (mean squared error on both, Adam,
// shuffled minibatches, cosine-annealed learning rate). The threshold's
// prediction is score > 0.5, for both models.
#include <cmath>

#include "ffn/diagnostics.hpp"
#include "demo/demos.hpp"
#include "ffn/train.hpp"
#include "ffn/random.hpp"
#include "demo/lstsq.hpp"

namespace ffn::demo {
namespace {

// n points (a, b) with targets (a·b, threshold); `which` keeps training and test draws apart.
train::Dataset make_data(int64_t n, uint64_t seed, uint64_t which) {
  train::Dataset d;
  d.n = n;
  d.d = 2;
  d.x.resize(size_t(2 * n));
  d.targets.resize(size_t(2 * n));
  for (int64_t i = 0; i < 2 * n; ++i) {
    const uint32_t bits = random_bits(seed, Stream::data, (which << 48) | uint64_t(i));
    d.x[size_t(i)] = float(bits >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float a = d.x[size_t(2 * i)], b = d.x[size_t(2 * i + 1)];
    d.targets[size_t(2 * i)] = a * b;
    d.targets[size_t(2 * i + 1)] = (a > 0.5f && b > 0.5f) ? 1.0f : 0.0f;
  }
  return d;
}

std::array<double, 3> linear_fit(const train::Dataset& d, int col) {
  std::vector<double> a(size_t(3 * d.n)), y(size_t(d.n));
  for (int64_t i = 0; i < d.n; ++i) {
    a[size_t(3 * i)] = d.x[size_t(2 * i)];
    a[size_t(3 * i + 1)] = d.x[size_t(2 * i + 1)];
    a[size_t(3 * i + 2)] = 1.0;
    y[size_t(i)] = d.targets[size_t(2 * i + col)];
  }
  const std::vector<double> c = train::least_squares(a, d.n, 3, y, 1);
  return {c[0], c[1], c[2]};
}

double linear(const std::array<double, 3>& c, double a, double b) { return c[0] * a + c[1] * b + c[2]; }

}  // namespace

InteractionResult interaction(const InteractionOptions& o) {
  if (o.train < 8) throw Error("--train: expected at least 8 points, got " + std::to_string(o.train));
  if (o.test < 2) throw Error("--test: expected at least 2 points, got " + std::to_string(o.test));
  if (o.train > 10'000'000 || o.test > 10'000'000) throw Error("--train/--test: expected at most 10000000 points");
  if (o.d_ff > 65536) throw Error("--d-ff: expected at most 65536, got " + std::to_string(o.d_ff));
  if (!(o.lr > 0.0f) || !std::isfinite(o.lr)) throw Error("--lr: expected a positive number, got " + num(o.lr));
  if (o.threads < 0 || o.threads > kMaxThreads)
    throw Error("--threads: expected 0.." + std::to_string(kMaxThreads) + ", got " + std::to_string(o.threads));
  if (o.d_ff < 1) throw Error("--d-ff: expected a positive integer, got " + std::to_string(o.d_ff));
  if (o.epochs < 1) throw Error("--epochs: expected a positive integer, got " + std::to_string(o.epochs));
  if (o.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(o.batch));

  const train::Dataset tr = make_data(o.train, o.seed, 1), te = make_data(o.test, o.seed, 2);
  Config cfg;
  cfg.d_model = 2;
  cfg.d_ff = o.d_ff;
  cfg.activation = Activation::relu;
  cfg.norm = NormPlacement::none;
  FeedForward layer(cfg, o.seed);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adam;
  oc.lr = o.lr;
  Trainer trainer(layer, std::nullopt, LossKind::mse, oc, o.threads, o.isa);
  std::vector<int64_t> rows(size_t(tr.n));
  for (int64_t i = 0; i < tr.n; ++i) rows[size_t(i)] = i;
  train::FitOptions fo;
  fo.epochs = o.epochs;
  fo.batch = o.batch;
  fo.lr = o.lr;
  fo.cosine = true;
  fo.seed = o.seed;
  const train::FitResult fr = train::fit(trainer, tr, rows, {}, fo);

  InteractionResult r{layer};
  r.final_train_loss = fr.epochs.empty() ? 0.0 : fr.epochs.back().train_loss;
  r.linear_product = linear_fit(tr, 0);
  r.linear_threshold = linear_fit(tr, 1);

  std::vector<float> y(te.x.size());
  RunOptions ro;
  ro.threads = o.threads;
  ro.isa = o.isa;
  layer.forward(te.x.data(), y.data(), Shape::tokens(te.n), ro);
  std::vector<double> truth(size_t(te.n)), lin(size_t(te.n)), net(size_t(te.n));
  int64_t lin_ok = 0, net_ok = 0, zeros = 0;
  for (int64_t i = 0; i < te.n; ++i) {
    const double a = te.x[size_t(2 * i)], b = te.x[size_t(2 * i + 1)];
    truth[size_t(i)] = te.targets[size_t(2 * i)];
    lin[size_t(i)] = linear(r.linear_product, a, b);
    net[size_t(i)] = y[size_t(2 * i)];
    const bool label = te.targets[size_t(2 * i + 1)] > 0.5f;
    lin_ok += (linear(r.linear_threshold, a, b) > 0.5) == label;
    net_ok += (y[size_t(2 * i + 1)] > 0.5f) == label;
    zeros += !label;
  }
  r.linear_r2 = train::r_squared(truth, lin);
  r.ffn_r2 = train::r_squared(truth, net);
  r.linear_accuracy = double(lin_ok) / double(te.n);
  r.ffn_accuracy = double(net_ok) / double(te.n);
  r.majority_accuracy = double(std::max(zeros, te.n - zeros)) / double(te.n);

  // Both models over the plane, at the centres of a 32 × 32 grid.
  const int g = 32;
  std::vector<float> cx(size_t(2 * g * g)), cy(cx.size());
  for (int j = 0; j < g; ++j) {
    for (int i = 0; i < g; ++i) {
      cx[size_t(2 * (j * g + i))] = float(-1.0 + (i + 0.5) * 2.0 / g);
      cx[size_t(2 * (j * g + i) + 1)] = float(-1.0 + (j + 0.5) * 2.0 / g);
    }
  }
  layer.forward(cx.data(), cy.data(), Shape::tokens(g * g), ro);
  auto map = [&](const std::string& title, double vmin, double vmax, auto&& value) {
    plot::Heatmap h;
    h.title = title;
    h.nx = h.ny = g;
    h.x0 = h.y0 = -1;
    h.x1 = h.y1 = 1;
    h.vmin = vmin;
    h.vmax = vmax;
    h.xlabel = "a";
    h.ylabel = "b";
    for (int k = 0; k < g * g; ++k) h.v.push_back(value(k, double(cx[size_t(2 * k)]), double(cx[size_t(2 * k + 1)])));
    return h;
  };
  char buf[160];
  std::snprintf(buf, sizeof buf, "a·b, linear least squares (R² %.4f)", r.linear_r2);
  plot::Heatmap m1 = map(buf, -1, 1, [&](int, double a, double b) { return linear(r.linear_product, a, b); });
  std::snprintf(buf, sizeof buf, "a·b, FFN with %lld ReLU units (R² %.4f)", (long long)o.d_ff, r.ffn_r2);
  plot::Heatmap m2 = map(buf, -1, 1, [&](int k, double, double) { return double(cy[size_t(2 * k)]); });
  std::snprintf(buf, sizeof buf, "a>0.5 and b>0.5, linear (accuracy %.4f)", r.linear_accuracy);
  plot::Heatmap m3 = map(buf, -0.5, 1.5, [&](int, double a, double b) { return linear(r.linear_threshold, a, b); });
  std::snprintf(buf, sizeof buf, "a>0.5 and b>0.5, FFN (accuracy %.4f)", r.ffn_accuracy);
  plot::Heatmap m4 = map(buf, -0.5, 1.5, [&](int k, double, double) { return double(cy[size_t(2 * k + 1)]); });
  for (plot::Heatmap* h : {&m1, &m2}) h->segments = {{-1, 0, 1, 0}, {0, -1, 0, 1}};           // a·b = 0
  for (plot::Heatmap* h : {&m3, &m4}) h->segments = {{0.5, 0.5, 1, 0.5}, {0.5, 0.5, 0.5, 1}};  // the true corner
  r.maps = {m1, m2, m3, m4};
  return r;
}

}  // namespace ffn::demo
