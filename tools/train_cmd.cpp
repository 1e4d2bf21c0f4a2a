// ffn train: fits a layer (and, for cross-entropy, an output head) to data.
//
// Shuffled minibatches, a held-out split, progress on a terminal (plain lines
// otherwise), a checkpoint written atomically after every epoch, a loss-curve
// SVG, and Ctrl-C (SIGINT) or SIGTERM stopping after the current step with the
// weights of the last complete step written (exit status 130).
//
// Under mpirun (built with MPI), data parallel: every rank reads the data,
// computes its slices of each batch (Trainer::set_team) and makes the same
// update; rank 0 alone prints and writes. The loss curve and the weights are
// those of one process, bit for bit, for 1, 2 or 4 ranks.
#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "ffn/train.hpp"
#include "plot/svg.hpp"

namespace ffn::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
  // A second Ctrl-C ends the program at once (removing a temporary file
  // being written, as outside training).
  io::remove_temporaries_on_signals();
}

struct TrainArgs {
  std::string data, targets, loss = "mse", init, prefix;
  ArchitectureArgs arch;
  std::string optimizer = "adam", schedule = "constant", output, plot;
  int64_t vocab = 0, d_ff = 0, epochs = 10, batch = 64;
  double lr = 1e-3, momentum = 0.0, weight_decay = 0.0;
  float dropout = 0.0f;
  double val_fraction = 0.1;
  uint64_t seed = 0;
  int threads = 0;
  Isa isa = Isa::automatic;  // --isa
  bool check_finite = false;
};

std::string default_plot_path(const std::string& output) {
  fs::path p(output);
  if (p.extension() == ".safetensors") p.replace_extension("");
  return p.string() + ".loss.svg";
}

// A .npy of rows: [N, d] or [B, S, d] flattened to N = B·S rows.
int64_t rows_of(const std::vector<int64_t>& shape, const std::string& path, const char* what) {
  if (shape.size() != 2 && shape.size() != 3)
    throw Error(path + ": " + what + " has shape " + shape_str(shape) + ", expected [N, d_model] or [B, S, d_model]");
  return shape.size() == 2 ? shape[0] : shape[0] * shape[1];
}

OutputHead head_from_file(const SafetensorsFile& f, const std::string& path, int64_t d) {
  auto w = f.tensors.find("head.weight");
  auto b = f.tensors.find("head.bias");
  if (w == f.tensors.end() || b == f.tensors.end())
    throw Error(path + ": no output head (tensors 'head.weight' and 'head.bias'), needed by --loss xent without --vocab");
  if (w->second.shape.size() != 2 || w->second.shape[1] != d || b->second.shape != std::vector<int64_t>{w->second.shape[0]})
    throw Error(path + ": head.weight " + shape_str(w->second.shape) + " and head.bias " + shape_str(b->second.shape) +
                " do not fit, expected [V, " + std::to_string(d) + "] and [V]");
  OutputHead h;
  h.vocab = w->second.shape[0];
  h.d_model = d;
  h.weight = w->second.data;
  h.bias = b->second.data;
  return h;
}

// The layer (under the --init file's names), the --init file's other tensors
// (`extra`, e.g. attention weights, unchanged) and the head.
void save(const FeedForward& layer, const std::optional<OutputHead>& head, const std::string& path,
          const SafetensorsFile& extra) {
  SafetensorsFile f = layer.to_safetensors(extra);
  if (head) {
    f.tensors["head.weight"] = NamedTensor{{head->vocab, head->d_model}, head->weight};
    f.tensors["head.bias"] = NamedTensor{{head->vocab}, head->bias};
    f.metadata["ffn.head"] = "softmax";
  }
  write_safetensors(path, f);
}

// Every parameter of the layer and the head is finite.
bool all_finite(const Trainer& t) {
  for (const std::vector<float>* v : t.layer().weights().all())
    for (float e : *v)
      if (!std::isfinite(e)) return false;
  if (t.head())
    for (const std::vector<float>* v : {&t.head()->weight, &t.head()->bias})
      for (float e : *v)
        if (!std::isfinite(e)) return false;
  return true;
}

