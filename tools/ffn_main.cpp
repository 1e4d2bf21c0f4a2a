// ffn — command-line program: run, grad, init, quantize, bench (here), train and demo
// (tools/train_cmd.cpp, tools/demo_cmd.cpp), encode and encode-grad (tools/encoder_cmd.cpp), embed
// (tools/embed_cmd.cpp).
// Exit status: 0 success, 2 bad input (one line on stderr naming the file,
// tensor or flag), 1 internal error or a failed self-check, 3 `ffn train`
// diverged (a NaN or Inf loss or gradient), 130/143 interrupted.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "commands.hpp"
#include "ffn/causal_lm.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "ffn/random.hpp"

namespace ffn::cli {

namespace fs = std::filesystem;

Input read_input(const std::string& input, const std::string& lengths, Layout layout, int64_t d,
                 const std::string& weights) {
  Input in;
  in.x = read_npy(input);
  const auto& s = in.x.shape;
  const std::string expect = layout == Layout::tokens ? "[T, d_model] or [B, S, d_model]" : "[d_model, S] or [B, d_model, S]";
  if (s.size() != 2 && s.size() != 3)
    throw Error(input + ": input has shape " + shape_str(s) + " (" + std::to_string(s.size()) + "-D), expected " + expect);
  const int64_t width = layout == Layout::tokens ? s.back() : s[s.size() - 2];
  if (width != d)
    throw Error(input + ": input has shape " + shape_str(s) + ", expected " + expect + " with d_model=" +
                std::to_string(d) + " (from " + weights + ")");
  in.shape.layout = layout;
  in.shape.batch = s.size() == 3 ? s[0] : 1;
  in.shape.seq = layout == Layout::tokens ? s[s.size() - 2] : s.back();
  if (!lengths.empty()) {
    std::vector<int64_t> lshape;
    in.shape.lengths = read_npy_int(lengths, &lshape);
    if (lshape.size() != 1 || lshape[0] != in.shape.batch)
      throw Error(lengths + ": lengths have shape " + shape_str(lshape) + ", expected [" +
                  std::to_string(in.shape.batch) + "] (one per sequence of " + input + ")");
    for (size_t b = 0; b < in.shape.lengths.size(); ++b) {
      const int64_t len = in.shape.lengths[b];
      if (len < 0 || len > in.shape.seq)
        throw Error(lengths + ": length " + std::to_string(len) + " of sequence " + std::to_string(b) +
                    " is outside 0.." + std::to_string(in.shape.seq) + " (S of " + input + ")");
    }
  }
  return in;
}

const char* kind_of(float v) { return std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf"; }

// The first NaN or Inf of an array in the input's shape and layout, at a
// position that is not padding, as "<what> is NaN at token t, feature j"
// (or "sequence b, position s, feature j" for [B, S, d] inputs).
void check_finite_tokens(const float* v, const Shape& shape, int64_t d, bool three_d, const std::string& what) {
  const int64_t S = shape.seq;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t len = shape.lengths.empty() ? S : shape.lengths[size_t(b)];
    for (int64_t s = 0; s < len; ++s) {
      for (int64_t j = 0; j < d; ++j) {
        const size_t i = size_t(shape.layout == Layout::tokens ? (b * S + s) * d + j : (b * d + j) * S + s);
        if (std::isfinite(v[i])) continue;
        const std::string where = three_d ? "sequence " + std::to_string(b) + ", position " + std::to_string(s)
                                          : "token " + std::to_string(b * S + s);
        throw Error(what + " is " + kind_of(v[i]) + " at " + where + ", feature " + std::to_string(j) +
                    " (--check-finite)");
      }
    }
  }
}

int threads_or_throw(int t) {
  if (t < 0 || t > kMaxThreads)
    throw Error("--threads: expected 0.." + std::to_string(kMaxThreads) + " (0 = all), got " + std::to_string(t));
  return t;
}

GradTargets grad_target_paths(const std::string& output_dir, bool memory) {
  GradTargets t;
  t.dir = output_dir;
  t.grad_input = (fs::path(output_dir) / "grad_input.npy").string();
  t.grads = (fs::path(output_dir) / "grads.safetensors").string();
  if (memory) t.grad_memory = (fs::path(output_dir) / "grad_memory.npy").string();
  return t;
}

GradTargets grad_targets(const std::string& output_dir, const Flags& inputs, bool memory) {
  try {
    io::check_writable_directory(output_dir);
  } catch (const Error& e) {
    throw Error(std::string("--output-dir ") + e.what());
  }
  const GradTargets t = grad_target_paths(output_dir, memory);
  // Files already there are replaced: they must be regular files.
  std::error_code ec;
  for (const std::string* f : {&t.grad_input, &t.grads, &t.grad_memory}) {
    if (f->empty()) continue;
    check_not_an_input(*f, "--output-dir", inputs);
    const fs::file_status st = fs::status(*f, ec);
    if (fs::exists(st) && !fs::is_regular_file(st)) throw Error(*f + ": cannot write: exists and is not a regular file");
  }
  return t;
}

void write_gradient_pair(const GradTargets& t, const Array& dx, const std::function<void(const std::string&)>& save_grads,
                         const Array* dmemory) {
  if (t.grad_memory.empty() != (dmemory == nullptr)) throw std::logic_error("write_gradient_pair: grad_memory");
  std::error_code ec;
  // Both files are written completely into a staging directory inside D,
  // then renamed into place: a failure leaves neither a new file nor a
  // mismatched pair (nor a directory this run created).
  // SIGINT/SIGTERM/SIGHUP wait until the directories made below are registered
  // for removal, so no signal can leave one behind.
  std::optional<io::SignalBlock> hold(std::in_place);
  const bool created = !fs::exists(t.dir, ec);
  if (created) {
    fs::create_directories(t.dir, ec);
    if (ec) throw Error("--output-dir " + t.dir + ": cannot create: " + ec.message());
  }
  std::string stage_tmpl = (fs::path(t.dir) / ".ffn-grad-XXXXXX").string();
  std::vector<char> buf(stage_tmpl.begin(), stage_tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    const std::string why = io::errno_text();
    if (created) fs::remove(t.dir, ec);
    throw Error("--output-dir " + t.dir + ": cannot write: " + why);
  }
  const fs::path stage(buf.data());
  // A signal from here on removes the staging directory (and D if this run made it).
  io::remove_on_signal({(stage / "grad_input.npy").string(), (stage / "grads.safetensors").string(),
                        (stage / "grad_memory.npy").string(), stage.string(), created ? t.dir : std::string()});
  struct Unregister {
    ~Unregister() { io::remove_on_signal({}); }
  } unregister;
  hold.reset();  // a signal that arrived meanwhile is handled now
  try {
    write_npy((stage / "grad_input.npy").string(), dx);
    save_grads((stage / "grads.safetensors").string());
    if (dmemory) write_npy((stage / "grad_memory.npy").string(), *dmemory);
    fs::rename(stage / "grad_input.npy", t.grad_input);
    if (dmemory) fs::rename(stage / "grad_memory.npy", t.grad_memory);
    fs::rename(stage / "grads.safetensors", t.grads);
  } catch (const std::exception& e) {
    fs::remove_all(stage, ec);
    if (created) fs::remove(t.dir, ec);
    if (dynamic_cast<const Error*>(&e)) throw;
    throw Error("--output-dir " + t.dir + ": cannot write: " + e.what());
  }
  fs::remove_all(stage, ec);
}

// The first NaN or Inf of any parameter (or gradient), with its index.
void check_finite_weights(const Config& cfg, const Weights& w, const TensorNames& names, const std::string& what) {
  for (size_t t = 0; t < 8; ++t) {
    const std::vector<float>* v = w.all()[t];
    const std::string* name = names.all()[t];
    for (size_t i = 0; i < v->size(); ++i) {
      if (std::isfinite((*v)[i])) continue;
      // 2-D tensors are the projections: [d_ff, d_model] or [d_model, d_ff].
      const bool matrix = v == &w.w1 || v == &w.wg || v == &w.w2;
      const int64_t cols = v == &w.w2 ? cfg.d_ff : cfg.d_model;
      const std::string at = matrix ? "[" + std::to_string(int64_t(i) / cols) + ", " + std::to_string(int64_t(i) % cols) + "]"
                                    : "[" + std::to_string(i) + "]";
      throw Error(what + ": tensor '" + *name + "' is " + kind_of((*v)[i]) + " at " + at + " (--check-finite)");
    }
  }
}

}  // namespace ffn::cli

