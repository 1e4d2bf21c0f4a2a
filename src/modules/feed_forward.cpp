// The public FeedForward: validation, initialization, the layouts and padding
// (gathering valid tokens into contiguous rows), and dispatch between the
// fused path and the reference.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <sstream>

#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "modules/cache_access.hpp"
#include "ops/forward_cache.hpp"
#include "ops/fused_forward.hpp"
#include "reference/ffn_bf16_reference.hpp"
#include "core/init.hpp"
#include "ops/norm.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/quantize.hpp"
#include "reference/ffn_int8_reference.hpp"
#include "core/philox.hpp"
#include "core/positions.hpp"
#include "reference/ffn_reference.hpp"

namespace ffn {

using nn::Addressing;
using nn::contiguous;
using nn::gather;
using nn::scatter;

// ---- config and weights -----------------------------------------------------

namespace {

// Each parameter's element count under cfg, in Weights::all()'s order (0: absent).
std::array<size_t, 8> param_sizes(const Config& cfg) {
  const size_t d = size_t(cfg.d_model), F = size_t(cfg.d_ff);
  const bool gated = is_gated(cfg.activation), norm = cfg.norm != NormPlacement::none;
  return {F * d, cfg.bias ? F : 0, gated ? F * d : 0, gated && cfg.bias ? F : 0,
          d * F, cfg.bias ? d : 0, norm ? d : 0, norm && cfg.norm_type == NormType::layernorm ? d : 0};
}

}  // namespace

Weights Weights::zeros(const Config& cfg) {
  Weights w;
  const std::array<size_t, 8> sizes = param_sizes(cfg);
  for (size_t t = 0; t < 8; ++t) w.all()[t]->assign(sizes[t], 0.0f);
  return w;
}

TensorNames TensorNames::native(const Config& cfg, const std::string& prefix) {
  TensorNames n;
  const bool gated = is_gated(cfg.activation);
  n.w1 = prefix + "linear1.weight";
  n.w2 = prefix + "linear2.weight";
  if (gated) n.wg = prefix + "gate.weight";
  if (cfg.bias) {
    n.b1 = prefix + "linear1.bias";
    n.b2 = prefix + "linear2.bias";
    if (gated) n.bg = prefix + "gate.bias";
  }
  if (cfg.norm != NormPlacement::none) {
    n.norm_weight = prefix + "norm.weight";
    if (cfg.norm_type == NormType::layernorm) n.norm_bias = prefix + "norm.bias";
  }
  return n;
}

namespace {

// Sizes checked without building a zeroed set (every training step checks
// the updated weights: a zeroed set per step was 2·d·d_ff floats of fresh pages).
void check_weights(const Config& cfg, const Weights& w) {
  static const char* const names[8] = {"w1 (linear1.weight)", "b1 (linear1.bias)",   "wg (gate.weight)",
                                       "bg (gate.bias)",      "w2 (linear2.weight)", "b2 (linear2.bias)",
                                       "norm_weight (norm.weight)", "norm_bias (norm.bias)"};
  const std::array<size_t, 8> sizes = param_sizes(cfg);
  for (size_t t = 0; t < 8; ++t) nn::check_size(*w.all()[t], sizes[t], "weights: ", names[t]);
}

// PyTorch nn.Linear's distribution: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
// weight and bias, drawn from Philox (tensor id in the high bits of the index).
void fill_uniform(std::vector<float>& v, float bound, uint64_t seed, uint64_t tensor_id) {
  nn::fill_uniform(v.data(), v.size(), bound, seed, tensor_id);
}

}  // namespace

FeedForward::FeedForward(const Config& cfg, uint64_t seed) : cfg_(cfg) {
  cfg_.validate();
  w_ = Weights::zeros(cfg_);
  const float b_in = 1.0f / std::sqrt(float(cfg_.d_model));
  const float b_hidden = 1.0f / std::sqrt(float(cfg_.d_ff));
  fill_uniform(w_.w1, b_in, seed, 1);
  fill_uniform(w_.b1, b_in, seed, 2);
  fill_uniform(w_.wg, b_in, seed, 3);
  fill_uniform(w_.bg, b_in, seed, 4);
  fill_uniform(w_.w2, b_hidden, seed, 5);
  fill_uniform(w_.b2, b_hidden, seed, 6);
  std::fill(w_.norm_weight.begin(), w_.norm_weight.end(), 1.0f);
  std::fill(w_.norm_bias.begin(), w_.norm_bias.end(), 0.0f);
  names_ = TensorNames::native(cfg_);
  prepare();
}

FeedForward::FeedForward(const Config& cfg, Weights weights, WeightDtype dtype) : cfg_(cfg), w_(std::move(weights)), dtype_(dtype) {
  cfg_.validate();
  check_weights(cfg_, w_);
  names_ = TensorNames::native(cfg_);
  prepare();
}

FeedForward::FeedForward(const Config& cfg, Weights weights, WeightDtype dtype, std::shared_ptr<const void> quant)
    : cfg_(cfg), w_(std::move(weights)), dtype_(dtype), quant_(std::move(quant)) {
  cfg_.validate();
  check_weights(cfg_, w_);
  names_ = TensorNames::native(cfg_);
  prepare();
}

FeedForward FeedForward::converted(WeightDtype dtype) const {
  FeedForward l = *this;
  l.dtype_ = dtype;
  if (dtype != WeightDtype::int8) l.fp32_inputs_.clear();
  l.prepare();
  return l;
}

FeedForward FeedForward::converted(WeightDtype dtype, const Int8Options& int8) const {
  if (dtype != WeightDtype::int8 && !int8.fp32_input_channels.empty())
    throw Error("fp32 input channels: only for int8 weights, not " + std::string(to_string(dtype)));
  FeedForward l = *this;
  l.dtype_ = dtype;
  if (l.fp32_inputs_ != int8.fp32_input_channels) {
    l.fp32_inputs_ = int8.fp32_input_channels;
    l.quant_.reset();  // quantized again, from the values this layer uses
  }
  l.prepare();
  return l;
}

namespace {

// Per channel, the largest |value| over n rows entering W1 (x, or Norm(x) for a
// pre-norm layer), each row's divided by its root mean square when `relative`.
void fold_input_peaks(const char* what, const Config& cfg, const Weights& w, const float* x, int64_t n,
                      std::vector<float>& peak, Isa isa, bool relative) {
  const int64_t d = cfg.d_model;
  if (peak.empty()) peak.assign(size_t(d), 0.0f);
  if (int64_t(peak.size()) != d)
    throw Error(std::string(what) + " has " + std::to_string(peak.size()) +
                " entries, expected d_model = " + std::to_string(d));
  std::vector<float> row(static_cast<size_t>(d));
  float mean, rstd;
  for (int64_t t = 0; t < n; ++t) {
    const float* v = x + t * d;
    if (cfg.norm == NormPlacement::pre) {
      nn::norm_forward(nn::Context(isa, 1), cfg.norm_type, cfg.eps, v, 1, d, w.norm_weight.data(),
                       w.norm_bias.empty() ? nullptr : w.norm_bias.data(), row.data(), &mean, &rstd);
      v = row.data();
    }
    float scale = 1.0f;
    if (relative) {
      double sum_sq = 0.0;
      for (int64_t j = 0; j < d; ++j) sum_sq += double(v[j]) * double(v[j]);
      if (!(sum_sq > 0.0)) continue;  // an all-zero row (or NaN) says nothing about the channels
      scale = float(1.0 / std::sqrt(sum_sq / double(d)));
    }
    for (int64_t j = 0; j < d; ++j) peak[size_t(j)] = std::max(peak[size_t(j)], std::fabs(v[j]) * scale);
  }
}

}  // namespace

void FeedForward::input_absmax(const float* x, int64_t n, std::vector<float>& absmax, Isa isa) const {
  fold_input_peaks("input_absmax: absmax", cfg_, w_, x, n, absmax, isa, false);
}

void FeedForward::input_peak_ratio(const float* x, int64_t n, std::vector<float>& ratio, Isa isa) const {
  fold_input_peaks("input_peak_ratio: ratio", cfg_, w_, x, n, ratio, isa, true);
}

Int8Options Int8Options::outliers(const std::vector<float>& absmax, float threshold, int64_t max_channels) {
  std::vector<int64_t> c;
  for (size_t j = 0; j < absmax.size(); ++j)
    if (absmax[j] > threshold) c.push_back(int64_t(j));
  std::stable_sort(c.begin(), c.end(), [&](int64_t a, int64_t b) { return absmax[size_t(a)] > absmax[size_t(b)]; });
  if (int64_t(c.size()) > max_channels) c.resize(size_t(std::max<int64_t>(0, max_channels)));
  std::sort(c.begin(), c.end());
  return Int8Options{c};
}

// int32 sums of a · q stay exact: |a| ≤ 255, |q| ≤ 127 over d_model terms.
constexpr int64_t kMaxInt8DModel = 65536;

void FeedForward::prepare() {
  if (dtype_ == WeightDtype::fp32) {
    quant_.reset();
    packed_ = nn::PackedWeights::make(cfg_, w_);
    return;
  }
  if (dtype_ == WeightDtype::int8 && cfg_.d_model > kMaxInt8DModel)
    throw Error("int8: d_model must be <= " + std::to_string(kMaxInt8DModel) + " (exact int32 sums), got " +
                std::to_string(cfg_.d_model));
  // Convert from w_ unless quant_ already holds this dtype's matrices (a
  // quantized file), then make w_ the values actually used.
  auto q = std::static_pointer_cast<const nn::QuantizedWeights>(quant_);
  if (!q || q->dtype != dtype_) {
    auto fresh = std::make_shared<nn::QuantizedWeights>();
    fresh->dtype = dtype_;
    const int64_t d = cfg_.d_model, F = cfg_.d_ff;
    std::vector<float> w1 = w_.w1, wg = w_.wg;
    if (!fp32_inputs_.empty())
      nn::split_fp32_inputs(*fresh, fp32_inputs_, w1, wg.empty() ? nullptr : &wg, d, F, "fp32 input channels");
    fresh->w1 = nn::quantize_matrix(w1, F, d, dtype_, names_.w1);
    if (!wg.empty()) fresh->wg = nn::quantize_matrix(wg, F, d, dtype_, names_.wg);
    // W2: a scale per output channel and hidden chunk (the activation's)
    fresh->w2 = nn::quantize_matrix(w_.w2, d, F, dtype_, names_.w2, nn::kQuantChunk);
    q = fresh;
    quant_ = fresh;
  }
  fp32_inputs_ = q->fp32_inputs;
  w_.w1 = nn::dequantize(q->w1, dtype_);
  if (!w_.wg.empty()) w_.wg = nn::dequantize(q->wg, dtype_);
  nn::merge_fp32_inputs(*q, w_.w1, &w_.wg, cfg_.d_model, cfg_.d_ff);
  w_.w2 = nn::dequantize(q->w2, dtype_);
  packed_ = nn::PackedWeights::make(cfg_, w_, q.get());
}

void FeedForward::set_weights(Weights w) {
  check_weights(cfg_, w);
  w_ = std::move(w);
  quant_.reset();
  prepare();
}

void FeedForward::update_weights(const std::function<void(Weights&)>& edit) {
  edit(w_);
  check_weights(cfg_, w_);
  quant_.reset();
  prepare();
}

void FeedForward::set_dropout(float hidden, float output) {
  Config c = cfg_;
  c.dropout_hidden = hidden;
  c.dropout_output = output;
  c.validate();
  cfg_ = c;
}

void FeedForward::set_shards(const DffShards& s) {
  const std::string what = "shards: ";
  s.validate(what);
  const int64_t F = s.d_ff > 0 ? s.d_ff : cfg_.d_ff;
  const auto [begin, end] = DffShards::units(F, s.count, s.first, s.last);
  if (end - begin != cfg_.d_ff)
    throw Error(what + std::to_string(s.first) + ".." + std::to_string(s.last - 1) + " of " + std::to_string(s.count) +
                " of d_ff = " + std::to_string(F) + " are hidden units [" + std::to_string(begin) + ", " +
                std::to_string(end) + "), but this layer's d_ff is " + std::to_string(cfg_.d_ff));
  shards_ = s;
  shards_.d_ff = F;
}

FeedForward FeedForward::shard(int64_t first, int64_t last) const {
  if (!shards_.whole()) throw Error("shard: this layer already holds only some shards");
  DffShards s = shards_;
  s.first = first, s.last = last, s.d_ff = cfg_.d_ff;
  s.validate("shard: ");
  const std::pair<int64_t, int64_t> units = DffShards::units(cfg_.d_ff, s.count, first, last);
  const int64_t b = units.first, e = units.second;  // (lambdas below capture them: no structured binding)
  if (b == e)
    throw Error("shard: shards " + std::to_string(first) + ".." + std::to_string(last - 1) + " of d_ff = " +
                std::to_string(cfg_.d_ff) + " hold no hidden units (fewer 256-unit chunks than shards)");
  const int64_t d = cfg_.d_model, F = cfg_.d_ff, n = e - b;
  Config c = cfg_;
  c.d_ff = n;
  Weights w;
  auto rows = [&](const std::vector<float>& v, int64_t width) {
    return v.empty() ? v : std::vector<float>(v.begin() + b * width, v.begin() + e * width);
  };
  w.w1 = rows(w_.w1, d), w.wg = rows(w_.wg, d), w.b1 = rows(w_.b1, 1), w.bg = rows(w_.bg, 1);
  w.w2.resize(size_t(d * n));
  for (int64_t o = 0; o < d; ++o)
    std::copy(w_.w2.begin() + o * F + b, w_.w2.begin() + o * F + e, w.w2.begin() + o * n);
  w.b2 = w_.b2, w.norm_weight = w_.norm_weight, w.norm_bias = w_.norm_bias;
  // bf16 / fp16 values convert back to the same bits; int8 is sliced as
  // stored (its scales need not be max|w|/127 of these values: a file's).
  FeedForward l = dtype_ == WeightDtype::int8
                ? FeedForward(c, std::move(w), dtype_,
                        nn::slice_hidden(*static_cast<const nn::QuantizedWeights*>(quant_.get()), d, F, b, e))
                : FeedForward(c, std::move(w), dtype_);
  l.names_ = names_;
  l.set_shards(s);
  return l;
}

double FeedForward::forward_flops(int64_t t) const {
  const double per_token = 2.0 * double(cfg_.d_model) * double(cfg_.d_ff) * (is_gated(cfg_.activation) ? 3 : 2);
  return per_token * double(t);
}

// ---- forward and backward ----------------------------------------------------



namespace {


// The two stages' common checks.
void check_stage(const char* what, WeightDtype dtype, const Shape& shape, const float* x, const void* out,
                 const RunOptions& opts) {
  if (shape.positions() > 0 && (!x || !out)) throw Error(std::string(what) + ": buffers must not be null");
  if (opts.path == Path::reference) throw Error(std::string(what) + ": the fast path only (path reference)");
  if (dtype != WeightDtype::fp32 && opts.training)
    throw Error(std::string(what) + ": a layer with " + std::string(to_string(dtype)) + " weights is for inference only");
  if (opts.compute == Compute::bf16 && (opts.training || dtype == WeightDtype::int8))
    throw Error(std::string(what) + ": compute bf16 is for inference with fp32, bf16 or fp16 weights");
}

// The valid rows of one call: x as rows (gathered unless the layout already
// is them) and where y's rows go (scattered back, padding zero, by finish).
struct ValidRows {
  const Addressing addr;
  const bool direct;
  std::vector<float> xin, yout;
  const float* x;
  float* y;
  ValidRows(const float* x_in, float* y_out, const Shape& shape, const std::vector<int64_t>& pos, int64_t d)
      : addr{d, shape.seq, shape.layout}, direct(contiguous(shape, pos)), x(x_in), y(y_out) {
    if (direct) return;
    xin.resize(pos.size() * size_t(d));
    gather(x_in, addr, pos, xin.data());
    x = xin.data();
    if (y_out) yout.resize(xin.size()), y = yout.data();
  }
  void finish(const std::vector<int64_t>& pos, const Shape& shape, float* y_out) const {
    if (!direct && y_out) scatter(yout.data(), addr, pos, shape.positions(), y_out);
  }
};

// Saved tensors live in the cache (see ForwardCache in ffn/feed_forward.hpp): sized for
// this call, the call's settings recorded; null without a cache.
// RunOptions::partition.token_slices: empty, or 0 = s_0 <= ... <= s_k = n.
void check_token_slices(const std::vector<int64_t>& b, int64_t n) {
  if (b.empty()) return;
  bool ok = b.size() >= 2 && b.front() == 0 && b.back() == n;
  for (size_t i = 1; ok && i < b.size(); ++i) ok = b[i - 1] <= b[i];
  if (!ok)
    throw Error("token_slices: expected non-decreasing boundaries from 0 to the " + std::to_string(n) +
                " valid tokens, got " + shape_str(b));
}

// The dropout keys of the valid tokens: their positions, shifted by
// RunOptions::partition.position_offset (a data-parallel rank's first row in the batch).
std::vector<int64_t> dropout_keys(std::vector<int64_t> pos, int64_t offset) {
  if (offset < 0) throw Error("position_offset: expected a non-negative integer, got " + std::to_string(offset));
  if (offset != 0)
    for (int64_t& p : pos) p += offset;
  return pos;
}

ForwardCacheData* begin_cache(ForwardCache* cache, const Config& cfg, const Shape& shape,
                                const std::vector<int64_t>& pos, const RunOptions& opts) {
  if (!cache) return nullptr;
  ForwardCacheData* c = &detail::CacheAccess::data(*cache);
  const int64_t n = int64_t(pos.size()), d = cfg.d_model, F = cfg.d_ff;
  c->filled = true;
  c->training = opts.training;
  c->seed = opts.seed;
  c->position_offset = opts.partition.position_offset;
  c->pos = pos;
  // resize, not assign: both paths write every saved element, and a cache
  // reused across steps then costs no [T, d_ff] zero-fill.
  c->z1.resize(size_t(n * F));
  c->zg.resize(is_gated(cfg.activation) ? size_t(n * F) : 0);
  c->mean.resize(cfg.norm == NormPlacement::pre ? size_t(n) : 0);
  c->rstd.resize(cfg.norm != NormPlacement::none ? size_t(n) : 0);
  c->cfg = cfg;
  c->layout = shape.layout;
  c->batch = shape.batch;
  c->seq = shape.seq;
  c->xhat.resize(cfg.norm == NormPlacement::post ? size_t(n * d) : 0);
  return c;
}

// Rows per piece of a forward whose caller may stop it (RunOptions::interrupted):
// about 2^29 flops per thread (a few milliseconds: what a stop waits for at
// most), in whole token blocks for every thread (so the fused kernel's
// work per thread is the same as in one call; no bit depends on it).
int64_t interruptible_rows(double flops_per_row, int threads, int64_t token_block) {
  const int64_t unit = token_block * std::max(threads, 1);
  const int64_t rows = int64_t(std::ldexp(double(std::max(threads, 1)), 29) / std::max(flops_per_row, 1.0));
  return (std::max(rows, unit) + unit - 1) / unit * unit;
}

reference::Params<float> params_of(const Weights& w) {
  auto p = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  return {p(w.w1), p(w.b1), p(w.wg), p(w.bg), p(w.w2), p(w.b2), p(w.norm_weight), p(w.norm_bias)};
}

}  // namespace

void FeedForward::forward(const float* x, float* y, const Shape& shape, const RunOptions& opts,
                          ForwardCache* cache) const {
  forward_impl(nullptr, x, y, shape, opts, cache);
}

void FeedForward::forward_impl(const nn::Context* caller, const float* x, float* y, const Shape& shape,
                               const RunOptions& opts, ForwardCache* cache) const {
  const std::vector<int64_t> pos = nn::valid_positions(shape);
  const int threads = caller ? caller->threads() : nn::thread_count(opts);
  const int64_t n = int64_t(pos.size());
  const int64_t d = cfg_.d_model;
  if (shape.positions() > 0 && (!x || !y)) throw Error("forward: x and y must not be null");
  if (!shards_.whole())
    throw Error("forward: this layer holds shards " + std::to_string(shards_.first) + ".." +
                std::to_string(shards_.last - 1) + " of " + std::to_string(shards_.count) +
                " of d_ff; run it with forward_partial and forward_tail");
  if (dtype_ != WeightDtype::fp32 && (opts.training || cache))
    throw Error("forward: a layer with " + std::string(to_string(dtype_)) +
                " weights is for inference only (training needs fp32 weights)");
  if (opts.compute == Compute::bf16 && (opts.training || cache))
    throw Error("forward: compute bf16 is for inference only (training and a forward cache need compute fp32)");
  if (opts.compute == Compute::bf16 && dtype_ == WeightDtype::int8)
    throw Error("forward: compute bf16 needs fp32, bf16 or fp16 weights (this layer's are int8)");

  const std::vector<int64_t> keys = dropout_keys(pos, opts.partition.position_offset);
  ForwardCacheData* c = begin_cache(cache, cfg_, shape, pos, opts);

  const ValidRows rows(x, y, shape, pos, d);
  const float* xr = rows.x;
  float* yr = rows.y;
  // The call's one execution context, the enclosing call's if there is one:
  // the fused path's (the reference path runs without kernels).
  std::optional<nn::Context> own;
  const nn::Context* ctx = nullptr;
  if (opts.path != Path::reference) ctx = caller ? caller : &own.emplace(opts.isa, threads);
  // Valid rows [r0, r0 + m): each row's result depends on that row alone
  // (PerIsa.TokenResultIndependentOfTheBatch), so any cut gives the same bits.
  auto run = [&](int64_t r0, int64_t m) {
    const float* xi = xr + r0 * d;
    float* yi = yr + r0 * d;
    const int64_t* ki = keys.data() + r0;
    auto at = [&](auto& v, int64_t width) { return v.empty() ? nullptr : v.data() + r0 * width; };
    const int64_t F = cfg_.d_ff;
    if (opts.path == Path::reference && opts.compute == Compute::bf16) {
      reference::forward_bf16(cfg_, params_of(w_), xi, m, yi);
    } else if (opts.path == Path::reference && dtype_ == WeightDtype::int8) {
      const auto& q = *static_cast<const nn::QuantizedWeights*>(quant_.get());
      reference::forward_int8(cfg_, q, params_of(w_), xi, m, yi);
    } else if (opts.path == Path::reference) {
      reference::Saved<float> s;
      if (c) s = {at(c->z1, F), at(c->zg, F), at(c->mean, 1), at(c->rstd, 1), at(c->xhat, d)};
      reference::forward(cfg_, params_of(w_), xi, m, ki, {opts.training, opts.seed}, yi, c ? &s : nullptr);
    } else {
      nn::FusedSaved s;
      if (c) s = {at(c->z1, F), at(c->zg, F), at(c->mean, 1), at(c->rstd, 1), at(c->xhat, d)};
      const auto& packed = *static_cast<const nn::PackedWeights*>(packed_.get());
      nn::fused_forward(*ctx, cfg_, w_, packed, xi, m, ki, opts.training, opts.seed, yi,
                        c ? &s : nullptr, opts.compute, nn::FusedSplit{shards_});
    }
  };
  if (!opts.interrupted) {
    if (n > 0) run(0, n);
  } else {
    // A caller that may stop the call: the rows in pieces, asking before each.
    const int64_t block = ctx ? ctx->kernels().token_block : 1;
    const int64_t step = interruptible_rows(forward_flops(1), threads, block);
    try {
      for (int64_t r0 = 0; r0 < n; r0 += step) {
        if (opts.interrupted()) throw Interrupted();
        run(r0, std::min(step, n - r0));
      }
    } catch (const Interrupted&) {
      if (c) c->filled = false;  // its rows are partly written: backward must refuse it
      throw;
    }
  }
  rows.finish(pos, shape, y);
}


void FeedForward::forward_partial(const float* x, const Shape& shape, float* partial, const RunOptions& opts,
                            ForwardCache* cache) const {
  check_stage("forward_partial", dtype_, shape, x, partial, opts);
  if (cache && (dtype_ != WeightDtype::fp32 || opts.compute != Compute::fp32))
    throw Error("forward_partial: a cache (for backward) needs fp32 weights and compute fp32");
  const std::vector<int64_t> pos = nn::valid_positions(shape);
  const int64_t n = int64_t(pos.size()), d = cfg_.d_model;
  const std::vector<int64_t> keys = dropout_keys(pos, opts.partition.position_offset);
  ForwardCacheData* c = begin_cache(cache, cfg_, shape, pos, opts);
  if (n == 0) return;
  auto ptr = [](auto& v) { return v.empty() ? nullptr : v.data(); };
  nn::FusedSaved s;
  if (c) s = {ptr(c->z1), ptr(c->zg), ptr(c->mean), cfg_.norm == NormPlacement::pre ? ptr(c->rstd) : nullptr, nullptr};
  const ValidRows rows(x, nullptr, shape, pos, d);
  const auto& packed = *static_cast<const nn::PackedWeights*>(packed_.get());
  nn::FusedSplit split{shards_};
  split.partial = partial;
  nn::fused_forward(nn::Context(opts.isa, nn::thread_count(opts)), cfg_, w_, packed, rows.x, n, keys.data(),
                    opts.training, opts.seed, nullptr, c ? &s : nullptr, opts.compute, split);
}

void FeedForward::forward_tail(const float* x, const Shape& shape, const float* sum, float* y, const RunOptions& opts,
                         ForwardCache* cache) const {
  check_stage("forward_tail", dtype_, shape, x, y, opts);
  if (cache && !detail::CacheAccess::data(*cache).filled) throw Error("forward_tail: the cache was not filled by forward_partial");
  const std::vector<int64_t> pos = nn::valid_positions(shape);
  const int64_t n = int64_t(pos.size()), d = cfg_.d_model;
  if (n > 0 && !sum) throw Error("forward_tail: buffers must not be null");
  const std::vector<int64_t> keys = dropout_keys(pos, opts.partition.position_offset);
  const ValidRows rows(x, y, shape, pos, d);
  const float* xr = rows.x;
  float* yr = rows.y;
  if (n > 0) {
    const auto& packed = *static_cast<const nn::PackedWeights*>(packed_.get());
    nn::FusedSplit split{shards_};
    split.sum = sum;
    ForwardCacheData* c = cache ? &detail::CacheAccess::data(*cache) : nullptr;  // the post norm's statistics
    nn::FusedSaved s;
    if (c && cfg_.norm == NormPlacement::post) s = {nullptr, nullptr, nullptr, c->rstd.data(), c->xhat.data()};
    nn::fused_forward(nn::Context(opts.isa, nn::thread_count(opts)), cfg_, w_, packed, xr, n, keys.data(),
                      opts.training, opts.seed, yr, c ? &s : nullptr, opts.compute, split);
  }
  rows.finish(pos, shape, y);
}

void FeedForward::backward(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache, float* dx,
                     Weights& grads, const RunOptions& opts) const {
  if (!shards_.whole())
    throw Error("backward: this layer holds shards " + std::to_string(shards_.first) + ".." +
                std::to_string(shards_.last - 1) + " of " + std::to_string(shards_.count) +
                " of d_ff; run it with backward_partial and backward_finish");
  backward_impl(nullptr, x, dy, shape, cache, dx, grads, opts, nullptr, nullptr);
}

void FeedForward::backward_partial(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache,
                             float* din_partial, Weights& grads, const RunOptions& opts) const {
  if (opts.path == Path::reference) throw Error("backward_partial: the fast path only (path reference)");
  if (shape.positions() > 0 && !din_partial) throw Error("backward_partial: buffers must not be null");
  backward_impl(nullptr, x, dy, shape, cache, nullptr, grads, opts, din_partial, nullptr);
}

void FeedForward::backward_finish(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache,
                            const float* din_sum, float* dx, Weights& grads, const RunOptions& opts) const {
  if (opts.path == Path::reference) throw Error("backward_finish: the fast path only (path reference)");
  if (shape.positions() > 0 && !din_sum) throw Error("backward_finish: buffers must not be null");
  backward_impl(nullptr, x, dy, shape, cache, dx, grads, opts, nullptr, din_sum);
}

void FeedForward::backward_impl(const nn::Context* caller, const float* x, const float* dy, const Shape& shape,
                                const ForwardCache& cache, float* dx, Weights& grads, const RunOptions& opts,
                                float* din_partial, const float* din_sum) const {
  if (dtype_ != WeightDtype::fp32)
    throw Error("backward: a layer with " + std::string(to_string(dtype_)) +
                " weights is for inference only (training needs fp32 weights)");
  const ForwardCacheData& c = detail::CacheAccess::data(cache);
  if (!c.filled) throw Error("backward: the cache was not filled by forward");
  const std::vector<int64_t> pos = nn::valid_positions(shape);
  const Config& f = c.cfg;
  if (f.d_model != cfg_.d_model || f.d_ff != cfg_.d_ff || f.activation != cfg_.activation ||
      f.bias != cfg_.bias || f.norm != cfg_.norm || f.norm_type != cfg_.norm_type || f.eps != cfg_.eps ||
      f.dropout_hidden != cfg_.dropout_hidden || f.dropout_output != cfg_.dropout_output) {
    throw Error("backward: the cache comes from a forward call of a layer with other settings");
  }
  if (c.layout != shape.layout || c.batch != shape.batch || c.seq != shape.seq || c.pos != pos) {
    throw Error("backward: the cache comes from a forward call with another shape, layout or lengths");
  }
  const int threads = caller ? caller->threads() : nn::thread_count(opts);
  const int64_t n = int64_t(pos.size());
  const int64_t d = cfg_.d_model;
  check_token_slices(opts.partition.token_slices, n);
  const std::vector<int64_t> keys = dropout_keys(pos, c.position_offset);
  // Reuse the caller's gradient buffers when they have the right sizes (both
  // paths overwrite every element); allocating 2·d·d_ff fresh zeroed floats per
  // call costs more than the arithmetic of a small batch.
  {
    const std::array<size_t, 8> sizes = param_sizes(cfg_);
    for (size_t t = 0; t < 8; ++t) {
      std::vector<float>& g = *grads.all()[t];
      if (g.size() != sizes[t]) g.assign(sizes[t], 0.0f);
      if (n == 0) std::fill(g.begin(), g.end(), 0.0f);
    }
  }

  const bool direct = contiguous(shape, pos);
  std::vector<float> xin, dyin, dxout;
  const float* xr = x;
  const float* dyr = dy;
  float* dxr = dx;
  const Addressing addr{d, shape.seq, shape.layout};
  if (!direct) {
    xin.resize(size_t(n * d));
    dyin.resize(size_t(n * d));
    dxout.resize(size_t(n * d));
    gather(x, addr, pos, xin.data());
    gather(dy, addr, pos, dyin.data());
    xr = xin.data();
    dyr = dyin.data();
    dxr = dxout.data();
  }
  auto cptr = [](const auto& v) { return v.empty() ? nullptr : const_cast<float*>(v.data()); };
  auto gptr = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  if (n > 0 && opts.path == Path::reference) {
    if (opts.interrupted && opts.interrupted()) throw Interrupted();  // the reference is asked once, before
    // Rows [r0, r1) into gw (zeros for no rows).
    auto slice = [&](int64_t r0, int64_t r1, Weights& gw) {
      if (r0 == r1) {
        for (std::vector<float>* v : gw.all()) std::fill(v->begin(), v->end(), 0.0f);
        return;
      }
      auto at = [&](const auto& v, int64_t width) { return v.empty() ? nullptr : cptr(v) + r0 * width; };
      const int64_t F = cfg_.d_ff;
      reference::Saved<float> s{at(c.z1, F), at(c.zg, F), at(c.mean, 1), at(c.rstd, 1), at(c.xhat, d)};
      reference::Grads<float> g{gptr(gw.w1), gptr(gw.b1), gptr(gw.wg), gptr(gw.bg),
                                gptr(gw.w2), gptr(gw.b2), gptr(gw.norm_weight), gptr(gw.norm_bias)};
      reference::backward(cfg_, params_of(w_), xr + r0 * d, r1 - r0, keys.data() + r0, {c.training, c.seed}, s,
                          dyr + r0 * d, dxr + r0 * d, g);
    };
    const std::vector<int64_t>& b = opts.partition.token_slices;
    if (b.empty()) {
      slice(0, n, grads);
    } else {  // each slice's gradients, added over the slices' tree
      auto visit = [&](auto& self, size_t lo, size_t hi, Weights& out) -> void {
        if (hi - lo == 1) return slice(b[lo], b[lo + 1], out);
        const size_t mid = (lo + hi) / 2;
        self(self, lo, mid, out);
        Weights right = out;
        self(self, mid, hi, right);
        for (size_t t = 0; t < 8; ++t) {
          std::vector<float>& o = *out.all()[t];
          nn::add_rows(o.data(), right.all()[t]->data(), int64_t(o.size()));
        }
      };
      visit(visit, 0, b.size() - 1, grads);
    }
  } else if (n > 0) {
    const nn::FusedSaved s{cptr(c.z1), cptr(c.zg), cptr(c.mean), cptr(c.rstd), cptr(c.xhat)};
    const nn::FusedGrads g{gptr(grads.w1), gptr(grads.b1), gptr(grads.wg), gptr(grads.bg),
                           gptr(grads.w2), gptr(grads.b2), gptr(grads.norm_weight), gptr(grads.norm_bias)};
    const auto& packed = *static_cast<const nn::PackedWeights*>(packed_.get());
    nn::FusedSplit split{shards_};
    split.partial = din_partial;
    split.sum = din_sum;
    std::optional<nn::Context> own;  // the enclosing call's context, or the call's own
    const nn::Context& ctx = caller ? *caller : own.emplace(opts.isa, threads, Path::automatic, &opts.interrupted);
    nn::fused_backward(ctx, cfg_, w_, packed, xr, n,
                       keys.data(), c.training, c.seed, s, dyr, dxr, g, split, opts.partition.token_slices);
  }
  if (!direct && dx) scatter(dxout.data(), addr, pos, shape.positions(), dx);
}

}  // namespace ffn
