// The seeds' two claims, measured (seed 000):
//   approximate  N ReLU units give N kinks; a 1 → N → 1 ReLU FFN fits x² on a
//                bounded interval with error ~ 1/N², and is one straight line
//                beyond its last kink.
//   interaction  a linear map cannot compute a·b (nor "a > 0.5 and b > 0.5");
//                a small FFN can.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ffn/ffn.hpp"
#include "plot/svg.hpp"

namespace ffn::demo {

struct ApproximateOptions {
  std::string function = "square";  // square, sin (sin(πx)), abs
  int64_t neurons = 8;
  double a = -1.0, b = 1.0;
  std::string init = "spread";       // spread: kinks evenly over [a, b], output by least squares; random: nn.Linear's
  int64_t points = 1025;             // training grid (full batch)
  int64_t steps = 3000;              // Adam steps, cosine-annealed learning rate
  float lr = 3e-3f;
  uint64_t seed = 0;
  int threads = 1;
  Isa isa = Isa::automatic;
};

struct ApproximateResult {
  FeedForward layer;                 // 1 → N → 1, ReLU, biases, norm none
  double start_error = 0;      // max |f - model| on [a, b] before training
  double max_error = 0;        // after training, on a grid 16× finer than the training grid
  double best_error = 0;       // best any continuous PL function with N kinks reaches (square only; NaN otherwise)
  std::vector<double> kinks;   // x where a unit's pre-activation crosses 0 (units with w1 ≠ 0 and w2 ≠ 0)
  int64_t kinks_inside = 0;    // of those, strictly inside (a, b)
  std::vector<std::array<double, 3>> outside;  // x, f(x), model(x) at points outside [a, b]
  plot::LineChart chart;       // target, fit and kinks over [a - L/2, b + L/2]
};

// Throws Error on a bad option (naming the flag).
ApproximateResult approximate(const ApproximateOptions& opts);
double target_function(const std::string& name, double x);
// The function a --function name stands for: "x²", "sin(πx)", "|x|" (ASCII
// "x^2", "sin(pi x)" when !unicode, for the console).
std::string function_formula(const std::string& name, bool unicode);

struct SweepResult {
  std::vector<int64_t> neurons;
  std::vector<double> max_error, best_error;
  std::vector<int64_t> kinks_inside;
  double slope = 0;       // least-squares slope of log(max error) against log(N)
  double best_slope = 0;  // the same for the best possible error (square only; NaN otherwise)
  plot::LineChart chart;
};
SweepResult approximate_sweep(const ApproximateOptions& base, const std::vector<int64_t>& neurons);

struct InteractionOptions {
  int64_t train = 8192, test = 4096;
  int64_t d_ff = 64;
  int64_t epochs = 100, batch = 64;
  float lr = 1e-2f;
  uint64_t seed = 0;
  int threads = 1;
  Isa isa = Isa::automatic;
};

struct InteractionResult {
  FeedForward layer;  // 2 → d_ff → 2, ReLU, norm none; output 0: a·b, output 1: the threshold score
  std::array<double, 3> linear_product{}, linear_threshold{};  // coefficients of a, b, 1
  double linear_r2 = 0, ffn_r2 = 0;            // a·b on the test set
  double linear_accuracy = 0, ffn_accuracy = 0, majority_accuracy = 0;  // threshold on the test set
  double final_train_loss = 0;
  std::vector<plot::Heatmap> maps;  // a·b and threshold, linear and FFN, over [-1, 1]²
};
InteractionResult interaction(const InteractionOptions& opts);

}  // namespace ffn::demo