namespace {

using namespace ffn;
namespace fs = std::filesystem;
using cli::Input;
using cli::check_finite_tokens;
using cli::threads_or_throw;
using cli::kind_of;
using cli::median;


// Options shared by run and grad.
struct LayerArgs {
  std::string weights, prefix, input, lengths, layout = "tokens";
  cli::SettingOverrides settings;
  int threads = 0;
  bool check_finite = false;

  void add(CLI::App* app) {
    app->add_option("--weights", weights, "weights file (safetensors)")->required();
    app->add_option("--prefix", prefix, "tensor name prefix, e.g. encoder.layers.0.");
    app->add_option("--input", input, "input array (.npy float32): [T, d_model], [B, S, d_model] or with --layout ncw [B, d_model, S]")
        ->required();
    settings.add(app);
    app->add_option("--layout", layout, "tokens (default) or ncw (channels first, Conv1d view)");
    app->add_option("--lengths", lengths, "int32/int64 .npy of B sequence lengths; positions past them are padding");
    app->add_option("--threads", threads, "threads, 0 = all cores (default 0)");
    app->add_flag("--check-finite", check_finite,
                  "fail (exit 2, nothing written) at the first NaN or Inf in the input, weights or results");
  }

  // --tensor-parallel: the arguments every rank takes (rank 0 notes assumed settings itself).
  void parallel_args(cli::ParallelArgs& p, LoadOptions lo, int threads) const {
    p.weights = weights, p.input = input, p.lengths = lengths;
    p.layout = parse_layout(layout, "--layout");
    p.load = lo;
    p.threads = threads;
  }