// One status line on a terminal, rewritten in place.
class Progress {
 public:
  explicit Progress(bool shown) : tty_(shown && isatty(STDERR_FILENO)) {}
  void step(const train::StepReport& s) {
    if (!tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (s.step != s.steps_per_epoch && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const int width = 30;
    const int filled = int(double(width) * double(s.step) / double(s.steps_per_epoch));
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '.');
    std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s] %3.0f%%  loss %.6g  %.0f tokens/s", (long long)s.epoch,
                 (long long)s.epochs, bar.c_str(), 100.0 * double(s.step) / double(s.steps_per_epoch), s.loss,
                 s.tokens_per_s);
    std::fflush(stderr);
    dirty_ = true;
  }
  void clear() {
    if (dirty_) std::fprintf(stderr, "\r\033[K");
    dirty_ = false;
  }

 private:
  bool tty_;
  bool dirty_ = false;
  std::chrono::steady_clock::time_point last_{};
};

plot::LineChart loss_chart(const train::FitResult& r, int64_t steps_per_epoch, const std::string& loss) {
  plot::LineChart c;
  c.title = "ffn train: " + loss + " loss";
  c.xlabel = "epoch";
  c.ylabel = loss + " loss";
  plot::Series steps{"training batches", {}, {}, "#c7c7c7"}, train{"training (epoch mean)", {}, {}, "#1f77b4"},
      held{"held-out", {}, {}, "#d62728"};
  train.markers = held.markers = true;
  for (size_t i = 0; i < r.step_losses.size(); ++i) {
    steps.x.push_back(double(i + 1) / double(steps_per_epoch));
    steps.y.push_back(r.step_losses[i]);
  }
  bool any_held = false;
  for (const auto& e : r.epochs) {
    train.x.push_back(double(e.epoch));
    train.y.push_back(e.train_loss);
    if (std::isfinite(e.val_loss)) {
      held.x.push_back(double(e.epoch));
      held.y.push_back(e.val_loss);
      any_held = true;
    }
  }
  bool positive = true;
  for (double v : r.step_losses) positive = positive && v > 0;
  c.log_y = positive;
  c.series = {steps, train};
  if (any_held) c.series.push_back(held);
  return c;
}

// Everything a run needs, checked: options, data, the layer and its head.
struct Setup {
  LossKind loss = LossKind::mse;
  OptimizerConfig oc;
  std::string plot_path;
  train::Dataset data;
  std::optional<FeedForward> layer;
  std::optional<OutputHead> head;
  std::vector<int64_t> train_rows, val_rows;
  SafetensorsFile extra;  // the --init file's other tensors, written with every checkpoint
  // The first non-finite value among the training rows and among the
  // held-out rows (data or float targets), named; empty if none.
  std::string bad_train, bad_val;
};

// The lowest of `rows` whose data or float targets hold a NaN or Inf, named
// by its first such value (file, row, feature, value), or "". One pass.
std::string first_non_finite(const train::Dataset& data, const std::vector<int64_t>& rows, const TrainArgs& a,
                             int64_t seq) {
  const std::pair<const std::vector<float>*, const std::string*> arrays[] = {{&data.x, &a.data},
                                                                             {&data.targets, &a.targets}};
  auto bad_at = [&](const std::vector<float>& v, int64_t r) -> int64_t {  // first bad feature of row r, or -1
    if (v.empty()) return -1;
    const float* row = v.data() + r * data.d;
    for (int64_t j = 0; j < data.d; ++j)
      if (!std::isfinite(row[j])) return j;
    return -1;
  };
  int64_t first = -1;
  for (int64_t r : rows)
    if ((first < 0 || r < first) && (bad_at(data.x, r) >= 0 || bad_at(data.targets, r) >= 0)) first = r;
  if (first < 0) return "";
  const std::string at =
      seq > 0 ? " (sequence " + std::to_string(first / seq) + ", position " + std::to_string(first % seq) + ")" : "";
  for (const auto& [v, file] : arrays)
    if (const int64_t j = bad_at(*v, first); j >= 0)
      return *file + ": row " + std::to_string(first) + at + ", feature " + std::to_string(j) + " is " +
             kind_of((*v)[size_t(first * data.d + j)]);
  return "";
}

