// ffn — training: optimizers, losses and the output head.
//
//   Optimizer     SGD (momentum, weight decay), Adam (L2 weight decay) and
//                 AdamW (decoupled weight decay), with PyTorch's update rules,
//                 so a run matches torch.optim step for step.
//   mse_loss      mean over all elements of (y - target)², as nn.MSELoss.
//   OutputHead    softmax(y W_vocabᵀ + b_vocab) with the cross-entropy against
//                 integer labels, averaged over tokens, as nn.CrossEntropyLoss
//                 on the logits; computed with log-sum-exp (no overflow for any
//                 finite logits), forward and backward.
//   Trainer       one optimizer step = forward, loss, backward, update, over
//                 the layer's parameters and the head's; with a Team, data
//                 parallel, with the one-process result to the bit.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn {

enum class OptimizerKind { sgd, adam, adamw };
std::string_view to_string(OptimizerKind k);
OptimizerKind parse_optimizer(std::string_view s, std::string_view what = "optimizer");

// Hyperparameters are doubles, as torch.optim's Python floats: 1 - beta and
// the bias corrections are formed in double, then used in float32 updates.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  double lr = 1e-3;
  double momentum = 0.0;      // SGD only
  double weight_decay = 0.0;  // SGD and Adam: added to the gradient (L2); AdamW: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam and AdamW

  // Throws Error naming the field if a value is out of range.
  void validate() const;
};

// A parameter tensor and its gradient, as flat float arrays of equal size.
struct ParamRef {
  float* value;
  const float* grad;
  size_t size;
};

class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& cfg);
  // Updates every parameter in place from its gradient. The list must name the
  // same tensors (same sizes, same order) at every call: the state (momentum,
  // moments) is kept per position. Elementwise, so the result is the same for
  // any number of threads (0: all).
  void step(std::span<const ParamRef> params, int threads = 1);
  void set_lr(double lr) { cfg_.lr = lr; }
  const OptimizerConfig& config() const { return cfg_; }
  int64_t steps() const { return t_; }

 private:
  OptimizerConfig cfg_;
  int64_t t_ = 0;
  std::vector<std::vector<float>> m_, v_;  // momentum buffer (SGD) or first moment; second moment
};

// The layer's parameters and their gradients, paired in a fixed order
// (w1, b1, wg, bg, w2, b2, γ, β), absent ones skipped.
std::vector<ParamRef> param_refs(Weights& values, const Weights& grads);

// Mean squared error over n elements; writes dL/dy into dy when it is not null.
double mse_loss(const float* y, const float* target, int64_t n, float* dy);
// The sum over n elements of (y - target)², in order, with dy that of the
// mean over `mean_over` elements: a slice of a batch of mean_over elements.
double mse_sum(const float* y, const float* target, int64_t n, int64_t mean_over, float* dy);

// The output layer that turns the model's vectors into probabilities over a
// vocabulary: p = softmax(y Wᵀ + b), W [vocab, d_model], b [vocab].
struct OutputHead {
  int64_t vocab = 0, d_model = 0;
  std::vector<float> weight, bias;

  // nn.Linear's initialization, U(-1/√d_model, 1/√d_model), deterministic in seed.
  static OutputHead init(int64_t vocab, int64_t d_model, uint64_t seed);
  // Zero-filled head of the same sizes (for gradients).
  OutputHead zeros_like() const;

  // The sum over the t tokens of -log p[label] (in token order), with dy and
  // grads those of the mean over `mean_over` tokens: a slice of a batch of
  // mean_over tokens. cross_entropy is this sum over t, divided by t.
  double cross_entropy_sum(const float* y, const int64_t* labels, int64_t t, int64_t mean_over, float* dy,
                           OutputHead* grads, int threads = 0) const;
  // Mean over the t tokens of -log p[label]. Labels must lie in [0, vocab)
  // (throws Error naming the first one that does not). With dy, writes
  // dL/dy [t, d_model]; with grads, overwrites them with dL/dW and dL/db.
  // logits, when not null, receives y Wᵀ + b [t, vocab].
  double cross_entropy(const float* y, const int64_t* labels, int64_t t, float* dy, OutputHead* grads,
                       int threads = 0, float* logits = nullptr) const;
  // Predicted class (arg max of the logits) per token.
  std::vector<int64_t> predict(const float* y, int64_t t, int threads = 0) const;

