// Demonstration 1: a 1 → N → 1 ReLU FFN approximating f on [a, b].
//
// Start ("spread"): the kinks evenly spaced over the interval; units left of a
// split point face left (w1 = -1), the others right (w1 = +1); the split and
// the output layer (W2, b2) are chosen by least squares (see approximate()).
// Then Adam trains every parameter on a grid of the interval (mean squared
// error, full batch, cosine-annealed learning rate). "random" starts from
// nn.Linear's initialization instead, with W2 and b2 by least squares.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>

#include "ffn/diagnostics.hpp"
#include "demo/demos.hpp"
#include "ffn/train.hpp"
#include "demo/lstsq.hpp"

namespace ffn::demo {

double target_function(const std::string& name, double x) {
  if (name == "square") return x * x;
  if (name == "sin") return std::sin(std::numbers::pi * x);
  if (name == "abs") return std::abs(x);
  throw Error("--function: unknown function '" + name + "', expected square, sin or abs");
}

std::string function_formula(const std::string& name, bool unicode) {
  if (name == "square") return unicode ? "x²" : "x^2";
  if (name == "sin") return unicode ? "sin(πx)" : "sin(pi x)";
  if (name == "abs") return "|x|";
  return name;
}

namespace {

Config make_config(int64_t n) {
  Config cfg;
  cfg.d_model = 1;
  cfg.d_ff = n;
  cfg.activation = Activation::relu;
  cfg.bias = true;
  cfg.norm = NormPlacement::none;
  return cfg;
}

std::vector<float> predict(const FeedForward& layer, const std::vector<float>& x, int threads, Isa isa) {
  std::vector<float> y(x.size());
  RunOptions ro;
  ro.threads = threads;
  ro.isa = isa;
  layer.forward(x.data(), y.data(), Shape::tokens(int64_t(x.size())), ro);
  return y;
}

std::vector<float> grid(double a, double b, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(a + (b - a) * double(i) / double(n - 1));
  return x;
}

// W2 and b2 minimizing the squared error for fixed W1, b1; returns that error.
double fit_output_layer(Weights& w, int64_t n, const std::vector<float>& x, const std::vector<double>& f) {
  const int64_t m = int64_t(x.size());
  std::vector<double> a(size_t(m * (n + 1)));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t u = 0; u < n; ++u) a[size_t(i * (n + 1) + u)] = std::max(0.0f, w.w1[size_t(u)] * x[size_t(i)] + w.b1[size_t(u)]);
    a[size_t(i * (n + 1) + n)] = 1.0;
  }
  const std::vector<double> sol = train::least_squares(a, m, n + 1, f, 1);
  double sse = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    double p = 0.0;
    for (int64_t u = 0; u <= n; ++u) p += a[size_t(i * (n + 1) + u)] * sol[size_t(u)];
    sse += (p - f[size_t(i)]) * (p - f[size_t(i)]);
  }
  for (int64_t u = 0; u < n; ++u) w.w2[size_t(u)] = float(sol[size_t(u)]);
  w.b2[0] = float(sol[size_t(n)]);
  return sse;
}

double max_abs_error(const FeedForward& layer, const ApproximateOptions& o) {
  const std::vector<float> x = grid(o.a, o.b, 16 * (o.points - 1) + 1);
  const std::vector<float> y = predict(layer, x, o.threads, o.isa);
  double e = 0.0;
  for (size_t i = 0; i < x.size(); ++i) e = std::max(e, std::abs(double(y[i]) - target_function(o.function, x[i])));
  return e;
}

std::string slope_text(double v, const char* format = "%.2f") {
  char b[32];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

}  // namespace

