// ffn encode, ffn encode-grad, ffn decode, ffn decode-grad, and the encoder
// parts of ffn init and ffn bench: the encoder and decoder layers
// (include/ffn/encoder.hpp, decoder.hpp) from the command line,
// with the FFN commands' options and their handling of bad input.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/decoder.hpp"
#include "ffn/encoder.hpp"
#include "ffn/random.hpp"

namespace ffn::cli {
namespace {

// Options shared by encode and encode-grad, and (with decoder) decode and decode-grad.
struct EncodeArgs {
  std::string weights, prefix, input, lengths;
  std::string memory, memory_lengths;  // decode
  SettingOverrides settings;
  std::optional<int64_t> heads;
  bool causal = false, check_finite = false;
  bool no_causal = false;  // decode
  int threads = 0;

  void add(CLI::App* app, bool decoder = false) {
    if (decoder) {
      app->add_option("--weights", weights,
                      "decoder weights (safetensors; nn.TransformerDecoder state_dict names, or an nn.Transformer's "
                      "with --prefix decoder.)")->required();
      app->add_option("--prefix", prefix, "tensor name prefix, e.g. decoder.");
      app->add_option("--input", input, "target array (.npy float32): [B, T, d_model] or one sequence [T, d_model]")
          ->required();
      app->add_option("--lengths", lengths, "int32/int64 .npy of B target lengths (key padding); positions past them are padding");
      app->add_option("--memory", memory, "the encoder's output (.npy float32): [B, S, d_model] or [S, d_model]")->required();
      app->add_option("--memory-lengths", memory_lengths, "int32/int64 .npy of B memory lengths (the memory's key padding)");
      app->add_flag("--no-causal", no_causal, "no causal mask on the self-attention (default: position t sees 0..t)");
    } else {
      app->add_option("--weights", weights, "encoder weights (safetensors; nn.TransformerEncoder state_dict names)")->required();
      app->add_option("--prefix", prefix, "tensor name prefix, e.g. encoder.");
      app->add_option("--input", input, "input array (.npy float32): [B, S, d_model] or one sequence [S, d_model]")->required();
      app->add_option("--lengths", lengths, "int32/int64 .npy of B sequence lengths (key padding mask); positions past them are padding");
      app->add_flag("--causal", causal, "causal mask: position s attends to positions 0..s only");
    }
    settings.add(app);
    app->add_option("--heads", heads, "attention heads (default: from the file; required for a file saved from PyTorch)");
    app->add_option("--threads", threads, "threads, 0 = all cores (default 0)");
    app->add_flag("--check-finite", check_finite,
                  "fail (exit 2, nothing written) at the first NaN or Inf in the input, weights or results");
  }

  EncoderLoadOptions load_options(float dropout) const {
    LoadOptions lo;  // the FFN commands' parsing of the overrides
    settings.apply(lo);
    EncoderLoadOptions o;
    o.prefix = prefix;
    o.activation = lo.activation;
    o.norm = lo.norm;
    o.norm_type = lo.norm_type;
    o.eps = lo.eps;
    if (heads) {
      if (*heads < 1) throw Error("--heads: expected a positive integer, got " + std::to_string(*heads));
      o.heads = heads;
    }
    o.dropout = dropout;
    return o;
  }
  template <typename Stack>
  Stack load(float dropout) const {
    Stack e = Stack::load(weights, load_options(dropout));
    note_assumed(weights, e.assumed_settings());
    return e;
  }
  Encoder load(float dropout) const { return load<Encoder>(dropout); }
  // The memory (decode): its batch must be the target's, its width d_model.
  Input read_memory(const Input& target, int64_t d) const {
    Input m = read_input(memory, memory_lengths, Layout::tokens, d, weights);
    if (m.x.shape.size() != target.x.shape.size())
      throw Error(memory + ": memory has shape " + shape_str(m.x.shape) + ", but the input has shape " +
                  shape_str(target.x.shape) + " (both [B, ., d_model] or both [., d_model])");
    if (m.shape.batch != target.shape.batch)
      throw Error(memory + ": memory has " + std::to_string(m.shape.batch) + " sequences, the input " +
                  std::to_string(target.shape.batch));
    for (size_t b = 0; b < m.shape.lengths.size(); ++b)
      if (m.shape.lengths[b] == 0 && (target.shape.lengths.empty() || target.shape.lengths[b] > 0))
        throw Error(memory_lengths + ": memory length 0 for sequence " + std::to_string(b) +
                    ", whose target positions would have nothing to attend to (--memory-lengths)");
    return m;
  }