Setup prepare(const TrainArgs& a, bool lead) {
  Setup st;
  // Options first: every flag is checked before any file is read.
  st.loss = parse_loss(a.loss, "--loss");
  const LossKind loss = st.loss;
  OptimizerConfig& oc = st.oc;
  oc.kind = parse_optimizer(a.optimizer, "--optimizer");
  oc.lr = a.lr;
  oc.momentum = a.momentum;
  oc.weight_decay = a.weight_decay;
  try {
    oc.validate();
  } catch (const Error& e) {
    const std::string m = e.what();
    const char* flag = m.rfind("learning rate", 0) == 0 ? "--lr" : m.rfind("momentum", 0) == 0 ? "--momentum" : "--weight-decay";
    throw Error(flag + (": " + m));
  }
  if (a.momentum != 0.0 && oc.kind != OptimizerKind::sgd) throw Error("--momentum: applies to --optimizer sgd only");
  if (a.schedule != "constant" && a.schedule != "cosine")
    throw Error("--lr-schedule: expected constant or cosine, got '" + a.schedule + "'");
  if (a.epochs < 1) throw Error("--epochs: expected a positive integer, got " + std::to_string(a.epochs));
  if (a.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(a.batch));
  if (!(a.val_fraction >= 0.0 && a.val_fraction < 1.0))
    throw Error("--val-fraction: expected a number in [0, 1), got " + num(a.val_fraction));
  if (!(a.dropout >= 0.0f && a.dropout < 1.0f)) throw Error("--dropout: expected a probability in [0, 1), got " + num(a.dropout));
  if (a.threads < 0 || a.threads > kMaxThreads) throw Error("--threads: expected 0.." + std::to_string(kMaxThreads));
  if (loss == LossKind::mse && a.vocab != 0) throw Error("--vocab: applies to --loss xent only");
  if (a.vocab < 0 || a.vocab > 10'000'000)
    throw Error("--vocab: expected a positive integer up to 10000000, got " + std::to_string(a.vocab));
  if (a.d_ff < 0) throw Error("--d-ff: expected a positive integer, got " + std::to_string(a.d_ff));
  if (!a.prefix.empty() && a.init.empty()) throw Error("--prefix: applies with --init only");
  st.plot_path = a.plot.empty() ? default_plot_path(a.output) : a.plot;
  const std::string& plot_path = st.plot_path;
  if (lead) {  // rank 0 alone writes (under mpirun every rank learns its verdict)
    io::check_writable_target(a.output);
    io::check_writable_target(plot_path);
  }
  check_distinct({{"--output", a.output}, {"--plot", plot_path}});
  const Flags inputs = {{"--data", a.data}, {"--targets", a.targets}, {"--init", a.init}};
  check_not_an_input(a.output, "--output", inputs);
  check_not_an_input(plot_path, "--plot", inputs);

  // Data.
  train::Dataset& data = st.data;
  Array x = read_npy(a.data);
  data.n = rows_of(x.shape, a.data, "data");
  data.d = x.shape.back();
  if (data.n < 1 || data.d < 1)
    throw Error(a.data + ": data has shape " + shape_str(x.shape) + ", expected at least one row of at least one feature");
  data.x = std::move(x.data);
  if (loss == LossKind::mse) {
    // Class labels given to the regression loss are the likely mistake behind
    // integer targets or one target per row: say which flag they need.
    const std::string xent_hint = "; class labels need --loss xent --vocab N";
    Array y;
    try {
      y = read_npy(a.targets);
    } catch (const Error&) {
      std::vector<int64_t> lshape;
      try {
        read_npy_int(a.targets, &lshape);
      } catch (const Error&) {
        throw;  // neither float32 nor integer: the float32 reader's message
      }
      throw Error(a.targets + ": integer targets " + shape_str(lshape) +
                  ", but --loss mse needs float32 targets of the data's shape " + shape_str(x.shape) +
                  xent_hint);
    }
    const std::vector<int64_t> per_row(x.shape.begin(), x.shape.end() - 1);
    if (y.shape != x.shape)
      throw Error(a.targets + ": targets have shape " + shape_str(y.shape) + ", expected the data's shape " +
                  shape_str(x.shape) + " (--loss mse)" + (y.shape == per_row ? xent_hint : ""));
    data.targets = std::move(y.data);
  } else {
    std::vector<int64_t> lshape;
    data.labels = read_npy_int(a.targets, &lshape);
    const std::vector<int64_t> want(x.shape.begin(), x.shape.end() - 1);
    if (lshape != want)
      throw Error(a.targets + ": labels have shape " + shape_str(lshape) + ", expected " + shape_str(want) +
                  " (one class index per row of " + a.data + ", --loss xent)");
  }

  // FeedForward (and head).
  std::optional<FeedForward>& layer = st.layer;
  std::optional<OutputHead>& head = st.head;
  if (!a.init.empty()) {
    LoadOptions lo;
    lo.prefix = a.prefix;
    lo.dropout_hidden = lo.dropout_output = a.dropout;
    a.arch.apply_given(lo);
    layer = FeedForward::load(a.init, lo);
    // Shape flags cannot change a file's layer: refuse one that contradicts it.
    if (a.d_ff && a.d_ff != layer->config().d_ff)
      throw Error("--d-ff " + std::to_string(a.d_ff) + " contradicts " + a.init + " (d_ff=" +
                  std::to_string(layer->config().d_ff) + "); leave it out with --init");
    if (a.arch.no_bias && layer->config().bias)
      throw Error("--no-bias contradicts " + a.init + " (it has biases); leave it out with --init");
    if (lead) note_assumed(a.init, layer->assumed_settings());
    if (layer->config().d_model != data.d)
      throw Error(a.data + ": rows have " + std::to_string(data.d) + " features, expected d_model=" +
                  std::to_string(layer->config().d_model) + " (from " + a.init + ")");
    if (loss == LossKind::xent) {
      const SafetensorsFile f = read_safetensors(a.init);
      if (f.tensors.count("head.weight")) {
        head = head_from_file(f, a.init, data.d);
        if (a.vocab && a.vocab != head->vocab)
          throw Error("--vocab " + std::to_string(a.vocab) + " differs from the head in " + a.init + " (vocab " +
                      std::to_string(head->vocab) + ")");
      }
    }
  } else {
    Config cfg;
    cfg.d_model = data.d;
    cfg.d_ff = a.d_ff ? a.d_ff : 4 * data.d;
    // Weights, gradients, two optimizer moments and the packed copies.
    check_memory(6.0 * 4.0 * 3.0 * double(cfg.d_model) * double(cfg.d_ff), "--d-ff with d_model " + std::to_string(data.d));
    a.arch.apply(cfg);
    cfg.dropout_hidden = cfg.dropout_output = a.dropout;
    layer.emplace(cfg, a.seed);
  }
  if (loss == LossKind::xent && !head) {
    if (a.vocab < 1) throw Error("--vocab: required with --loss xent (number of classes)");
    // Head, its gradient per token slice and two moments, plus a batch of logits and their gradient.
    check_memory(4.0 * double(a.vocab) * ((3.0 + kTokenSlices) * double(data.d) + 2.0 * double(a.batch)),
                 "--vocab x d_model, --batch");
    head = OutputHead::init(a.vocab, data.d, a.seed);
  }
  if (head) {
    for (size_t i = 0; i < data.labels.size(); ++i) {
      if (data.labels[i] < 0 || data.labels[i] >= head->vocab)
        throw Error(a.targets + ": label " + std::to_string(data.labels[i]) + " at row " + std::to_string(i) +
                    " is outside 0.." + std::to_string(head->vocab - 1) + " (vocab " + std::to_string(head->vocab) + ")");
    }
  }

  train::split(data.n, a.val_fraction, a.seed, st.train_rows, st.val_rows);
  // Non-finite data, found once at load (one pass): --check-finite refuses
  // it; otherwise a divergence or a NaN held-out loss is blamed on it by name.
  const int64_t seq = x.shape.size() == 3 ? x.shape[1] : 0;
  st.bad_train = first_non_finite(data, st.train_rows, a, seq);
  st.bad_val = first_non_finite(data, st.val_rows, a, seq);
  if (a.check_finite) {
    const std::string& bad = st.bad_train.empty() ? st.bad_val : st.bad_train;
    if (!bad.empty()) throw Error(bad + " (--check-finite)");
    if (!a.init.empty()) check_finite_weights(layer->config(), layer->weights(), layer->names(), a.init);
    if (head)
      for (const std::vector<float>* v : {&head->weight, &head->bias})
        for (size_t i = 0; i < v->size(); ++i)
          if (!std::isfinite((*v)[i]))
            throw Error(a.init + ": tensor 'head." + (v == &head->weight ? "weight" : "bias") + "' is " +
                        kind_of((*v)[i]) + " at flat index " + std::to_string(i) + " (--check-finite)");
  }
  if (!a.init.empty()) st.extra = layer->unowned(a.init);
  return st;
}