ApproximateResult approximate(const ApproximateOptions& o) {
  target_function(o.function, 0.0);  // validates the name
  // The start solves about 2N least-squares problems of points × (N + 1): N
  // up to 256 takes seconds.
  if (o.neurons < 1 || o.neurons > 256)
    throw Error("--neurons: expected an integer in 1..256, got " + std::to_string(o.neurons));
  if (!(std::isfinite(o.a) && std::isfinite(o.b) && o.a < o.b))
    throw Error("--interval: expected A,B with A < B, got " + num(o.a) + "," + num(o.b));
  if (o.b - o.a < 1e-3 * std::max({1.0, std::abs(o.a), std::abs(o.b)}))
    throw Error("--interval: " + num(o.a) + "," + num(o.b) + " is too narrow for float32 (width at least 1e-3 of the larger end)");
  if (std::max(std::abs(o.a), std::abs(o.b)) > 1e6)
    throw Error("--interval: expected ends within [-1e6, 1e6], got " + num(o.a) + "," + num(o.b));
  if (!(o.lr > 0.0f) || !std::isfinite(o.lr)) throw Error("--lr: expected a positive number, got " + num(o.lr));
  if (o.threads < 0 || o.threads > kMaxThreads)
    throw Error("--threads: expected 0.." + std::to_string(kMaxThreads) + ", got " + std::to_string(o.threads));
  if (o.init != "spread" && o.init != "random")
    throw Error("--init: expected spread or random, got '" + o.init + "'");
  if (o.steps < 0) throw Error("--steps: expected an integer >= 0, got " + std::to_string(o.steps));
  if (o.points < 2 * o.neurons + 2) throw Error("--points: expected at least 2N + 2, got " + std::to_string(o.points));

  const int64_t n = o.neurons;
  const double L = o.b - o.a;
  const Config cfg = make_config(n);
  const std::vector<float> x = grid(o.a, o.b, o.points);
  std::vector<double> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = target_function(o.function, x[i]);

  // Start.
  Weights w = FeedForward(cfg, o.seed).weights();
  if (o.init == "spread") {
    // Candidates: (1) N kinks at the interior points of N + 1 equal pieces;
    // (2) N - 1 kinks for N equal pieces plus one unit whose kink lies left of
    // the interval, a linear term there (N units carry N + 1 output
    // parameters, one fewer than a free PL function with N kinks has, so for a
    // target without a symmetric split (2) can win). Each with every split
    // into left- and right-facing units; the least squared error wins.
    double best = std::numeric_limits<double>::infinity();
    Weights trial = w;
    for (const int64_t interior : {n, n - 1}) {
      if (interior < 0 || (interior == n - 1 && n < 2)) continue;
      for (int64_t split = 0; split <= interior; ++split) {
        for (int64_t u = 0; u < interior; ++u) {
          const float knot = float(o.a + L * double(u + 1) / double(interior + 1));
          const float dir = u < split ? -1.0f : 1.0f;
          trial.w1[size_t(u)] = dir;
          trial.b1[size_t(u)] = -dir * knot;
        }
        if (interior < n) {  // the linear unit: relu(x - (a - L)) = x - a + L on [a, b]
          trial.w1[size_t(n - 1)] = 1.0f;
          trial.b1[size_t(n - 1)] = float(L - o.a);
        }
        const double sse = fit_output_layer(trial, n, x, f);
        if (sse < best) {
          best = sse;
          w = trial;
        }
      }
    }
  } else {
    fit_output_layer(w, n, x, f);
  }
  FeedForward layer(cfg, w);
  const double start_error = max_abs_error(layer, o);

  // Train.
  train::Dataset data;
  data.n = int64_t(x.size());
  data.d = 1;
  data.x = x;
  data.targets.assign(f.begin(), f.end());
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adam;
  oc.lr = o.lr;
  Trainer trainer(layer, std::nullopt, LossKind::mse, oc, o.threads, o.isa);
  for (int64_t s = 0; s < o.steps; ++s) {
    trainer.set_lr(train::cosine_lr(o.lr, s, o.steps));
    Batch b{data.x.data(), data.targets.data(), nullptr, data.n};
    trainer.step(b, 0);
  }

  ApproximateResult r{layer};
  r.start_error = start_error;
  r.max_error = max_abs_error(layer, o);
  r.best_error = o.function == "square" ? L * L / (8.0 * double(n + 1) * double(n + 1))
                                        : std::numeric_limits<double>::quiet_NaN();
  const Weights& tw = layer.weights();
  for (int64_t u = 0; u < n; ++u) {
    if (tw.w1[size_t(u)] == 0.0f || tw.w2[size_t(u)] == 0.0f) continue;
    const double k = -double(tw.b1[size_t(u)]) / double(tw.w1[size_t(u)]);
    r.kinks.push_back(k);
    if (k > o.a && k < o.b) ++r.kinks_inside;
  }
  std::sort(r.kinks.begin(), r.kinks.end());
  const std::vector<float> out_x = {float(o.a - L), float(o.a - L / 2), float(o.b + L / 2), float(o.b + L)};
  const std::vector<float> out_y = predict(layer, out_x, o.threads, o.isa);
  for (size_t i = 0; i < out_x.size(); ++i)
    r.outside.push_back({double(out_x[i]), target_function(o.function, out_x[i]), double(out_y[i])});

  // Chart over [a - L/2, b + L/2].
  const std::vector<float> px = grid(o.a - L / 2, o.b + L / 2, 801);
  const std::vector<float> py = predict(layer, px, o.threads, o.isa);
  plot::Series target{"target f(x) = " + function_formula(o.function, true), {}, {}, "#222222"}, fit{"FFN, " + std::to_string(n) + " ReLU units", {}, {}, "#d62728"};
  fit.dash = "6 3";
  for (size_t i = 0; i < px.size(); ++i) {
    target.x.push_back(px[i]);
    target.y.push_back(target_function(o.function, px[i]));
    fit.x.push_back(px[i]);
    fit.y.push_back(py[i]);
  }
  char title[200];
  std::snprintf(title, sizeof title, "f(x) = %s with %lld ReLU units: max error %.3g on [%g, %g]%s",
                function_formula(o.function, true).c_str(),
                (long long)n, r.max_error, o.a, o.b,
                std::isnan(r.best_error) ? "" : (", best possible " + slope_text(r.best_error, "%.3g")).c_str());
  r.chart.title = title;
  r.chart.xlabel = "x   (" + std::to_string(r.kinks_inside) + " kinks inside the interval)";
  r.chart.ylabel = "f(x)";
  r.chart.band = std::array<double, 2>{o.a, o.b};
  r.chart.band_name = "the training interval";
  r.chart.series = {target, fit};
  r.chart.vlines = r.kinks;
  r.chart.vlines_name = "kinks";
  r.chart.x_range = std::array<double, 2>{o.a - L / 2, o.b + L / 2};
  return r;
}

