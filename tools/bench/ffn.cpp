// ffn bench (no mode flag): the FFN layer, forward or forward + backward, on
// --tokens tokens; GFLOP/s against the machine's peak measured now, and a
// check of a sample of tokens against the reference path.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench.hpp"
#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "ffn/random.hpp"

namespace ffn::cli::bench {
namespace {

// Tolerance of the bench's check: the fused path against the reference path
// of the same dtype (double accumulation; for int8 the integer reference, which
// differs only in the order of the final float sums); see tests/README.md.
constexpr double kTolerance = 1e-5;
constexpr double kToleranceInt8 = 1e-4;
// bf16 compute against its reference (operands rounded to bf16, double sums):
// the fp32 sums differ by ~1e-6, and a hidden value that lies within them of
// a bf16 rounding boundary rounds one bf16 step (2^-8 relative) the other
// way, moving an output by up to 2^-8·|h·w2| (≈ 1e-4 of the output's scale
// at the paper's sizes); tests/README.md.
constexpr double kToleranceBf16 = 1e-3;

}  // namespace

// The FFN layer's bench: the default mode.
int run_ffn(const Flags& a) {
  if (a.o_batch->count()) throw Error("--batch: needs --encoder (the FFN bench takes --tokens)");
  if (a.tokens < 1) throw Error("--tokens: expected a positive integer, got " + std::to_string(a.tokens));
  a.check_counts();
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
  ro.isa = resolve_isa(a.isa);
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
    if (estimate > kLimitSeconds && !a.yes) {
      char msg[320];
      std::snprintf(msg, sizeof msg,
                    "--tokens %lld: %d calls would take about %s (%s each, estimated from a %lld-token call), "
                    "over the %.0f s limit; pass --yes to run it anyway, or lower --tokens or --repeats",
                    (long long)a.tokens, calls, duration_str(estimate).c_str(), duration_str(per_call).c_str(),
                    (long long)trial, kLimitSeconds);
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
  ref.isa = ro.isa;
  ref.compute = compute;
  layer.forward(xs.data(), yref.data(), Shape::tokens(k), ref);
  const Comparison cmp = compare(ys.data(), yref.data(), ys.size());
  const double tol = dtype == WeightDtype::int8 ? kToleranceInt8 : bf16 ? kToleranceBf16 : kTolerance;
  const bool ok = cmp.ok(tol);
  // A low-precision layer's error against the fp32 layer on the same tokens.
  Agreement vs_fp32{0.0, 1.0};
  const bool lowp = dtype != WeightDtype::fp32 || bf16;
  if (lowp) {
    std::vector<float> y32(xs.size());
    RunOptions fast;
    fast.threads = threads;
    fast.isa = ro.isa;
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

}  // namespace ffn::cli::bench