// FNV-1a over the 32-bit words of v: equal data on two ranks, equal sums.
template <typename T>
uint32_t checksum(const std::vector<T>& v, uint32_t h = 2166136261u) {
  const size_t words = v.size() * sizeof(T) / 4;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < words; ++i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    h = (h ^ w) * 16777619u;
  }
  return h;
}

// What every rank of a data-parallel run must agree on: each step's
// collectives follow from the sizes, and the weights from everything.
// Names as the user would look for them; values exact in a double.
std::vector<std::pair<std::string, double>> fingerprint(const TrainArgs& a, const Setup& st) {
  const Config& c = st.layer->config();
  uint32_t weights = 2166136261u;
  for (const std::vector<float>* w : st.layer->weights().all()) weights = checksum(*w, weights);
  if (st.head) weights = checksum(st.head->bias, checksum(st.head->weight, weights));
  return {{"the data's rows", double(st.data.n)},
          {"the data's features", double(st.data.d)},
          {"the data (checksum)", double(checksum(st.data.x))},
          {"the targets (checksum)", double(st.data.labels.empty() ? checksum(st.data.targets) : checksum(st.data.labels))},
          {"d_ff", double(c.d_ff)},
          {"the layer's settings (activation, norm, bias)",
           double(int(c.activation) * 64 + int(c.norm) * 8 + int(c.norm_type) * 2 + int(c.bias))},
          {"the initial weights (checksum)", double(weights)},
          {"--vocab", double(st.head ? st.head->vocab : 0)},
          {"--loss", double(int(st.loss))},
          {"--optimizer", double(int(st.oc.kind))},
          {"--lr", a.lr},
          {"--momentum", a.momentum},
          {"--weight-decay", a.weight_decay},
          {"--lr-schedule", a.schedule == "cosine" ? 1.0 : 0.0},
          {"--dropout", double(a.dropout)},
          {"--batch", double(a.batch)},
          {"--epochs", double(a.epochs)},
          {"--val-fraction", a.val_fraction},
          {"--seed (low 32 bits)", double(uint32_t(a.seed))},
          {"--seed (high 32 bits)", double(uint32_t(a.seed >> 32))}};
}