 private:
  double cross_entropy_impl(const float* y, const int64_t* labels, int64_t t, int64_t mean_over, float* dy,
                            OutputHead* grads, int threads, float* logits) const;
};

enum class LossKind { mse, xent };
std::string_view to_string(LossKind k);
LossKind parse_loss(std::string_view s, std::string_view what = "loss");

// A batch: x [n, d_model]; targets [n, d_model] for mse, labels [n] for xent.
struct Batch {
  const float* x = nullptr;
  const float* targets = nullptr;
  const int64_t* labels = nullptr;
  int64_t n = 0;
};

// Data parallelism: the processes that train one model together, each on
// its share of every batch. src/dist provides one over MPI (dist::MpiTeam);
// any other transport can implement it.
class Team {
 public:
  virtual ~Team() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: data[n] on every rank becomes the sum over the ranks, added
  // over the ranks' fixed binary tree (split [0, P) in the middle, sum each
  // half, add the halves), the same bits on every rank.
  virtual void sum_tree(float* data, int64_t n) const = 0;
  // Collective: every rank's values, rank-major, on every rank.
  virtual std::vector<double> all_gather(const std::vector<double>& mine) const = 0;
  // Collective: whether any rank passed true.
  virtual bool any(bool mine) const = 0;
  // Collective: one line on what the sums cost so far (for rank 0 to print); may be empty.
  virtual std::string summary() const { return ""; }
};

// Every training step cuts its batch of n rows into kTokenSlices slices,
// slice k = rows [n·k/4, n·(k+1)/4); the weight gradients and the loss are
// summed per slice and the slices' sums added over their tree,
// (s0 + s1) + (s2 + s3) (RunOptions::token_slices). A team of P ranks (P
// dividing kTokenSlices) gives rank r slices [4r/P, 4(r+1)/P), a subtree, and
// adds the ranks' sums over the same tree: every rank holds the gradients of
// one process, bit for bit, and makes the same update.
constexpr int kTokenSlices = 4;

// Trains a layer (and, for cross-entropy, its head) in place.
class Trainer {
 public:
  // head is required for LossKind::xent and ignored for mse.
  Trainer(FeedForward& layer, std::optional<OutputHead> head, LossKind loss, const OptimizerConfig& opt,
          int threads = 0, Isa isa = Isa::automatic);
  // Forward (training mode: dropout on, masks from dropout_seed), loss,
  // backward and one optimizer update. Returns the batch's loss before the update.
  // A batch whose loss or any gradient is NaN or Inf is not applied: the
  // weights stay as they were and diverged() says why until the next step.
  double step(const Batch& b, uint64_t dropout_seed);
  // Empty, or what made the last step non-finite ("loss is nan",
  // "gradient of linear1.weight is inf").
  const std::string& diverged() const { return diverged_; }
  // The loss on a batch in inference mode (no dropout, no update).
  double evaluate(const Batch& b) const;
  void set_lr(double lr) { opt_.set_lr(lr); }
  // Data parallel from the next step: every rank passes the same batch to
  // step() and computes its slices (above); team->size() must divide
  // kTokenSlices (else Error). Null: one process. The team must outlive the
  // trainer's steps.
  void set_team(const Team* team);
  const Team* team() const { return team_; }
  const FeedForward& layer() const { return layer_; }
  const std::optional<OutputHead>& head() const { return head_; }
  int64_t steps() const { return opt_.steps(); }

 private:
  FeedForward& layer_;
  std::optional<OutputHead> head_;
  LossKind loss_;
  Optimizer opt_;
  int threads_;
  Isa isa_;
  const Team* team_ = nullptr;
  // Reused between steps.
  Weights grads_;
  std::optional<OutputHead> head_grads_;
  std::vector<OutputHead> head_slice_grads_;  // one per slice of this rank but the first
  std::vector<float> y_, dy_, dx_;
  ForwardCache cache_;
  std::string diverged_;
};

// ---- the training loop ----------------------------------------------------------
namespace train {
// The training loop shared by `ffn train` and the demonstrations: a
// held-out split, shuffled minibatches, a learning-rate schedule, progress
// callbacks and a stop flag checked between steps.


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

}  // namespace train

}  // namespace ffn