  LoadOptions load_options(float p_hidden, float p_output) const {
    LoadOptions o;
    o.prefix = prefix;
    settings.apply(o);
    o.dropout_hidden = p_hidden;
    o.dropout_output = p_output;
    return o;
  }
};

Input read_input(const LayerArgs& a, const Config& cfg) {
  return cli::read_input(a.input, a.lengths, parse_layout(a.layout, "--layout"), cfg.d_model, a.weights);
}

// ---- --check-finite ------------------------------------------------------------


// ---- run ----------------------------------------------------------------------

struct RunArgs : LayerArgs {
  std::string output, dtype, compute = "fp32";
  bool tensor_parallel = false;
};

// Without MPI the flag exists and says so.
[[noreturn, maybe_unused]] void no_mpi(const char* flag) {
  throw Error(std::string(flag) + ": this ffn was built without MPI (scripts/setup.sh installs libopenmpi-dev; "
              "then cmake -DFFN_MPI=ON)");
}

int cmd_run(const RunArgs& a) {
  if (!a.tensor_parallel) io::check_writable_target(a.output);  // under mpirun: rank 0 checks, all agree
  const int threads = threads_or_throw(a.threads);
  LoadOptions lo = a.load_options(0, 0);
  if (!a.dtype.empty()) lo.weight_dtype = parse_weight_dtype(a.dtype, "--dtype");
  const Compute compute = parse_compute(a.compute, "--compute");
  if (a.tensor_parallel) {
    if (a.check_finite) throw Error("--check-finite: not with --tensor-parallel");
#ifdef FFN_HAVE_MPI
    cli::ParallelRunArgs p;
    a.parallel_args(p, lo, threads);
    p.check_outputs = [&a] {
      io::check_writable_target(a.output);
      cli::check_not_an_input(a.output, "--output", {{"--input", a.input}, {"--weights", a.weights}, {"--lengths", a.lengths}});
    };
    p.output = a.output;
    p.compute = compute;
    return cli::run_tensor_parallel(p);
#else
    no_mpi("--tensor-parallel");
#endif
  }
  const FeedForward layer = FeedForward::load(a.weights, lo);
  cli::note_assumed(a.weights, layer.assumed_settings());
  if (compute == Compute::bf16 && layer.weight_dtype() == WeightDtype::int8)
    throw Error("--compute bf16: needs fp32, bf16 or fp16 weights (" + a.weights + " holds int8 weights)");
  const Input in = read_input(a, layer.config());
  cli::check_not_an_input(a.output, "--output", {{"--input", a.input}, {"--weights", a.weights}, {"--lengths", a.lengths}});
  Array y;
  y.shape = in.x.shape;
  y.data.resize(in.x.data.size());
  RunOptions ro;
  ro.threads = threads;
  ro.compute = compute;
  const bool three_d = in.x.shape.size() == 3;
  if (a.check_finite) {
    cli::check_finite_weights(layer.config(), layer.weights(), layer.names(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, layer.config().d_model, three_d, a.input + ": input");
  }
  layer.forward(in.x.data.data(), y.data.data(), in.shape, ro);
  if (a.check_finite) check_finite_tokens(y.data.data(), in.shape, layer.config().d_model, three_d, "output");
  write_npy(a.output, y);
  return 0;
}

// ---- grad ---------------------------------------------------------------------

struct GradArgs : LayerArgs {
  std::string grad_output, output_dir;
  bool tensor_parallel = false;
  std::optional<float> dropout, dropout_hidden, dropout_output;
  uint64_t seed = 0;
};

int cmd_grad(const GradArgs& a) {
  auto check_p = [](const std::optional<float>& p, const char* flag) {
    if (p && !(*p >= 0.0f && *p <= 1.0f)) throw Error(std::string(flag) + ": expected a probability in [0, 1], got " + num(*p));
  };
  check_p(a.dropout, "--dropout");
  check_p(a.dropout_hidden, "--dropout-hidden");
  check_p(a.dropout_output, "--dropout-output");
  const float p_hidden = a.dropout_hidden.value_or(a.dropout.value_or(0.0f));
  const float p_output = a.dropout_output.value_or(a.dropout.value_or(0.0f));
  const bool training = a.dropout || a.dropout_hidden || a.dropout_output;
  const int threads = threads_or_throw(a.threads);

  LoadOptions lo = a.load_options(p_hidden, p_output);
  lo.weight_dtype = WeightDtype::fp32;  // a quantized file: gradients at the values it stores
  if (a.tensor_parallel) {
    if (a.check_finite) throw Error("--check-finite: not with --tensor-parallel");
#ifdef FFN_HAVE_MPI
    cli::ParallelGradArgs p;
    a.parallel_args(p, lo, threads);
    p.grad_output = a.grad_output;
    p.training = training;
    p.seed = a.seed;
    p.targets = cli::grad_target_paths(a.output_dir);
    p.check_outputs = [&a] {
      cli::grad_targets(a.output_dir, {{"--input", a.input}, {"--weights", a.weights},
                                       {"--grad-output", a.grad_output}, {"--lengths", a.lengths}});
    };
    return cli::grad_tensor_parallel(p);
#else
    no_mpi("--tensor-parallel");
#endif
  }
  const cli::GradTargets targets = cli::grad_targets(
      a.output_dir, {{"--input", a.input}, {"--weights", a.weights}, {"--grad-output", a.grad_output}, {"--lengths", a.lengths}});
  const FeedForward layer = FeedForward::load(a.weights, lo);
  cli::note_assumed(a.weights, layer.assumed_settings());
  const Input in = read_input(a, layer.config());
  const Array dy = read_npy(a.grad_output);
  if (dy.shape != in.x.shape)
    throw Error(a.grad_output + ": grad-output has shape " + shape_str(dy.shape) + ", expected the input's shape " +
                shape_str(in.x.shape));

  RunOptions ro;
  ro.threads = threads;
  ro.training = training;
  ro.seed = a.seed;
  Array y;
  y.data.resize(in.x.data.size());
  ForwardCache cache;
  layer.forward(in.x.data.data(), y.data.data(), in.shape, ro, &cache);
  Array dx;
  dx.shape = in.x.shape;
  dx.data.resize(in.x.data.size());
  Weights grads;
  layer.backward(in.x.data.data(), dy.data.data(), in.shape, cache, dx.data.data(), grads, ro);
  if (a.check_finite) {
    const bool three_d = in.x.shape.size() == 3;
    const int64_t d = layer.config().d_model;
    cli::check_finite_weights(layer.config(), layer.weights(), layer.names(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, d, three_d, a.input + ": input");
    check_finite_tokens(dy.data.data(), in.shape, d, three_d, a.grad_output + ": grad-output");
    check_finite_tokens(y.data.data(), in.shape, d, three_d, "output");
    check_finite_tokens(dx.data.data(), in.shape, d, three_d, "grad_input");
    cli::check_finite_weights(layer.config(), grads, layer.names(), "gradient");
  }

  cli::write_gradient_pair(targets, dx, [&](const std::string& path) { layer.save_gradients(path, grads); });
  return 0;
}

// ---- init ---------------------------------------------------------------------

struct InitArgs {
  int64_t d_model = 512, d_ff = 2048;
  cli::ArchitectureArgs arch;
  std::string output;
  uint64_t seed = 0;
  // --encoder: a stack of encoder layers (attention + FFN) instead of one FFN sublayer.
  bool encoder = false, final_norm = false;
  int64_t layers = 1, heads = 8;
  CLI::Option *o_layers = nullptr, *o_heads = nullptr, *o_final_norm = nullptr;
};

// The encoder settings of ffn init and ffn bench from the FFN's flags plus
// --layers and --heads.
EncoderConfig encoder_config(int64_t d_model, int64_t d_ff, const Config& ffn, int64_t layers, int64_t heads) {
  if (layers < 1) throw Error("--layers: expected a positive integer, got " + std::to_string(layers));
  if (heads < 1 || d_model % heads != 0)
    throw Error("--heads: expected a divisor of --d-model " + std::to_string(d_model) + ", got " + std::to_string(heads));
  if (ffn.norm == NormPlacement::none) throw Error("--norm: an encoder layer's norm is post or pre, got none");
  EncoderConfig e;
  e.d_model = d_model;
  e.d_ff = d_ff;
  e.layers = layers;
  e.heads = heads;
  e.activation = ffn.activation;
  e.norm = ffn.norm;
  e.norm_type = ffn.norm_type;
  e.eps = ffn.eps;
  e.bias = ffn.bias;
  return e;
}

void cmd_init(const InitArgs& a) {
  Config cfg;
  cfg.d_model = a.d_model;
  cfg.d_ff = a.d_ff;
  if (a.d_model < 1) throw Error("--d-model: expected a positive integer, got " + std::to_string(a.d_model));
  if (a.d_ff < 1) throw Error("--d-ff: expected a positive integer, got " + std::to_string(a.d_ff));
  a.arch.apply(cfg);
  if (!a.encoder) {
    for (const CLI::Option* o : {a.o_layers, a.o_heads, a.o_final_norm})
      if (o->count()) throw Error(o->get_name() + ": needs --encoder (a plain FFN layer has no attention)");
  } else {
    EncoderConfig e = encoder_config(a.d_model, a.d_ff, cfg, a.layers, a.heads);
    e.final_norm = a.final_norm;
    cli::init_encoder(e, a.seed, a.output);
    return;
  }
  io::check_writable_target(a.output);
  cli::check_memory(4.0 * (is_gated(cfg.activation) ? 3 : 2) * double(a.d_model) * double(a.d_ff), "--d-model x --d-ff");
  FeedForward layer(cfg, a.seed);
  layer.save(a.output);
}

// ---- quantize -------------------------------------------------------------------

struct QuantizeArgs {
  std::string weights, prefix, dtype, output, calibrate;
  float outlier_threshold = 6.0f;
  CLI::Option* o_threshold = nullptr;
  cli::SettingOverrides settings;  // written into the output's __metadata__
};

void cmd_quantize(const QuantizeArgs& a) {
  io::check_writable_target(a.output);
  const WeightDtype dtype = parse_weight_dtype(a.dtype, "--dtype");
  cli::check_not_an_input(a.output, "--output", {{"--weights", a.weights}, {"--calibrate", a.calibrate}});
  LoadOptions lo;
  lo.prefix = a.prefix;
  lo.weight_dtype = dtype;
  a.settings.apply(lo);
  if (a.calibrate.empty() && a.o_threshold->count()) throw Error("--outlier-threshold: only with --calibrate");
  if (!a.calibrate.empty()) {
    if (dtype != WeightDtype::int8) throw Error("--calibrate: only with --dtype int8");
    if (!(a.outlier_threshold >= 0.0f) || !std::isfinite(a.outlier_threshold))
      throw Error("--outlier-threshold: expected a finite number >= 0, got " + std::to_string(a.outlier_threshold));
    lo.weight_dtype = WeightDtype::fp32;  // quantized below, with the channels
  }
  FeedForward layer = FeedForward::load(a.weights, lo);
  cli::note_assumed(a.weights, layer.assumed_settings());
  if (!a.calibrate.empty()) {
    // Outlier input channels from the inputs' max |x| per channel (every row of the file).
    const Array x = read_npy(a.calibrate);
    const int64_t d = layer.config().d_model;
    if (x.shape.empty() || x.shape.back() != d)
      throw Error("--calibrate " + a.calibrate + ": expected float32 [..., d_model = " + std::to_string(d) + "], got shape " +
                  shape_str(x.shape));
    std::vector<float> absmax;
    layer.input_absmax(x.data.data(), x.numel() / d, absmax);
    const Int8Options opts = Int8Options::outliers(absmax, a.outlier_threshold);
    layer = layer.converted(WeightDtype::int8, opts);
  }
  write_safetensors(a.output, layer.to_safetensors(layer.unowned(a.weights)));  // names kept, other tensors copied
  if (!a.calibrate.empty()) {
    const std::vector<int64_t>& kept = layer.fp32_input_channels();
    std::string list;
    for (int64_t c : kept) list += (list.empty() ? "" : ", ") + std::to_string(c);
    std::printf("ffn quantize: %zu input channel(s) with max |x| > %g kept in fp32%s%s%s\n", kept.size(),
                double(a.outlier_threshold), list.empty() ? "" : ": ", list.c_str(), kept.size() == 16 ? " (at most 16)" : "");
  }
}

// ---- bench --------------------------------------------------------------------

struct BenchArgs {
  int64_t tokens = 4096, d_model = 512, d_ff = 2048;
  std::string activation = "relu", norm = "post", norm_type = "layernorm", isa = "auto", dtype = "fp32";
  std::string compute = "fp32";
  int threads = 0, repeats = 10, warmup = 2;
  uint64_t seed = 0;
  bool backward = false, json = false, yes = false;
  bool encoder = false, embed = false, tensor_parallel = false, translate = false, generate = false;
  std::optional<int64_t> prompt_tokens, new_tokens;  // --generate
  cli::EmbedBenchArgs emb;
  std::optional<int64_t> beams, max_new_tokens;  // --translate
  int64_t layers = 1, heads = 8;
  cli::EncoderBenchArgs enc;
  CLI::Option *o_tokens = nullptr, *o_layers = nullptr, *o_heads = nullptr, *o_batch = nullptr, *o_seq = nullptr,
              *o_causal = nullptr, *o_compute = nullptr, *o_repeats = nullptr, *o_warmup = nullptr;
};

// Longest run `ffn bench` starts without --yes (estimated up front).
constexpr double kBenchLimitSeconds = 60.0;

// Tolerance of the bench's check: the fused path against the reference path
// of the same dtype (double accumulation; for int8 the integer reference, which
// differs only in the order of the final float sums); see tests/README.md.
constexpr double kBenchTolerance = 1e-5;
constexpr double kBenchToleranceInt8 = 1e-4;
// bf16 compute against its reference (operands rounded to bf16, double sums):
// the fp32 sums differ by ~1e-6, and a hidden value that lies within them of
// a bf16 rounding boundary rounds one bf16 step (2^-8 relative) the other
// way, moving an output by up to 2^-8·|h·w2| (≈ 1e-4 of the output's scale
// at the paper's sizes); tests/README.md.
constexpr double kBenchToleranceBf16 = 1e-3;

void check_counts(const BenchArgs& a) {
  if (a.repeats < 1) throw Error("--repeats: expected a positive integer, got " + std::to_string(a.repeats));
  if (a.warmup < 0) throw Error("--warmup: expected an integer >= 0, got " + std::to_string(a.warmup));
}

int bench_generate_mode(const BenchArgs& a) {
  const int threads = resolve_threads(threads_or_throw(a.threads));
  check_counts(a);
  if (a.emb.model.empty()) throw Error("--generate: give --model, a GGUF file or a Hugging Face LLaMA directory");
  // A run is a whole prompt and generation (seconds on a 1B model): 3 timed after 1 warmup unless asked.
  return cli::bench_generate(a.emb.model, a.o_compute->count() ? a.compute : "native", a.prompt_tokens.value_or(512),
                             a.new_tokens.value_or(128), threads, a.o_repeats->count() ? a.repeats : 3,
                             a.o_warmup->count() ? a.warmup : 1, a.json, a.yes);
}

int bench_translate_mode(const BenchArgs& a) {
  const int threads = resolve_threads(threads_or_throw(a.threads));
  check_counts(a);
  if (a.emb.model.empty()) throw Error("--translate: give --model, a MarianMT directory");
  cli::TranslateBenchArgs t;
  t.model = a.emb.model;
  t.input_file = a.emb.input_file;
  t.dtype = a.dtype;
  t.batch = a.o_batch->count() ? a.enc.batch : 32;
  t.beams = a.beams;
  t.max_new_tokens = a.max_new_tokens;
  return cli::bench_translate(t, threads, a.repeats, a.warmup, a.json);
}

int bench_embed_mode(const BenchArgs& a) {
  const int threads = resolve_threads(threads_or_throw(a.threads));
  check_counts(a);
  cli::EmbedBenchArgs e = a.emb;
  e.dtype = a.dtype;
  return cli::bench_embed(e, threads, a.repeats, a.warmup, a.json);
}

int bench_encoder_mode(const BenchArgs& a) {
  if (a.o_tokens->count()) throw Error("--tokens: with --encoder the shape is --batch and --seq");
  if (parse_weight_dtype(a.dtype, "--dtype") != WeightDtype::fp32 || parse_compute(a.compute, "--compute") != Compute::fp32)
    throw Error("--encoder: runs with --dtype fp32 and --compute fp32 (the low-precision modes are the FFN's)");
  check_counts(a);
  if (a.d_model < 1) throw Error("--d-model: expected a positive integer, got " + std::to_string(a.d_model));
  if (a.d_ff < 1) throw Error("--d-ff: expected a positive integer, got " + std::to_string(a.d_ff));
  Config ffn;
  ffn.activation = parse_activation(a.activation, "--activation");
  ffn.norm = parse_norm_placement(a.norm, "--norm");
  ffn.norm_type = parse_norm_type(a.norm_type, "--norm-type");
  const EncoderConfig e = encoder_config(a.d_model, a.d_ff, ffn, a.layers, a.heads);
  RunOptions ro;
  ro.threads = resolve_threads(threads_or_throw(a.threads));
  ro.isa = resolve_isa(parse_isa(a.isa, "--isa"));
  return cli::bench_encoder(e, a.enc, ro, a.backward, a.repeats, a.warmup, a.seed, a.json);
}

// ---- the modes of `ffn bench`, one entry each ---------------------------------
// A mode is its flag (added to the command from this table, with its help
// line), the options only it takes (refused without it, one message), and
// what it runs. Two modes together are refused, naming them. The FFN
// layer's bench (bench_ffn_mode) runs when no mode's flag is given.
struct BenchMode {
  const char* flag;
  bool BenchArgs::*chosen;
  const char* help;
  int (*run)(const BenchArgs&);
  // The message for an option only this mode takes, given without it ("": none).
  std::string (*stray)(const BenchArgs&);
};

const std::vector<BenchMode>& bench_modes() {
  static const std::vector<BenchMode> modes{
      {"--generate", &BenchArgs::generate,
       "time ffn generate with --model (GGUF file or Hugging Face directory): a --prompt-tokens prompt (default 512), then "
       "--new-tokens greedy tokens (default 128); tokens/s of each",
       bench_generate_mode,
       [](const BenchArgs& a) {
         return std::string(a.prompt_tokens || a.new_tokens ? "--prompt-tokens and --new-tokens: only with --generate"
                                                            : "");
       }},
      {"--translate", &BenchArgs::translate,
       "time ffn translate on --input-file (token ids per line) with --model; --batch (default 32), --beams, "
       "--max-new-tokens",
       bench_translate_mode,
       [](const BenchArgs& a) {
         return std::string(a.beams || a.max_new_tokens ? "--beams and --max-new-tokens: only with --translate" : "");
       }},
      {"--embed", &BenchArgs::embed, "time ffn embed: --input-file (texts/s) or --text (one text's latency)",
       bench_embed_mode, [](const BenchArgs&) { return std::string(); }},
      {"--encoder", &BenchArgs::encoder, "time encoder layers (attention + FFN) on --batch x --seq instead",
       bench_encoder_mode,
       [](const BenchArgs& a) {
         for (const CLI::Option* o : {a.o_layers, a.o_heads, a.o_batch, a.o_seq, a.o_causal})
           if (o->count()) return o->get_name() + ": needs --encoder (the FFN bench takes --tokens)";
         return std::string();
       }},
  };
  return modes;
}

int bench_ffn_mode(const BenchArgs& a);

int cmd_bench(const BenchArgs& a) {
  if (!a.emb.int8_outliers.empty() && !a.embed) throw Error("--int8-outliers: only with --embed");
  if (!a.emb.int8_attention.empty() && !a.embed) throw Error("--int8-attention: only with --embed");
  if (a.tensor_parallel && (a.embed || a.encoder))
    throw Error("--tensor-parallel: the FFN layer's bench only (not with --embed or --encoder)");
  const std::vector<BenchMode>& modes = bench_modes();
  for (size_t i = 0; i < modes.size(); ++i) {
    const BenchMode& m = modes[i];
    if (!(a.*m.chosen)) {
      if (const std::string stray = m.stray(a); !stray.empty()) throw Error(stray);
      continue;
    }
    std::vector<std::string> also;  // the later modes also given, the last first
    for (size_t j = modes.size(); j-- > i + 1;)
      if (a.*modes[j].chosen) also.push_back(modes[j].flag);
    if (!also.empty()) {
      std::string later;  // every later mode, as "x, y or z"
      for (size_t j = modes.size(), n = 0; j-- > i + 1; ++n)
        later += std::string(n == 0 ? "" : j == i + 1 ? " or " : ", ") + modes[j].flag;
      throw Error(std::string(m.flag) + ": not with " + later);
    }
    return m.run(a);
  }
  return bench_ffn_mode(a);
}

// The FFN layer's bench: the default mode.
int bench_ffn_mode(const BenchArgs& a) {
  if (a.tokens < 1) throw Error("--tokens: expected a positive integer, got " + std::to_string(a.tokens));
  check_counts(a);
  if (a.d_model < 1) throw Error("--d-model: expected a positive integer, got " + std::to_string(a.d_model));
  if (a.d_ff < 1) throw Error("--d-ff: expected a positive integer, got " + std::to_string(a.d_ff));
  // Weights (twice: the packed copy), and x, y, dx, dy plus, with --backward, the saved pre-activations.
  const double d = double(a.d_model), f = double(a.d_ff), t = double(a.tokens);
  cli::check_memory(4.0 * (6 * d * f + 4 * t * d + (a.backward ? 2 * t * f : 0)), "--tokens, --d-model, --d-ff");
  Config cfg;
  cfg.d_model = a.d_model;
  cfg.d_ff = a.d_ff;
  cfg.activation = parse_activation(a.activation, "--activation");
  cfg.norm = parse_norm_placement(a.norm, "--norm");
  cfg.norm_type = parse_norm_type(a.norm_type, "--norm-type");
  const WeightDtype dtype = parse_weight_dtype(a.dtype, "--dtype");
  const Compute compute = parse_compute(a.compute, "--compute");
  if (a.backward && dtype != WeightDtype::fp32)
    throw Error("--backward: needs --dtype fp32 (low-precision layers are for inference only)");
  if (a.backward && compute != Compute::fp32)
    throw Error("--backward: needs --compute fp32 (the bf16 compute mode is for inference only)");
  if (compute == Compute::bf16 && dtype == WeightDtype::int8)
    throw Error("--compute bf16: needs --dtype fp32, bf16 or fp16 (int8 weights have their own integer products)");
  if (a.tensor_parallel && a.backward) throw Error("--tensor-parallel: the forward only (no --backward yet)");
  const FeedForward layer32(cfg, a.seed);
  const FeedForward layer = layer32.converted(dtype);
  const int threads = resolve_threads(threads_or_throw(a.threads));

  RunOptions ro;
  ro.threads = threads;
  ro.isa = resolve_isa(parse_isa(a.isa, "--isa"));
  ro.compute = compute;
  if (a.tensor_parallel) {
#ifdef FFN_HAVE_MPI
    RunOptions per_rank = ro;
    per_rank.threads = a.threads;  // 0: bench_tensor_parallel shares the cores among the ranks
    return cli::bench_tensor_parallel(layer, a.tokens, per_rank, a.repeats, a.warmup, a.json, a.seed);
#else
    no_mpi("--tensor-parallel");
#endif
  }

  // Estimate the run's length from one call on 512 tokens (every token costs
  // the same) before allocating or committing to it.
  // One timed call: forward, or forward + backward; seconds.
  ForwardCache cache;
  Weights grads;
  const auto timed_call = [&](const float* xp, float* yp, const float* dyp, float* dxp, int64_t tokens) {
    const Shape s = Shape::tokens(tokens);
    const auto t0 = std::chrono::steady_clock::now();
    if (a.backward) {
      layer.forward(xp, yp, s, ro, &cache);
      layer.backward(xp, dyp, s, cache, dxp, grads, ro);
    } else {
      layer.forward(xp, yp, s, ro);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const int calls = a.warmup + a.repeats;
  {
    const int64_t trial = std::min<int64_t>(a.tokens, 512);
    std::vector<float> tx(size_t(trial * a.d_model)), ty(tx.size()), tdx(tx.size()), tdy(tx.size(), 0.01f);
    fill_uniform(tx.data(), tx.size(), 1.0f, a.seed, /*tensor_id=*/100);
    timed_call(tx.data(), ty.data(), tdy.data(), tdx.data(), trial);  // first touch, thread start-up
    const double per_call =
        timed_call(tx.data(), ty.data(), tdy.data(), tdx.data(), trial) * double(a.tokens) / double(trial);
    const double estimate = per_call * calls;
    if (estimate > kBenchLimitSeconds && !a.yes) {
      char msg[320];
      std::snprintf(msg, sizeof msg,
                    "--tokens %lld: %d calls would take about %s (%s each, estimated from a %lld-token call), "
                    "over the %.0f s limit; pass --yes to run it anyway, or lower --tokens or --repeats",
                    (long long)a.tokens, calls, duration_str(estimate).c_str(), duration_str(per_call).c_str(),
                    (long long)trial, kBenchLimitSeconds);
      throw Error(msg);
    }
  }

  // Input: uniform in [-1, 1) from the same generator as init (another seed).
  std::vector<float> x(size_t(a.tokens * a.d_model));
  fill_uniform(x.data(), x.size(), 1.0f, a.seed, /*tensor_id=*/100);
  std::vector<float> y(x.size()), dx(x.size()), dy(x.size(), 0.0f);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = x[(i * 7919) % x.size()] * 0.01f;
  const Shape shape = Shape::tokens(a.tokens);
  const std::string isa_name(to_string(ro.isa));
  const KernelInfo kcfg = kernel_info(ro.isa);
  // Which kernels the matrix products of this run use.
  char products[160];
  const bool bf16 = compute == Compute::bf16;
  if (dtype == WeightDtype::int8)
    std::snprintf(products, sizeof products, "int8 products on %s (%s)", isa_name.c_str(), kcfg.int8_instr.c_str());
  else if (bf16)
    std::snprintf(products, sizeof products, "bf16 products on %s (%s), fp32 sums", isa_name.c_str(),
                  kcfg.bf16_instr.c_str());
  else
    std::snprintf(products, sizeof products, "fp32 products on %s, %dx%d tiles%s", isa_name.c_str(), kcfg.mr,
                  kcfg.nr, dtype == WeightDtype::fp32 ? "" : " (16-bit weights widened in registers)");

  // The machine's peak on this many threads, measured now (see backends/cpu/peak.hpp).
  const Peak peak = measure_peak(threads);
  const bool int8 = dtype == WeightDtype::int8;
  const Peak peak_int = int8 ? measure_peak(threads, PeakKind::int8) : Peak{};
  const Peak peak_u8s8 = int8 ? measure_peak(threads, PeakKind::u8s8) : Peak{};
  const Peak peak_bf16 = bf16 ? measure_peak(threads, PeakKind::bf16) : Peak{};

  std::vector<double> times;
  const bool tty = isatty(STDERR_FILENO);
  for (int it = 0; it < calls; ++it) {
    if (tty) {
      std::fprintf(stderr, "\r\033[Kffn bench: call %d/%d%s", it + 1, calls, it < a.warmup ? " (warm-up)" : "");
      std::fflush(stderr);
    }
    const double t = timed_call(x.data(), y.data(), dy.data(), dx.data(), a.tokens);
    if (it >= a.warmup) times.push_back(t);
  }
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (a.backward) layer.forward(x.data(), y.data(), shape, ro);

  // Check: up to 64 evenly spaced tokens through the reference path (every
  // token is independent, so a sample checks exactly what it covers).
  const int64_t k = std::min<int64_t>(64, a.tokens);
  std::vector<float> xs(size_t(k * a.d_model)), ys(xs.size()), yref(xs.size());
  for (int64_t i = 0; i < k; ++i) {
    const int64_t t = i * a.tokens / k;
    std::copy_n(x.data() + t * a.d_model, a.d_model, xs.data() + i * a.d_model);
    std::copy_n(y.data() + t * a.d_model, a.d_model, ys.data() + i * a.d_model);
  }
  RunOptions ref;
  ref.path = Path::reference;
  ref.compute = compute;
  layer.forward(xs.data(), yref.data(), Shape::tokens(k), ref);
  const Comparison cmp = compare(ys.data(), yref.data(), ys.size());
  const double tol = dtype == WeightDtype::int8 ? kBenchToleranceInt8 : bf16 ? kBenchToleranceBf16 : kBenchTolerance;
  const bool ok = cmp.ok(tol);
  // A low-precision layer's error against the fp32 layer on the same tokens.
  Agreement vs_fp32{0.0, 1.0};
  const bool lowp = dtype != WeightDtype::fp32 || bf16;
  if (lowp) {
    std::vector<float> y32(xs.size());
    RunOptions fast;
    fast.threads = threads;
    layer32.forward(xs.data(), y32.data(), Shape::tokens(k), fast);
    vs_fp32 = agreement(ys.data(), y32.data(), ys.size());
  }

  const double med = median(times);
  const double flops = layer.forward_flops(a.tokens) * (a.backward ? 3.0 : 1.0);
  const double gflops = flops / med * 1e-9;
  const double tokens_per_s = double(a.tokens) / med;
  const double tmin = *std::min_element(times.begin(), times.end());
  const double tmax = *std::max_element(times.begin(), times.end());
  const double percent_of_peak = 100.0 * gflops / peak.gflops;
  if (a.json) {
    nlohmann::json j = {{"d_model", a.d_model}, {"d_ff", a.d_ff}, {"tokens", a.tokens},
                        {"activation", a.activation}, {"norm", a.norm}, {"norm_type", a.norm_type},
                        {"threads", threads}, {"cpu", cpu_name()}, {"isa", isa_name}, {"dtype", a.dtype}, {"compute", a.compute},
                        {"backward", a.backward},
                        {"repeats", a.repeats},
                        {"median_s", med}, {"min_s", tmin}, {"max_s", tmax},
                        {"tokens_per_s", tokens_per_s}, {"gflops", gflops},
                        {"products", products},
                        {"peak_gflops", peak.gflops}, {"peak_isa", to_string(peak.isa)}, {"peak_instr", peak.instr},
                        {"percent_of_peak", percent_of_peak},
                        {"check_tokens", k}, {"check_max_error", cmp.max_error},
                        {"check_tolerance", tol}, {"check_ok", ok}};
    if (bf16 && peak_bf16.gflops > 0) {
      j["bf16_peak_gflops"] = peak_bf16.gflops;
      j["bf16_peak_instr"] = peak_bf16.instr;
      j["percent_of_bf16_peak"] = 100.0 * gflops / peak_bf16.gflops;
    }
    if (lowp) {
      j["vs_fp32_rel_rms"] = vs_fp32.rel_rms;
      j["vs_fp32_cosine"] = vs_fp32.cosine;
    }
    if (dtype == WeightDtype::int8) {
      j["int8_peak_gops"] = peak_int.gflops;
      j["int8_peak_instr"] = peak_int.instr;
      j["u8s8_maddubs_peak_gops"] = peak_u8s8.gflops;
      j["percent_of_int_peak"] = 100.0 * gflops / peak_int.gflops;
    }
    std::cout << j.dump() << "\n";
  } else {
    std::printf("ffn bench: %lld -> %lld %s, norm %s %s, %lld tokens, %d threads, %s weights, %s compute, %s, %s\n",
                (long long)a.d_model, (long long)a.d_ff, a.activation.c_str(), a.norm.c_str(), a.norm_type.c_str(),
                (long long)a.tokens, threads, a.dtype.c_str(), a.compute.c_str(), isa_name.c_str(),
                a.backward ? "forward+backward" : "forward");
    std::printf("  cpu            %s\n", cpu_name().c_str());
    std::printf("  kernels        %s\n", products);
    std::printf("  time per call  median %.3f ms  (min %.3f, max %.3f; %d calls)\n", med * 1e3, tmin * 1e3,
                tmax * 1e3, a.repeats);
    std::printf("  throughput     %.0f tokens/s, %.1f GFLOP/s = %.1f%% of the measured peak %.1f GFLOP/s (%s loop)\n",
                tokens_per_s, gflops, percent_of_peak, peak.gflops, peak.instr);
    if (dtype == WeightDtype::int8)
      std::printf("  int8           %.1f GOP/s = %.1f%% of the measured %s peak %.1f GOP/s "
                  "(vpmaddubsw+vpmaddwd: %.1f)\n", gflops, 100.0 * gflops / peak_int.gflops, peak_int.instr,
                  peak_int.gflops, peak_u8s8.gflops);
    if (bf16 && peak_bf16.gflops > 0)
      std::printf("  bf16           %.1f GFLOP/s = %.1f%% of the measured %s peak %.1f GFLOP/s\n", gflops,
                  100.0 * gflops / peak_bf16.gflops, peak_bf16.instr, peak_bf16.gflops);
    std::printf("  check          %lld tokens against the reference path: %s (tolerance %.0e)  %s\n",
                (long long)k, cmp.describe().c_str(), tol, ok ? "OK" : "FAILED");
    if (lowp)
      std::printf("  vs fp32        relative RMS error %.2e, cosine similarity %.7f (same tokens, fp32 weights and compute)\n",
                  vs_fp32.rel_rms, vs_fp32.cosine);
  }
  return ok ? 0 : 1;
}

}  // namespace

// The program's entry, callable in-process (the fuzz target for `ffn run`
// calls it); main() below is the executable's.
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first --flag of the command line that its (sub)command does not have,
// with the nearest one it has: "run: unknown flag --weight; did you mean
// --weights? (see ffn run --help)". Checked before parsing, because CLI11 reports a required flag
// missing (the one that was mistyped) before an unexpected one. "" if none.
CLI::App* find_subcommand(CLI::App& app, const std::string& name) {
  const auto subs = app.get_subcommands([&](CLI::App* s) { return s->get_name() == name; });
  return subs.empty() ? nullptr : subs.front();
}

std::string unknown_flag(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  CLI::App* cmd = find_subcommand(app, argv[1]);
  if (!cmd) return "";
  std::string name = argv[1];
  int first = 2;
  if (argc > 2 && argv[2][0] != '-')
    if (CLI::App* sub = find_subcommand(*cmd, argv[2])) cmd = sub, name += std::string(" ") + argv[2], first = 3;
  std::vector<std::string> known = {"help", "help-all"};
  for (const CLI::Option* o : cmd->get_options())
    for (const std::string& l : o->get_lnames()) known.push_back(l);
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // what follows is positional
    if (arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
    const std::string flag = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    if (std::find(known.begin(), known.end(), flag) != known.end()) continue;
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const std::string& k : known)
      if (const size_t d = edit_distance(flag, k); d < best_d) best_d = d, best = k;
    std::string msg = name + ": unknown flag --" + flag;
    if (!best.empty() && best_d <= std::max<size_t>(2, flag.size() / 3)) msg += "; did you mean --" + best + "?";
    return msg + " (see ffn " + name + " --help)";
  }
  return "";
}

}  // namespace

int ffn_main(int argc, char** argv) {
  ffn::io::remove_temporaries_on_signals();
  CLI::App app{"ffn: the Transformer's position-wise feed-forward sublayer"};
  app.set_version_flag("--version", std::string("ffn ") + FFN_VERSION);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");

  RunArgs run;
  CLI::App* run_cmd = app.add_subcommand("run", "forward pass: --input X.npy -> --output Y.npy");
  run.add(run_cmd);
  run_cmd->add_option("--output", run.output, "output array (.npy), same shape as the input")->required();
  run_cmd->add_flag("--tensor-parallel", run.tensor_parallel,
                    "under mpirun -np P (P = 1, 2 or 4, at most ceil(d_ff/256)): each rank reads and runs its "
                    "quarter(s) of d_ff, the partial outputs are summed across ranks; the same bytes as one process "
                    "(rank 0 writes); --threads 0: the cores shared among the ranks");
  run_cmd->add_option("--dtype", run.dtype, "weights as fp32, bf16, fp16 or int8 (quantized on load; default: the file's)");
  run_cmd->add_option("--compute", run.compute,
                      "products in fp32 (default) or bf16 (operands rounded to bf16, fp32 sums; not with int8 weights)");

  GradArgs grad;
  CLI::App* grad_cmd = app.add_subcommand("grad", "backward pass: gradients of the input and of every parameter");
  grad.add(grad_cmd);
  grad_cmd->add_option("--grad-output", grad.grad_output, "dL/dy (.npy), the input's shape")->required();
  grad_cmd->add_option("--output-dir", grad.output_dir, "writes grad_input.npy and grads.safetensors here")->required();
  grad_cmd->add_flag("--tensor-parallel", grad.tensor_parallel,
                     "under mpirun -np P: each rank computes its shards' gradients and writes them into the one "
                     "grads.safetensors itself; the same bytes as one process");
  grad_cmd->add_option("--dropout", grad.dropout, "dropout p at both sites (hidden and output) unless --dropout-hidden/--dropout-output set that site; enables training mode");
  grad_cmd->add_option("--dropout-hidden", grad.dropout_hidden, "dropout p after the activation (overrides --dropout there)");
  grad_cmd->add_option("--dropout-output", grad.dropout_output, "dropout p after W2 (overrides --dropout there)");
  grad_cmd->add_option("--seed", grad.seed, "dropout seed")->check(CLI::NonNegativeNumber);

  InitArgs init;
  CLI::App* init_cmd = app.add_subcommand("init", "write a freshly initialized layer (PyTorch nn.Linear distribution)");
  init_cmd->add_option("--d-model", init.d_model, "model width (default 512)");
  init_cmd->add_option("--d-ff", init.d_ff, "hidden width (default 2048)");
  init.arch.add(init_cmd);
  init_cmd->add_option("--seed", init.seed, "seed of the initialization (optional, default 0)")->check(CLI::NonNegativeNumber);
  init_cmd->add_option("--output", init.output, "weights file to write (.safetensors)")->required();
  init_cmd->add_flag("--encoder", init.encoder, "a stack of encoder layers (multi-head attention + this FFN), nn.TransformerEncoder names");
  init.o_layers = init_cmd->add_option("--layers", init.layers, "--encoder: layers (default 1)");
  init.o_heads = init_cmd->add_option("--heads", init.heads, "--encoder: attention heads, a divisor of --d-model (default 8)");
  init.o_final_norm = init_cmd->add_flag("--final-norm", init.final_norm, "--encoder: a norm after the last layer (nn.TransformerEncoder's norm)");

  QuantizeArgs quant;
  CLI::App* quant_cmd = app.add_subcommand("quantize", "write the layer with bf16, fp16 or int8 weight matrices");
  quant_cmd->add_option("--weights", quant.weights, "weights file (safetensors)")->required();
  quant_cmd->add_option("--prefix", quant.prefix, "tensor name prefix, e.g. encoder.layers.0.");
  quant_cmd->add_option("--dtype", quant.dtype, "int8, bf16, fp16 (or fp32)")->required();
  quant_cmd->add_option("--output", quant.output, "weights file to write (.safetensors)")->required();
  quant_cmd->add_option("--calibrate", quant.calibrate,
                        "int8: inputs X.npy [..., d_model]; input channels whose max |x| exceeds "
                        "--outlier-threshold are kept in fp32 (LLM.int8()'s outlier decomposition)");
  quant.o_threshold = quant_cmd->add_option("--outlier-threshold", quant.outlier_threshold,
                                            "--calibrate: max |x| above which a channel is kept in fp32 (default 6)");
  quant.settings.add(quant_cmd);

  BenchArgs bench;
  CLI::App* bench_cmd = app.add_subcommand("bench", "time the layer (default: the paper's sublayer on 8 x 512 tokens)");
  bench.o_tokens = bench_cmd->add_option("--tokens", bench.tokens, "tokens per call (default 4096)");
  for (const BenchMode& m : bench_modes()) bench_cmd->add_flag(m.flag, bench.*m.chosen, m.help);
  bench.o_layers = bench_cmd->add_option("--layers", bench.layers, "--encoder: layers (default 1)");
  bench.o_heads = bench_cmd->add_option("--heads", bench.heads, "--encoder: attention heads (default 8)");
  bench.o_batch = bench_cmd->add_option("--batch", bench.enc.batch, "--encoder: sequences per call (default 8)");
  bench.o_seq = bench_cmd->add_option("--seq", bench.enc.seq, "--encoder: positions per sequence (default 128)");
  bench.o_causal = bench_cmd->add_flag("--causal", bench.enc.causal, "--encoder: causal mask");
  bench_cmd->add_flag("--tensor-parallel", bench.tensor_parallel,
                      "under mpirun -np P: each rank runs its shards of d_ff; per-rank compute and sum times, "
                      "bytes sent per call");
  bench_cmd->add_option("--model", bench.emb.model,
                        "--embed: model directory (default: the installed all-MiniLM-L6-v2); --translate: MarianMT directory; "
                        "--generate: GGUF file or Hugging Face directory (" + CausalLM::architecture_names() + ")");
  bench_cmd->add_option("--prompt-tokens", bench.prompt_tokens, "--generate: prompt length (default 512)");
  bench_cmd->add_option("--new-tokens", bench.new_tokens, "--generate: tokens generated after it (default 128)");
  bench_cmd->add_option("--beams", bench.beams, "--translate: beam size (default: the generation config's)");
  bench_cmd->add_option("--max-new-tokens", bench.max_new_tokens, "--translate: most tokens generated per source");
  bench_cmd->add_option("--input-file", bench.emb.input_file, "--embed: texts, one per line");
  bench_cmd->add_option("--text", bench.emb.text, "--embed: one text");
  bench_cmd->add_option("--embed-batch", bench.emb.batch, "--embed: texts per call (default 32)");
  bench_cmd->add_option("--int8-outliers", bench.emb.int8_outliers,
                        "--embed --dtype int8: on (default): outlier input channels in fp32, calibrated at load; off");
  bench_cmd->add_option("--int8-attention", bench.emb.int8_attention,
                        "--embed --dtype int8: on (default): attention projections in int8 too; off: FFN only");
  bench_cmd->add_option("--d-model", bench.d_model, "default 512");
  bench_cmd->add_option("--d-ff", bench.d_ff, "default 2048");
  bench_cmd->add_option("--activation", bench.activation, "default relu");
  bench_cmd->add_option("--norm", bench.norm, "default post");
  bench_cmd->add_option("--norm-type", bench.norm_type, "default layernorm");
  bench_cmd->add_option("--threads", bench.threads, "threads, 0 = all cores (default 0)");
  bench.o_repeats = bench_cmd->add_option("--repeats", bench.repeats,
                                          "timed calls (default 10; --generate: 3 timed runs of the whole prompt and "
                                          "generation)");
  bench.o_warmup = bench_cmd->add_option("--warmup", bench.warmup, "untimed calls first (default 2; --generate: 1 run)");
  bench_cmd->add_option("--seed", bench.seed, "weights and input seed")->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--isa", bench.isa, "auto (default: FFN_ISA, else the best), scalar, avx2, avx512, amx");
  bench_cmd->add_option("--dtype", bench.dtype, "weight matrices as fp32 (default), bf16, fp16 or int8");
  bench.o_compute = bench_cmd->add_option("--compute", bench.compute,
                                          "products in fp32 (default) or bf16 (operands rounded to bf16); "
                                          "--generate: native (default: quantized blocks) or fp32");
  bench_cmd->add_flag("--backward", bench.backward, "time forward + backward");
  bench_cmd->add_flag("--json", bench.json, "print one JSON object");
  bench_cmd->add_flag("--yes", bench.yes, "run even if the estimated time is over a minute (--generate: estimated "
                                          "from its first run)");

  // The commands, in one registry: the allow-list, the dispatch and what
  // each does under mpirun are read from it (the help is CLI11's, from the
  // same subcommands). A command family adds one line here and its file.
  enum class Mpi { refused, tensor_parallel, data_parallel };
  struct Entry {
    ffn::cli::Command cmd;
    Mpi mpi = Mpi::refused;
    const bool* tensor_parallel = nullptr;  // Mpi::tensor_parallel: the flag that asks for it
    bool writes_output = true;
  };
  std::vector<Entry> commands;
  commands.push_back({{run_cmd, [&] { return cmd_run(run); }}, Mpi::tensor_parallel, &run.tensor_parallel});
  commands.push_back({{grad_cmd, [&] { return cmd_grad(grad); }}, Mpi::tensor_parallel, &grad.tensor_parallel});
  commands.push_back({{init_cmd, [&] { return cmd_init(init), 0; }}});
  commands.push_back({{quant_cmd, [&] { return cmd_quantize(quant), 0; }}});
  commands.push_back({{bench_cmd, [&] { return cmd_bench(bench); }}, Mpi::tensor_parallel, &bench.tensor_parallel, false});
  commands.push_back({ffn::cli::add_train(app), Mpi::data_parallel});
  for (auto add : {ffn::cli::add_demo, ffn::cli::add_encode, ffn::cli::add_encode_grad, ffn::cli::add_embed,
                   ffn::cli::add_decode, ffn::cli::add_decode_grad, ffn::cli::add_translate, ffn::cli::add_generate,
                   ffn::cli::add_tokenize, ffn::cli::add_chat, ffn::cli::add_serve})
    commands.push_back({add(app)});

  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (std::none_of(commands.begin(), commands.end(), [&](const Entry& e) { return e.cmd.app->get_name() == cmd; })) {
      std::string names;
      for (size_t i = 0; i < commands.size(); ++i)
        names += (i == 0 ? "" : i + 1 == commands.size() ? " or " : ", ") + commands[i].cmd.app->get_name();
      std::cerr << "ffn: error: unknown command '" << cmd << "', expected " << names << " (see ffn --help)\n";
      return 2;
    }
  }
  if (const std::string typo = unknown_flag(app, argc, argv); !typo.empty()) {
    std::cerr << "ffn: error: " << typo << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::cerr << "ffn: error: " << msg << " (see ffn --help)\n";
    return 2;
  }
  try {
    const auto chosen = std::find_if(commands.begin(), commands.end(), [](const Entry& e) { return bool(*e.cmd.app); });
    if (chosen == commands.end()) return 0;
    // Under mpirun, a command without its parallel mode would run whole on
    // every rank, each writing the same output: refused, naming the flag.
    if (const int ranks = ffn::cli::launched_ranks(); ranks > 1) {
      const std::string name = chosen->cmd.app->get_name();
      const std::string started = "ffn " + name + ": started by mpirun as one of " + std::to_string(ranks) + " ranks";
      if (chosen->mpi == Mpi::tensor_parallel && !*chosen->tensor_parallel)
        throw Error(started + " without --tensor-parallel, so every rank would do the whole job" +
                    (chosen->writes_output ? " and write the same output" : "") +
                    "; add --tensor-parallel, or run it without mpirun");
      if (chosen->mpi == Mpi::refused) {
        std::string tp, dp;
        std::vector<std::string> tps;
        for (const Entry& e : commands) {
          if (e.mpi == Mpi::tensor_parallel) tps.push_back(e.cmd.app->get_name());
          if (e.mpi == Mpi::data_parallel) dp += (dp.empty() ? "" : " and ") + e.cmd.app->get_name();
        }
        for (size_t i = 0; i < tps.size(); ++i) tp += (i == 0 ? "" : i + 1 == tps.size() ? " and " : ", ") + tps[i];
        throw Error(started + ", but it has no parallel mode, so every rank would do the whole job; run it without "
                    "mpirun (" + tp + " take --tensor-parallel; " + dp + " is data parallel under mpirun)");
      }
    }
    return chosen->cmd.run();
  } catch (const Error& e) {
    std::cerr << "ffn: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "ffn: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ffn: internal error: " << e.what() << "\n";
    return 1;
  }
}

#ifndef FFN_NO_MAIN
int main(int argc, char** argv) { return ffn_main(argc, argv); }
#endif