  void check_weights_finite(const SafetensorsFile& f, const std::string& what) const {
    for (const auto& [name, t] : f.tensors)
      for (size_t i = 0; i < t.data.size(); ++i)
        if (!std::isfinite(t.data[i]))
          throw Error(what + ": tensor '" + name + "' is " + kind_of(t.data[i]) + " at flat index " + std::to_string(i) +
                      " (--check-finite)");
  }
};

struct EncodeRunArgs : EncodeArgs {
  std::string output, dtype;
};

void cmd_encode(const EncodeRunArgs& a, const Common& c) {
  io::check_writable_target(a.output);
  const int threads = threads_or_throw(a.threads);
  const std::optional<WeightDtype> dtype =
      a.dtype.empty() ? std::nullopt : std::optional(parse_weight_dtype(a.dtype, "--dtype"));
  const Encoder loaded = a.load(0.0f);
  // --dtype: the FFN sublayers' matrices stored as bf16, fp16 or int8 (plain
  // per-token int8, as `ffn run --dtype int8`); attention stays fp32.
  const Encoder enc = dtype && *dtype != WeightDtype::fp32 ? loaded.converted(*dtype) : loaded;
  const Input in = read_input(a.input, a.lengths, Layout::tokens, enc.config().d_model, a.weights);
  check_not_an_input(a.output, "--output", {{"--input", a.input}, {"--weights", a.weights}, {"--lengths", a.lengths}});
  const bool three_d = in.x.shape.size() == 3;
  if (a.check_finite) {
    a.check_weights_finite(enc.to_safetensors(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, enc.config().d_model, three_d, a.input + ": input");
  }
  Array y;
  y.shape = in.x.shape;
  y.data.resize(in.x.data.size());
  EncoderRunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  ro.causal = a.causal;
  enc.forward(in.x.data.data(), y.data.data(), in.shape, ro);
  if (a.check_finite) check_finite_tokens(y.data.data(), in.shape, enc.config().d_model, three_d, "output");
  write_npy(a.output, y);
}

struct EncodeGradArgs : EncodeArgs {
  std::string grad_output, output_dir;
  std::optional<float> dropout;
  uint64_t seed = 0;
};

void cmd_encode_grad(const EncodeGradArgs& a, const Common& c) {
  if (a.dropout && !(*a.dropout >= 0.0f && *a.dropout <= 1.0f))
    throw Error("--dropout: expected a probability in [0, 1], got " + num(*a.dropout));
  const int threads = threads_or_throw(a.threads);
  const GradTargets targets = grad_targets(
      a.output_dir, {{"--input", a.input}, {"--weights", a.weights}, {"--grad-output", a.grad_output}, {"--lengths", a.lengths}});
  const Encoder enc = a.load(a.dropout.value_or(0.0f));
  const Input in = read_input(a.input, a.lengths, Layout::tokens, enc.config().d_model, a.weights);
  const Array dy = read_npy(a.grad_output);
  if (dy.shape != in.x.shape)
    throw Error(a.grad_output + ": grad-output has shape " + shape_str(dy.shape) + ", expected the input's shape " +
                shape_str(in.x.shape));
  EncoderRunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  ro.causal = a.causal;
  ro.training = a.dropout.has_value();
  ro.seed = a.seed;
  Array y, dx;
  y.data.resize(in.x.data.size());
  dx.shape = in.x.shape;
  dx.data.resize(in.x.data.size());
  EncoderCache cache;
  enc.forward(in.x.data.data(), y.data.data(), in.shape, ro, &cache);
  EncoderWeights grads;
  enc.backward(in.x.data.data(), dy.data.data(), in.shape, cache, dx.data.data(), grads, ro);
  if (a.check_finite) {
    const bool three_d = in.x.shape.size() == 3;
    const int64_t d = enc.config().d_model;
    a.check_weights_finite(enc.to_safetensors(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, d, three_d, a.input + ": input");
    check_finite_tokens(dy.data.data(), in.shape, d, three_d, a.grad_output + ": grad-output");
    check_finite_tokens(y.data.data(), in.shape, d, three_d, "output");
    check_finite_tokens(dx.data.data(), in.shape, d, three_d, "grad_input");
    a.check_weights_finite(enc.to_safetensors(grads), "gradient");
  }
  write_gradient_pair(targets, dx, [&](const std::string& path) { enc.save_gradients(path, grads); });
}


struct DecodeRunArgs : EncodeArgs {
  std::string output, dtype;
};

void cmd_decode(const DecodeRunArgs& a, const Common& c) {
  io::check_writable_target(a.output);
  const int threads = threads_or_throw(a.threads);
  const std::optional<WeightDtype> dtype =
      a.dtype.empty() ? std::nullopt : std::optional(parse_weight_dtype(a.dtype, "--dtype"));
  const Decoder loaded = a.load<Decoder>(0.0f);
  // --dtype: the FFN sublayers' matrices stored as bf16, fp16 or int8; attention stays fp32.
  const Decoder dec = dtype && *dtype != WeightDtype::fp32 ? loaded.converted(*dtype) : loaded;
  const int64_t d = dec.config().d_model;
  const Input in = read_input(a.input, a.lengths, Layout::tokens, d, a.weights);
  const Input mem = a.read_memory(in, d);
  check_not_an_input(a.output, "--output",
                     {{"--input", a.input}, {"--weights", a.weights}, {"--lengths", a.lengths}, {"--memory", a.memory},
                      {"--memory-lengths", a.memory_lengths}});
  const bool three_d = in.x.shape.size() == 3;
  if (a.check_finite) {
    a.check_weights_finite(dec.to_safetensors(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, d, three_d, a.input + ": input");
    check_finite_tokens(mem.x.data.data(), mem.shape, d, three_d, a.memory + ": memory");
  }
  Array y;
  y.shape = in.x.shape;
  y.data.resize(in.x.data.size());
  DecoderRunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  ro.causal = !a.no_causal;
  dec.forward(in.x.data.data(), in.shape, mem.x.data.data(), mem.shape, y.data.data(), ro);
  if (a.check_finite) check_finite_tokens(y.data.data(), in.shape, d, three_d, "output");
  write_npy(a.output, y);
}

struct DecodeGradArgs : EncodeArgs {
  std::string grad_output, output_dir;
  std::optional<float> dropout;
  uint64_t seed = 0;
};

void cmd_decode_grad(const DecodeGradArgs& a, const Common& c) {
  if (a.dropout && !(*a.dropout >= 0.0f && *a.dropout <= 1.0f))
    throw Error("--dropout: expected a probability in [0, 1], got " + num(*a.dropout));
  const int threads = threads_or_throw(a.threads);
  const GradTargets targets = grad_targets(a.output_dir,
                                           {{"--input", a.input}, {"--weights", a.weights}, {"--grad-output", a.grad_output},
                                            {"--lengths", a.lengths}, {"--memory", a.memory},
                                            {"--memory-lengths", a.memory_lengths}},
                                           true);
  const Decoder dec = a.load<Decoder>(a.dropout.value_or(0.0f));
  const int64_t d = dec.config().d_model;
  const Input in = read_input(a.input, a.lengths, Layout::tokens, d, a.weights);
  const Input mem = a.read_memory(in, d);
  const Array dy = read_npy(a.grad_output);
  if (dy.shape != in.x.shape)
    throw Error(a.grad_output + ": grad-output has shape " + shape_str(dy.shape) + ", expected the input's shape " +
                shape_str(in.x.shape));
  DecoderRunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  ro.causal = !a.no_causal;
  ro.training = a.dropout.has_value();
  ro.seed = a.seed;
  Array y, dx, dm;
  y.data.resize(in.x.data.size());
  dx.shape = in.x.shape;
  dx.data.resize(in.x.data.size());
  dm.shape = mem.x.shape;
  dm.data.resize(mem.x.data.size());
  DecoderCache cache;
  dec.forward(in.x.data.data(), in.shape, mem.x.data.data(), mem.shape, y.data.data(), ro, &cache);
  DecoderWeights grads;
  dec.backward(in.x.data.data(), dy.data.data(), in.shape, mem.x.data.data(), mem.shape, cache, dx.data.data(),
               dm.data.data(), grads, ro);
  if (a.check_finite) {
    const bool three_d = in.x.shape.size() == 3;
    a.check_weights_finite(dec.to_safetensors(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, d, three_d, a.input + ": input");
    check_finite_tokens(mem.x.data.data(), mem.shape, d, three_d, a.memory + ": memory");
    check_finite_tokens(dy.data.data(), in.shape, d, three_d, a.grad_output + ": grad-output");
    check_finite_tokens(y.data.data(), in.shape, d, three_d, "output");
    check_finite_tokens(dx.data.data(), in.shape, d, three_d, "grad_input");
    check_finite_tokens(dm.data.data(), mem.shape, d, three_d, "grad_memory");
    a.check_weights_finite(dec.to_safetensors(grads), "gradient");
  }
  write_gradient_pair(targets, dx, [&](const std::string& path) { dec.save_gradients(path, grads); }, &dm);
}

}  // namespace

Command add_decode(CLI::App& app) {
  auto a = std::make_shared<DecodeRunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "decode", "decoder layers (causal self-attention, cross-attention over --memory, FFN) forward: --input T.npy -> --output Y.npy");
  a->add(cmd, true);
  cmd->add_option("--output", a->output, "output array (.npy), the input's shape")->required();
  cmd->add_option("--dtype", a->dtype,
                  "the FFN sublayers' weight matrices as fp32 (default), bf16, fp16 or int8 (converted on load; "
                  "attention stays fp32)");
  return {cmd, [a](const Common& c) {
            cmd_decode(*a, c);
            return 0;
          }};
}

Command add_decode_grad(CLI::App& app) {
  auto a = std::make_shared<DecodeGradArgs>();
  CLI::App* cmd = app.add_subcommand("decode-grad",
                                     "decoder backward: gradients of the input, the memory and every parameter");
  a->add(cmd, true);
  cmd->add_option("--grad-output", a->grad_output, "dL/dy (.npy), the input's shape")->required();
  cmd->add_option("--output-dir", a->output_dir, "writes grad_input.npy, grad_memory.npy and grads.safetensors here")
      ->required();
  cmd->add_option("--dropout", a->dropout,
                  "dropout p at the decoder's sites (attention probabilities, the three sublayer outputs, FFN hidden); "
                  "enables training mode");
  cmd->add_option("--seed", a->seed, "dropout seed")->check(CLI::NonNegativeNumber);
  return {cmd, [a](const Common& c) {
            cmd_decode_grad(*a, c);
            return 0;
          }};
}

namespace {
}  // namespace

Command add_encode(CLI::App& app) {
  auto a = std::make_shared<EncodeRunArgs>();
  CLI::App* cmd = app.add_subcommand("encode", "encoder layers (attention + FFN) forward: --input X.npy -> --output Y.npy");
  a->add(cmd);
  cmd->add_option("--output", a->output, "output array (.npy), same shape as the input")->required();
  cmd->add_option("--dtype", a->dtype,
                  "the FFN sublayers' weight matrices as fp32 (default), bf16, fp16 or int8 (converted on load; "
                  "attention stays fp32)");
  return {cmd, [a](const Common& c) {
            cmd_encode(*a, c);
            return 0;
          }};
}

Command add_encode_grad(CLI::App& app) {
  auto a = std::make_shared<EncodeGradArgs>();
  CLI::App* cmd = app.add_subcommand("encode-grad", "encoder backward: gradients of the input and of every parameter");
  a->add(cmd);
  cmd->add_option("--grad-output", a->grad_output, "dL/dy (.npy), the input's shape")->required();
  cmd->add_option("--output-dir", a->output_dir, "writes grad_input.npy and grads.safetensors here")->required();
  cmd->add_option("--dropout", a->dropout, "dropout p at the four sites (attention probabilities, both sublayer outputs, FFN hidden); enables training mode");
  cmd->add_option("--seed", a->seed, "dropout seed")->check(CLI::NonNegativeNumber);
  return {cmd, [a](const Common& c) {
            cmd_encode_grad(*a, c);
            return 0;
          }};
}

void init_encoder(const EncoderConfig& cfg, uint64_t seed, const std::string& output) {
  io::check_writable_target(output);
  cfg.validate();
  const double d = double(cfg.d_model), f = double(cfg.d_ff);
  check_memory(4.0 * double(cfg.layers) * (4 * d * d + 3 * d * f), "--layers x --d-model x --d-ff");
  Encoder(cfg, seed).save(output);
}

int bench_encoder(const EncoderConfig& cfg, const EncoderBenchArgs& e, const RunOptions& base, bool backward,
                  int repeats, int warmup, uint64_t seed, bool json) {
  if (e.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(e.batch));
  if (e.seq < 1) throw Error("--seq: expected a positive integer, got " + std::to_string(e.seq));
  cfg.validate();
  const int64_t d = cfg.d_model, T = e.batch * e.seq;
  check_memory(4.0 * (double(cfg.layers) * (8.0 * d * d + 3.0 * d * cfg.d_ff + (backward ? T * (8.0 * d + 2.0 * cfg.d_ff) : 0)) +
                      8.0 * T * d),
               "--batch x --seq, --layers, --d-model, --d-ff");
  const Encoder enc(cfg, seed);
  EncoderRunOptions ro;
  static_cast<RunOptions&>(ro) = base;
  ro.causal = e.causal;
  const Shape shape{e.batch, e.seq, Layout::tokens, {}};
  std::vector<float> x(size_t(T * d)), y(x.size()), dx(x.size()), dy(x.size());
  fill_uniform(x.data(), x.size(), 1.0f, seed, 100);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = x[(i * 7919) % x.size()] * 0.01f;
  EncoderCache cache;
  EncoderWeights grads;
  std::vector<double> times;
  const bool tty = isatty(STDERR_FILENO);
  for (int it = 0; it < warmup + repeats; ++it) {
    if (tty) {
      std::fprintf(stderr, "\r\033[Kffn bench: call %d/%d%s", it + 1, warmup + repeats, it < warmup ? " (warm-up)" : "");
      std::fflush(stderr);
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (backward) {
      enc.forward(x.data(), y.data(), shape, ro, &cache);
      enc.backward(x.data(), dy.data(), shape, cache, dx.data(), grads, ro);
    } else {
      enc.forward(x.data(), y.data(), shape, ro);
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it >= warmup) times.push_back(t);
  }
  if (tty) std::fprintf(stderr, "\r\033[K");
  // Check: the first sequence (its first 256 positions at most, a sequence of
  // its own) through the reference path.
  const int64_t S = std::min<int64_t>(e.seq, 256);
  const Shape one{1, S, Layout::tokens, {}};
  std::vector<float> yf(size_t(S * d)), yr(yf.size());
  enc.forward(x.data(), yf.data(), one, ro);
  EncoderRunOptions rr = ro;
  rr.path = Path::reference;
  enc.forward(x.data(), yr.data(), one, rr);
  const Comparison cmp = compare(yf.data(), yr.data(), yf.size());
  const double tol = 5e-5;  // kAttentionForwardVsReference, tests/tolerances.hpp
  const bool ok = cmp.ok(tol);

  // Attention alone (QKᵀ, softmax, PV) on the same shape, forward.
  std::vector<float> qkv(size_t(T * 3 * d)), ctx(size_t(T * d)), lse(size_t(T * cfg.heads));
  fill_uniform(qkv.data(), qkv.size(), 1.0f, seed, 101);
  const int threads = base.threads;
  std::vector<double> at;
  for (int it = 0; it < warmup + repeats; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    self_attention_forward(qkv.data(), ctx.data(), lse.data(), d, cfg.heads, e.batch, e.seq, e.causal, threads, base.isa);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it >= warmup) at.push_back(t);
  }
  const double pairs = double(e.batch) * (e.causal ? double(e.seq) * double(e.seq + 1) / 2 : double(e.seq) * double(e.seq));
  const double attn_flops = 4.0 * pairs * double(d);
  const double attn_med = median(at);

  const Peak peak = measure_peak(threads);
  const double med = median(times);
  const double flops = enc.forward_flops(shape, e.causal) * (backward ? 3.0 : 1.0);
  const double gflops = flops / med * 1e-9, attn_gflops = attn_flops / attn_med * 1e-9;
  if (json) {
    nlohmann::json j = {{"encoder", true}, {"d_model", d}, {"heads", cfg.heads}, {"d_ff", cfg.d_ff},
                        {"layers", cfg.layers}, {"batch", e.batch}, {"seq", e.seq}, {"causal", e.causal},
                        {"activation", to_string(cfg.activation)}, {"norm", to_string(cfg.norm)},
                        {"threads", threads}, {"cpu", cpu_name()}, {"isa", to_string(base.isa)},
                        {"backward", backward}, {"repeats", repeats}, {"median_s", med},
                        {"min_s", *std::min_element(times.begin(), times.end())},
                        {"max_s", *std::max_element(times.begin(), times.end())}, {"gflops", gflops},
                        {"attention_median_s", attn_med}, {"attention_gflops", attn_gflops},
                        {"peak_gflops", peak.gflops}, {"percent_of_peak", 100.0 * gflops / peak.gflops},
                        {"attention_percent_of_peak", 100.0 * attn_gflops / peak.gflops},
                        {"check_max_error", cmp.max_error}, {"check_tolerance", tol}, {"check_ok", ok}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("ffn bench --encoder: %lld layer(s), d_model %lld, %lld heads, d_ff %lld, %s, norm %s, B %lld x S %lld%s, "
                "%d threads, %s, %s\n",
                (long long)cfg.layers, (long long)d, (long long)cfg.heads, (long long)cfg.d_ff,
                std::string(to_string(cfg.activation)).c_str(), std::string(to_string(cfg.norm)).c_str(),
                (long long)e.batch, (long long)e.seq, e.causal ? " causal" : "", threads,
                std::string(to_string(base.isa)).c_str(), backward ? "forward+backward" : "forward");
    std::printf("  cpu            %s\n", cpu_name().c_str());
    std::printf("  time per call  median %.3f ms  (min %.3f, max %.3f; %d calls)\n", med * 1e3,
                *std::min_element(times.begin(), times.end()) * 1e3, *std::max_element(times.begin(), times.end()) * 1e3,
                repeats);
    std::printf("  throughput     %.1f GFLOP/s = %.1f%% of the measured peak %.1f GFLOP/s (%s loop)\n", gflops,
                100.0 * gflops / peak.gflops, peak.gflops, peak.instr);
    std::printf("  attention      forward alone (Q·Kᵀ, softmax, P·V): median %.3f ms, %.1f GFLOP/s = %.1f%% of peak\n",
                attn_med * 1e3, attn_gflops, 100.0 * attn_gflops / peak.gflops);
    std::printf("  check          sequence 0 (%lld positions) against the reference path: %s (tolerance %.0e)  %s\n",
                (long long)S, cmp.describe().c_str(), tol, ok ? "OK" : "FAILED");
  }
  return ok ? 0 : 1;
}

}  // namespace ffn::cli