// v in full: integers as integers, other values to the last bit.
std::string exact(double v) {
  char b[40];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// The run on one process (team null) or on every rank of a data-parallel
// team: each rank computes its slices of every batch (Trainer::set_team),
// rank 0 alone prints and writes. agree: collective after every step that
// can fail on some ranks only (throws on every rank if any failed).
int train(const TrainArgs& a, const Team* team, const Agree& agree) {
  const bool lead = !team || team->rank() == 0;
  auto agreed = [&](auto&& step) {
    std::string error;
    try {
      step();
    } catch (const std::exception& e) {
      if (!team) throw;
      error = e.what();
    }
    if (team) agree(error);
  };
  std::optional<Setup> setup;
  agreed([&] { setup.emplace(prepare(a, lead)); });
  Setup& st = *setup;
  const LossKind loss = st.loss;
  const OptimizerConfig& oc = st.oc;
  const std::string& plot_path = st.plot_path;
  const train::Dataset& data = st.data;
  std::optional<FeedForward>& layer = st.layer;
  const std::optional<OutputHead>& head = st.head;
  const std::vector<int64_t>& train_rows = st.train_rows;
  const std::vector<int64_t>& val_rows = st.val_rows;
  const SafetensorsFile& extra = st.extra;
  // Under mpirun, --threads 0 shares the cores among the ranks.
  const int threads = a.threads > 0 || !team ? a.threads : std::max(1, omp_get_num_procs() / team->size());
  if (team) {  // every rank sees every rank's values, so all find the same difference
    const auto mine = fingerprint(a, st);
    std::vector<double> values;
    for (const auto& item : mine) values.push_back(item.second);
    const std::vector<double> all = team->all_gather(values);
    std::string error;
    for (int r = 1; r < team->size() && error.empty(); ++r)
      for (size_t i = 0; i < mine.size() && error.empty(); ++i)
        if (all[r * mine.size() + i] != all[i])
          error = mine[i].first + " differs across ranks: rank 0 has " + exact(all[i]) + ", rank " +
                  std::to_string(r) + " has " + exact(all[r * mine.size() + i]) +
                  " (every rank must train on the same data and settings)";
    agree(error);
  }
  Trainer trainer(*layer, head, loss, oc, threads, a.isa);
  agreed([&] { trainer.set_team(team); });
  train::FitOptions fo;
  fo.epochs = a.epochs;
  fo.batch = a.batch;
  fo.lr = a.lr;
  fo.cosine = a.schedule == "cosine";
  fo.seed = a.seed;
  const int64_t steps_per_epoch = (int64_t(train_rows.size()) + a.batch - 1) / a.batch;

  if (lead)
    std::printf("ffn train: %lld rows (%zu training, %zu held out), %lld -> %lld %s, norm %s, %s loss%s, %s lr %g, "
              "batch %lld, %lld epochs%s\n",
              (long long)data.n, train_rows.size(), val_rows.size(), (long long)layer->config().d_model,
              (long long)layer->config().d_ff, std::string(to_string(layer->config().activation)).c_str(),
              std::string(to_string(layer->config().norm)).c_str(), a.loss.c_str(),
              head ? (" over a " + std::to_string(head->vocab) + "-way softmax head").c_str() : "",
              a.optimizer.c_str(), double(a.lr), (long long)a.batch, (long long)a.epochs,
              team ? (", data parallel over " + std::to_string(team->size()) + " ranks x " + std::to_string(threads) +
                      " thread(s)").c_str()
                   : "");
  std::fflush(stdout);

  g_stop.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct Restore {
    ~Restore() { io::remove_temporaries_on_signals(); }
  } restore;

  Progress progress(lead);
  // Rank 0 alone writes (atomically, as one process); every rank learns whether it could.
  auto write = [&](auto&& what) { agreed([&] { if (lead) what(); }); };
  auto checkpoint = [&] { write([&] { save(trainer.layer(), trainer.head(), a.output, extra); }); };
  train::FitCallbacks cb;
  bool warned_val = false;
  cb.stop = &g_stop;
  cb.on_step = [&](const train::StepReport& s) { progress.step(s); };
  cb.on_epoch = [&](const train::EpochReport& e) {
    progress.clear();
    // Checkpoint: the file is always a complete epoch or step, never non-finite weights.
    if (all_finite(trainer)) checkpoint();
    if (!lead) return;
    // With held-out rows the column is always there: "nan" rather than a
    // silently missing column, and the first time the non-finite row is named.
    char held[48] = "";
    if (!val_rows.empty()) std::snprintf(held, sizeof held, "  held-out loss %.6g", e.val_loss);
    if (!val_rows.empty() && !std::isfinite(e.val_loss) && !warned_val) {
      warned_val = true;
      std::fprintf(stderr, "ffn train: the held-out loss is %s: %s\n", std::isnan(e.val_loss) ? "NaN" : "infinite",
                   setup->bad_val.empty() ? "the held-out rows are finite, the layer's output is not"
                                          : (setup->bad_val + " (a held-out row; --check-finite refuses such data)").c_str());
    }
    std::printf("epoch %lld/%lld  training loss %.6g%s  %.0f tokens/s  %.2f s\n", (long long)e.epoch,
                (long long)e.epochs, e.train_loss, held, e.tokens_per_s, e.seconds);
    std::fflush(stdout);
  };
  train::FitResult r = train::fit(trainer, data, train_rows, val_rows, fo, cb);
  progress.clear();
  // Weights that overflowed in an update from finite gradients show up as a
  // non-finite loss at the next step; after the last step, here.
  if (r.diverged.empty() && !r.interrupted && !all_finite(trainer)) {
    r.diverged = "the weights are not finite after the last step";
    r.diverged_epoch = a.epochs;
    r.diverged_step = steps_per_epoch;
  }
  if (!r.diverged.empty() && !r.step_losses.empty() && !std::isfinite(r.step_losses.back())) r.step_losses.pop_back();
  if (!r.step_losses.empty()) write([&] { plot::write_svg(plot_path, plot::render(loss_chart(r, steps_per_epoch, a.loss))); });
  if (team) {
    const std::string cost = team->summary();
    if (lead && !cost.empty()) std::printf("%s\n", cost.c_str());
  }
  if (!r.diverged.empty()) {
    // The step that diverged was not applied: the layer holds the weights of
    // the step before, written unless they are not finite (then the last
    // epoch's checkpoint, if any, stays).
    const int64_t applied = (r.diverged_epoch - 1) * steps_per_epoch + r.diverged_step - 1;
    std::string kept;
    if (applied > 0 && all_finite(trainer)) {
      checkpoint();
      kept = "wrote " + a.output + " (the weights after step " + std::to_string(applied) + ")";
    } else if (fs::exists(a.output) && r.epochs.size() > 0) {
      kept = "kept " + a.output + " (the checkpoint of epoch " + std::to_string(r.epochs.size()) + ")";
    } else {
      kept = "wrote no weights";
    }
    // Non-finite training data is the cause, not the learning rate: say so.
    char lr_hint[96];
    std::snprintf(lr_hint, sizeof lr_hint, "try a lower --lr (now %g)%s", a.lr,
                  oc.kind == OptimizerKind::sgd ? " or --optimizer adam" : "");
    const std::string hint = setup->bad_train.empty()
                                 ? std::string(lr_hint)
                                 : "the data itself is not finite: " + setup->bad_train +
                                       " (a training row; --check-finite refuses such data before training)";
    if (lead)
      std::fprintf(stderr,
                 "ffn train: diverged at step %lld (epoch %lld, step %lld of %lld): %s; %s; %s\n",
                 (long long)((r.diverged_epoch - 1) * steps_per_epoch + r.diverged_step), (long long)r.diverged_epoch,
                 (long long)r.diverged_step, (long long)steps_per_epoch, r.diverged.c_str(), kept.c_str(),
                 hint.c_str());
    return kExitDiverged;
  }
  if (r.interrupted) {
    const int64_t done = int64_t(r.step_losses.size());
    if (done > 0 && done % steps_per_epoch != 0) checkpoint();
    if (lead)
      std::printf("interrupted after %lld steps (epoch %lld, step %lld of %lld): %s\n", (long long)done,
                (long long)(done / steps_per_epoch + 1), (long long)(done % steps_per_epoch),
                (long long)steps_per_epoch,
                done > 0 ? ("wrote " + a.output + " (the weights after the last complete step) and " + plot_path).c_str()
                         : "no step completed, nothing written");
    return 128 + (g_signal.load() ? g_signal.load() : SIGINT);  // 130 for Ctrl-C, 143 for SIGTERM
  }
  if (lead) std::printf("wrote %s and %s\n", a.output.c_str(), plot_path.c_str());
  return 0;
}

int cmd_train(const TrainArgs& a) {
  if (const int ranks = launched_ranks(); ranks > 0) {
#ifdef FFN_HAVE_MPI
    return train_data_parallel([&](const Team& team, const Agree& agree) { return train(a, &team, agree); });
#else
    if (ranks > 1)
      throw Error("ffn train: started by mpirun as one of " + std::to_string(ranks) +
                  " ranks, but this ffn was built without MPI, so each would train alone "
                  "(scripts/setup.sh installs libopenmpi-dev; then cmake -DFFN_MPI=ON)");
#endif
  }
  return train(a, nullptr, {});
}

}  // namespace

