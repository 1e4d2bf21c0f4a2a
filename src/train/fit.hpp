// The training loop shared by `ffn train` and the demonstrations: a
// held-out split, shuffled minibatches, a learning-rate schedule, progress
// callbacks and a stop flag checked between steps.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "ffn/train.hpp"

namespace ffn::train {

// Rows of inputs and their targets: x [n, d]; targets [n, d] (mse) or labels [n] (xent).
struct Dataset {
  int64_t n = 0, d = 0;
  std::vector<float> x, targets;
  std::vector<int64_t> labels;
};

// A permutation of 0..n-1, a pure function of (seed, round): Fisher-Yates on Philox bits.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t round);

// Splits 0..n-1 into training and held-out rows (a seeded random
// round(n * fraction) rows held out; at least one row stays for training).
void split(int64_t n, double fraction, uint64_t seed, std::vector<int64_t>& train, std::vector<int64_t>& held_out);

// Cosine annealing from lr to 0 over `total` steps (torch's CosineAnnealingLR, eta_min 0).
double cosine_lr(double lr, int64_t step, int64_t total);

struct FitOptions {
  int64_t epochs = 10, batch = 64;
  double lr = 1e-3;
  bool cosine = false;
  uint64_t seed = 0;  // shuffling and dropout masks
};

struct StepReport {
  int64_t epoch, epochs, step, steps_per_epoch;
  double loss, tokens_per_s;
};
struct EpochReport {
  int64_t epoch, epochs;
  double train_loss;  // mean of the epoch's batch losses, weighted by batch size
  double val_loss;    // on the held-out rows after the epoch (NaN without any)
  double seconds, tokens_per_s;
};
struct FitCallbacks {
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EpochReport&)> on_epoch;  // after the epoch (e.g. write a checkpoint)
  const std::atomic<bool>* stop = nullptr;           // checked before every step
};
struct FitResult {
  std::vector<EpochReport> epochs;
  std::vector<double> step_losses;
  bool interrupted = false;
  // Set when a step's loss or a gradient was NaN or Inf: that step was not
  // applied and training stopped there (step_losses ends with its loss).
  std::string diverged;
  int64_t diverged_epoch = 0, diverged_step = 0;  // 1-based
};

FitResult fit(Trainer& trainer, const Dataset& data, const std::vector<int64_t>& train_rows,
              const std::vector<int64_t>& val_rows, const FitOptions& opts, const FitCallbacks& cb = {});

// The loss on the given rows in inference mode, in batches of `batch`.
double evaluate(const Trainer& trainer, const Dataset& data, const std::vector<int64_t>& rows, int64_t batch = 4096);

}  // namespace ffn::train