namespace {

// Least-squares slope of log(y) against log(x).
double log_log_slope(const std::vector<int64_t>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double lx = std::log(double(x[i])), ly = std::log(y[i]);
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  const double k = double(x.size());
  return (k * sxy - sx * sy) / (k * sxx - sx * sx);
}

}  // namespace

SweepResult approximate_sweep(const ApproximateOptions& base, const std::vector<int64_t>& neurons) {
  SweepResult s;
  for (int64_t n : neurons) {
    ApproximateOptions o = base;
    o.neurons = n;
    const ApproximateResult r = approximate(o);
    s.neurons.push_back(n);
    s.max_error.push_back(r.max_error);
    s.best_error.push_back(r.best_error);
    s.kinks_inside.push_back(r.kinks_inside);
  }
  s.slope = log_log_slope(s.neurons, s.max_error);
  s.best_slope = log_log_slope(s.neurons, s.best_error);

  plot::Series trained{"trained FFN: max error", {}, {}, "#d62728"};
  trained.markers = true;
  plot::Series best{"best with N kinks: L²/(8(N+1)²)", {}, {}, "#1f77b4"};
  best.dash = "6 3";
  for (size_t i = 0; i < s.neurons.size(); ++i) {
    trained.x.push_back(double(s.neurons[i]));
    trained.y.push_back(s.max_error[i]);
    best.x.push_back(double(s.neurons[i]));
    best.y.push_back(s.best_error[i]);
  }
  s.chart.title = function_formula(base.function, true) + " on [" + num(base.a) + ", " + num(base.b) + "]: error against N, fitted slope " +
                  slope_text(s.slope);
  s.chart.xlabel = "N (ReLU units)";
  s.chart.ylabel = "max |f - FFN| on the interval";
  s.chart.log_x = s.chart.log_y = true;
  s.chart.series = {trained};
  if (base.function == "square") s.chart.series.push_back(best);
  return s;
}

}  // namespace ffn::demo