Command add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "train a layer (and an output head) on data: --data X.npy --targets Y.npy");
  c->add_option("--data", a->data, "inputs (.npy float32): [N, d_model] or [B, S, d_model]")->required();
  c->add_option("--targets", a->targets,
                "targets: float32, the data's shape (--loss mse); int32/int64 class indices [N] or [B, S] (--loss xent)")
      ->required();
  c->add_option("--loss", a->loss, "mse (default) or xent (cross-entropy over an output head)");
  c->add_option("--vocab", a->vocab, "classes of the output head (--loss xent)");
  c->add_option("--init", a->init, "start from this weights file (and its head) instead of a fresh layer");
  c->add_option("--prefix", a->prefix, "with --init: the layer's tensor name prefix, e.g. encoder.layers.0.");
  c->add_option("--d-ff", a->d_ff, "hidden width of a fresh layer (default 4 x d_model)");
  a->arch.add(c);
  c->add_option("--dropout", a->dropout, "dropout p after the activation and after W2 (default 0)");
  c->add_option("--epochs", a->epochs, "passes over the training rows (default 10)");
  c->add_option("--batch", a->batch, "rows per step (default 64)");
  c->add_option("--lr", a->lr, "learning rate (default 1e-3)");
  c->add_option("--lr-schedule", a->schedule, "constant (default) or cosine (annealed to 0 over the run)");
  c->add_option("--optimizer", a->optimizer, "adam (default), adamw or sgd");
  c->add_option("--momentum", a->momentum, "SGD momentum (default 0)");
  c->add_option("--weight-decay", a->weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay (default 0)");
  c->add_option("--val-fraction", a->val_fraction, "rows held out for the held-out loss (default 0.1)");
  c->add_option("--seed", a->seed, "initialization, split, shuffling and dropout (default 0)")->check(CLI::NonNegativeNumber);
  c->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  c->add_option("--output", a->output, "weights file to write (.safetensors), after every epoch")->required();
  c->add_option("--plot", a->plot, "loss-curve SVG (default: the output's name with .loss.svg)");
  c->add_flag("--check-finite", a->check_finite,
              "refuse data, targets or --init weights holding NaN or Inf, naming the first (one pass at load)");
  return {c,
          [a](const Common& common) {
            a->isa = common.isa;
            return cmd_train(*a);
          },
          Mpi::data_parallel};
}

}  // namespace ffn::cli
