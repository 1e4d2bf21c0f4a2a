// The encoder layer and stack (include/ffn/encoder.hpp), composed of ops:
// linear (projections with bias), the norm (src/ops/norm.hpp), dropout, the
// attention core (src/ops/attention.cpp, reference in
// src/reference/attention_reference.cpp) and the FFN sublayer (ffn::FeedForward,
// unchanged: its fused forward and backward).
//
// The valid tokens are gathered once into contiguous rows [n, d] and stay so
// through the stack: the FFN sublayer sees n tokens, attention sees the same
// rows as sequences through their offsets (both views, no copies).
#include "ffn/encoder.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "modules/attention_block.hpp"
#include "modules/layer.hpp"
#include "modules/stack_config.hpp"
#include "ops/attention.hpp"
#include "ops/linear.hpp"
#include "core/buffer_pool.hpp"
#include "modules/cache_access.hpp"
#include "core/init.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "ops/norm.hpp"
#include "core/philox.hpp"
#include "core/positions.hpp"
#include "reference/attention_reference.hpp"
#include "reference/linear_reference.hpp"

namespace ffn {

constexpr int64_t kMaxEncoderDim = int64_t(1) << 24;

void EncoderConfig::validate() const {
  if (d_model < 1 || d_model > kMaxEncoderDim) throw Error("d_model must be in [1, 2^24], got " + std::to_string(d_model));
  if (heads < 1 || d_model % heads != 0)
    throw Error("heads must divide d_model (" + std::to_string(d_model) + "), got " + std::to_string(heads));
  if (layers < 1 || layers > 4096) throw Error("layers must be in [1, 4096], got " + std::to_string(layers));
  if (norm == NormPlacement::none) throw Error("norm: an encoder layer's norm is post or pre, got none");
  if (!(dropout >= 0.0f && dropout <= 1.0f)) throw Error("dropout must be in [0, 1], got " + std::to_string(dropout));
  ffn_config().validate();
}

Config EncoderConfig::ffn_config() const { return nn::ffn_config(nn::stack_spec(*this, nn::StackKind::encoder)); }

EncoderWeights EncoderWeights::zeros(const EncoderConfig& cfg) {
  const size_t d = size_t(cfg.d_model);
  EncoderWeights w;
  EncoderLayerWeights l;
  l.in_proj_weight.assign(3 * d * d, 0.0f);
  l.out_proj_weight.assign(d * d, 0.0f);
  if (cfg.bias) {
    l.in_proj_bias.assign(3 * d, 0.0f);
    l.out_proj_bias.assign(d, 0.0f);
  }
  l.norm1_weight.assign(d, 0.0f);
  if (cfg.norm_type == NormType::layernorm) l.norm1_bias.assign(d, 0.0f);
  l.ffn = Weights::zeros(cfg.ffn_config());
  w.layers.assign(size_t(cfg.layers), l);
  if (cfg.final_norm) {
    w.norm_weight.assign(d, 0.0f);
    if (cfg.norm_type == NormType::layernorm) w.norm_bias.assign(d, 0.0f);
  }
  return w;
}

namespace {

// Scratch of the backward pass from the process's buffer pool (fresh pages
// each step would cost page faults; src/core/buffer_pool.hpp).
using Buffer = std::vector<float, nn::PoolAllocator<float>>;

using nn::check_size;

void check_weights(const EncoderConfig& cfg, const EncoderWeights& w) {
  const size_t d = size_t(cfg.d_model);
  if (w.layers.size() != size_t(cfg.layers))
    throw Error("encoder weights: expected " + std::to_string(cfg.layers) + " layers, got " + std::to_string(w.layers.size()));
  const bool ln = cfg.norm_type == NormType::layernorm;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    check_size(l.in_proj_weight, 3 * d * d, p, "self_attn.in_proj_weight");
    check_size(l.in_proj_bias, cfg.bias ? 3 * d : 0, p, "self_attn.in_proj_bias");
    check_size(l.out_proj_weight, d * d, p, "self_attn.out_proj.weight");
    check_size(l.out_proj_bias, cfg.bias ? d : 0, p, "self_attn.out_proj.bias");
    check_size(l.norm1_weight, d, p, "norm1.weight");
    check_size(l.norm1_bias, ln ? d : 0, p, "norm1.bias");
  }
  check_size(w.norm_weight, cfg.final_norm ? d : 0, "norm.weight");
  check_size(w.norm_bias, cfg.final_norm && ln ? d : 0, "norm.bias");
}

const float* ptr_or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
float* ptr_or_null(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }


using nn::PackedAttention;

nn::AttentionBlockWeights block_weights(const EncoderLayerWeights& l) {
  return {l.in_proj_weight, l.in_proj_bias, l.out_proj_weight, l.out_proj_bias, l.norm1_weight, l.norm1_bias};
}
nn::AttentionBlockGrads block_grads(EncoderLayerWeights& l) {
  return {l.in_proj_weight, l.in_proj_bias, l.out_proj_weight, l.out_proj_bias, l.norm1_weight, l.norm1_bias};
}
using PackedEncoder = std::vector<PackedAttention>;

}  // namespace

// ---- the cache --------------------------------------------------------------

struct EncoderCache::Data {
  bool filled = false;
  EncoderConfig cfg;
  int64_t batch = 0, seq = 0;
  std::vector<int64_t> pos;  // global positions of the valid tokens
  bool causal = false, training = false;
  uint64_t seed = 0;
  std::vector<nn::LayerSaved> layers;  // src/modules/layer.hpp
  std::vector<float> last, mean, rstd;  // the final norm's input and statistics
};

EncoderCache::EncoderCache() : data_(std::make_unique<Data>()) {}
EncoderCache::~EncoderCache() = default;
EncoderCache::EncoderCache(EncoderCache&&) noexcept = default;
EncoderCache& EncoderCache::operator=(EncoderCache&&) noexcept = default;
using EncoderCacheData = detail::CacheAccess::EncoderData;

EncoderCache::Data& EncoderCache::data() { return *data_; }
const EncoderCache::Data& EncoderCache::data() const { return *data_; }
size_t EncoderCache::bytes() const {
  size_t b = 0;
  for (const auto& l : data_->layers) b += l.bytes();
  return b + (data_->last.size() + data_->mean.size() + data_->rstd.size()) * sizeof(float);
}

// ---- construction -----------------------------------------------------------

Encoder::Encoder(const EncoderConfig& cfg, uint64_t seed) : cfg_(cfg) {
  cfg_.validate();
  w_ = EncoderWeights::zeros(cfg_);
  const int64_t d = cfg_.d_model;
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    auto& l = w_.layers[i];
    const uint64_t s = nn::derive_seed(seed, uint32_t(i), 2);
    nn::fill_uniform(l.in_proj_weight.data(), l.in_proj_weight.size(), float(std::sqrt(6.0 / double(4 * d))), s, 1);
    nn::fill_uniform(l.out_proj_weight.data(), l.out_proj_weight.size(), float(1.0 / std::sqrt(double(d))), s, 2);
    std::fill(l.norm1_weight.begin(), l.norm1_weight.end(), 1.0f);
    l.ffn = FeedForward(cfg_.ffn_config(), nn::derive_seed(seed, uint32_t(i), 3)).weights();
  }
  std::fill(w_.norm_weight.begin(), w_.norm_weight.end(), 1.0f);
  prepare();
}

Encoder::Encoder(const EncoderConfig& cfg, EncoderWeights weights) : cfg_(cfg), w_(std::move(weights)) {
  cfg_.validate();
  check_weights(cfg_, w_);
  prepare();
}

void Encoder::set_weights(EncoderWeights w) {
  check_weights(cfg_, w);
  w_ = std::move(w);
  prepare();
}

// The FFN sublayers own their weights (w_'s FFN parts are moved into them:
// one copy in memory); weights() puts them back together.
void Encoder::prepare() {
  const int64_t d = cfg_.d_model;
  ffn_.clear();
  auto packed = std::make_shared<PackedEncoder>();
  for (auto& l : w_.layers) {
    ffn_.emplace_back(cfg_.ffn_config(), std::move(l.ffn));  // checks the FFN's sizes
    l.ffn = Weights{};
    packed->push_back(PackedAttention::self(block_weights(l), d));
  }
  packed_ = std::move(packed);
}

Encoder Encoder::converted(WeightDtype dtype, const std::vector<int64_t>& layers,
                           const std::vector<Int8Options>& int8,
                           const std::vector<Int8Options>& attention_int8) const {
  Encoder e = *this;
  for (int64_t l : layers)
    if (l < 0 || l >= cfg_.layers)
      throw Error("layer " + std::to_string(l) + " does not exist (0.." + std::to_string(cfg_.layers - 1) + ")");
  if (!int8.empty() && int64_t(int8.size()) != cfg_.layers)
    throw Error("int8 options for " + std::to_string(int8.size()) + " layers, expected " + std::to_string(cfg_.layers));
  if (!attention_int8.empty() && int64_t(attention_int8.size()) != cfg_.layers)
    throw Error("attention int8 options for " + std::to_string(attention_int8.size()) + " layers, expected " +
                std::to_string(cfg_.layers));
  if (!attention_int8.empty() && dtype != WeightDtype::int8)
    throw Error("attention int8 options given for dtype " + std::string(to_string(dtype)) + ", expected int8");
  auto packed = std::make_shared<PackedEncoder>(*static_cast<const PackedEncoder*>(packed_.get()));
  const int64_t d = cfg_.d_model;
  for (size_t i = 0; i < e.ffn_.size(); ++i)
    if (layers.empty() || std::find(layers.begin(), layers.end(), int64_t(i)) != layers.end()) {
      try {
        e.ffn_[i] = int8.empty() ? e.ffn_[i].converted(dtype) : e.ffn_[i].converted(dtype, int8[i]);
        PackedAttention& p = (*packed)[i];
        p.in.set_int8(nullptr);  // none left from an earlier conversion
        p.out.set_int8(nullptr);
        if (!attention_int8.empty()) {
          const EncoderLayerWeights& l = w_.layers[i];
          p.in.set_int8(std::make_shared<const nn::Int8Linear>(nn::quantize_linear(
              l.in_proj_weight.data(), d, 3 * d, attention_int8[i].fp32_input_channels, "in_proj_weight")));
          p.out.set_int8(std::make_shared<const nn::Int8Linear>(
              nn::quantize_linear(l.out_proj_weight.data(), d, d, {}, "out_proj.weight")));
        }
      } catch (const Error& err) {
        throw Error("layer " + std::to_string(i) + ": " + err.what());
      }
    }
  e.packed_ = std::move(packed);
  return e;
}

EncoderWeights Encoder::weights() const {
  EncoderWeights w = w_;
  for (size_t i = 0; i < w.layers.size(); ++i) w.layers[i].ffn = ffn_[i].weights();
  return w;
}

double Encoder::forward_flops(const Shape& shape, bool causal) const {
  const double d = double(cfg_.d_model);
  double tokens = 0, pairs = 0;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const double len = double(shape.lengths.empty() ? shape.seq : shape.lengths[size_t(b)]);
    tokens += len;
    pairs += causal ? len * (len + 1) / 2 : len * len;
  }
  const double per_layer = 2.0 * tokens * 4.0 * d * d + 4.0 * pairs * d;
  return double(cfg_.layers) * (per_layer + ffn_[0].forward_flops(int64_t(tokens)));
}

// ---- forward and backward ---------------------------------------------------

namespace {

struct Rows {
  std::vector<int64_t> pos;  // global positions b·S + s of the valid tokens
  std::vector<int64_t> off;  // B + 1 row offsets of the sequences
};

Rows valid_rows(const Shape& s) {
  if (s.layout != Layout::tokens) throw Error("layout: the encoder takes the tokens layout [B, S, d_model]");
  Rows r;
  r.pos = nn::valid_positions(s, &r.off);
  return r;
}

}  // namespace

namespace {

nn::AttentionBlockConfig block_config(const EncoderConfig& c) {
  return nn::attention_config(nn::stack_spec(c, nn::StackKind::encoder), 0);
}

}  // namespace

void Encoder::forward(const float* x, float* y, const Shape& shape, const EncoderRunOptions& opts,
                      EncoderCache* cache) const {
  const Rows rows = valid_rows(shape);
  const nn::Context ctx(opts);
  const int threads = ctx.threads();
  const int64_t n = int64_t(rows.pos.size()), d = cfg_.d_model;
  if (shape.positions() > 0 && (!x || !y)) throw Error("forward: x and y must not be null");
  if (opts.compute == Compute::bf16 && (opts.training || cache))
    throw Error("forward: compute bf16 is for inference only (training and a cache need compute fp32)");
  if (opts.position_bias && (opts.training || cache))
    throw Error("forward: a relative position bias (position_bias) is inference only, without a cache");
  if (opts.position_bias && shape.seq > opts.position_bias_span)
    throw Error("forward: sequences of " + std::to_string(shape.seq) + " positions, past the position bias's span of " +
                std::to_string(opts.position_bias_span));
  const auto& packed = *static_cast<const PackedEncoder*>(packed_.get());
  // RunOptions::interrupted in inference: the sequences in groups of about
  // 2^31 flops per thread, each through every layer (asking before each of
  // its sublayers), so a stop need not wait for a whole sublayer of a large
  // batch. In inference a sequence's result does not depend on the others
  // (Encoder.ASequenceGivesTheSameBitsAloneOrInABatch): the same bits. Not
  // in training (dropout keys are row numbers of the whole batch), with a
  // cache (it holds the whole batch's rows) or with an observer (it is
  // called once per layer with every row).
  if (opts.interrupted && !opts.training && !cache && !opts.ffn_input && !opts.attention_input && shape.batch > 1) {
    const double per_sequence = std::max(forward_flops(Shape{1, shape.seq, Layout::tokens, {}}, opts.causal), 1.0);
    const int64_t group = std::max<int64_t>(1, int64_t(std::ldexp(double(threads), 31) / per_sequence));
    if (group < shape.batch) {
      const int64_t stride = shape.seq * d;
      for (int64_t b0 = 0; b0 < shape.batch; b0 += group) {
        Shape g{std::min(group, shape.batch - b0), shape.seq, Layout::tokens, {}};
        if (!shape.lengths.empty())
          g.lengths.assign(shape.lengths.begin() + b0, shape.lengths.begin() + b0 + g.batch);
        forward(x + b0 * stride, y + b0 * stride, g, opts);
      }
      return;
    }
  }
  EncoderCacheData* c = cache ? &detail::CacheAccess::data(*cache) : nullptr;
  if (c) {
    c->filled = true;
    c->cfg = cfg_;
    c->batch = shape.batch;
    c->seq = shape.seq;
    c->pos = rows.pos;
    c->causal = opts.causal;
    c->training = opts.training;
    c->seed = opts.seed;
    c->layers.resize(size_t(cfg_.layers));
  }
  // The valid rows, contiguous: x itself when it has no padding, else a
  // gathered copy; likewise the last layer writes y directly when it can.
  const bool direct = n == shape.positions();
  std::vector<float> cur, next, hbuf(size_t(n * d));
  auto buffer = [&](std::vector<float>& v) {
    v.resize(size_t(n * d));
    return v.data();
  };
  const float* in = x;
  if (!direct) {
    float* g = buffer(cur);
    nn::gather(x, nn::Addressing{d, shape.seq, Layout::tokens}, rows.pos, g);
    in = g;
  }
  // RunOptions::interrupted: asked before each sublayer (and inside the FFN
  // sublayers, which get opts); a stop leaves the cache unfilled.
  auto ask = [&] {
    if (opts.interrupted && opts.interrupted()) {
      if (c) c->filled = false;
      throw Interrupted();
    }
  };
  nn::LayerRun lr = nn::layer_run(rows.off, shape.seq, opts.training, opts.causal, opts.seed, ctx, opts);
  lr.run.rel_bias = opts.position_bias;
  lr.run.rel_span = opts.position_bias_span;
  lr.attention_input = opts.attention_input;
  lr.ffn_input = opts.ffn_input;
  lr.ask = ask;
  const nn::AttentionBlockConfig bc = block_config(cfg_);
  nn::LayerSaved scratch;  // reused by every layer in inference
  try {
    for (int64_t l = 0; l < cfg_.layers; ++l) {
      float* out = direct && l + 1 == cfg_.layers && !cfg_.final_norm ? y
                   : in == cur.data() && !cur.empty()                   ? buffer(next)
                                                                        : buffer(cur);
      const nn::LayerView view{block_weights(w_.layers[size_t(l)]), packed[size_t(l)], nullptr, nullptr, nullptr,
                               nullptr, &ffn_[size_t(l)]};
      nn::layer_forward(bc, view, l, in, out, hbuf.data(), nullptr, n, lr, c ? c->layers[size_t(l)] : scratch,
                        c != nullptr);
      in = out;
    }
  } catch (const Interrupted&) {
    if (c) c->filled = false;
    throw;
  }
  if (cfg_.final_norm) {
    std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
    float* out = direct ? y : hbuf.data();
    nn::norm_forward(ctx, cfg_.norm_type, cfg_.eps, in, n, d, w_.norm_weight.data(), ptr_or_null(w_.norm_bias), out,
                     mean.data(), rstd.data());
    if (c) {
      c->last.assign(in, in + n * d);
      c->mean = std::move(mean);
      c->rstd = std::move(rstd);
    }
    in = out;
  }
  if (!direct) {
    nn::scatter(in, nn::Addressing{d, shape.seq, Layout::tokens}, rows.pos, shape.positions(), y);
  }
}

void Encoder::backward(const float* x, const float* dy, const Shape& shape, const EncoderCache& cache, float* dx,
                       EncoderWeights& grads, const EncoderRunOptions& opts) const {
  const EncoderCacheData& c = detail::CacheAccess::data(cache);
  if (!c.filled) throw Error("backward: the cache was not filled by forward");
  const Rows rows = valid_rows(shape);
  const EncoderConfig& f = c.cfg;
  if (f != cfg_)
    throw Error("backward: the cache comes from a forward call of an encoder with other settings");
  if (c.batch != shape.batch || c.seq != shape.seq || c.pos != rows.pos)
    throw Error("backward: the cache comes from a forward call with another shape or lengths");
  if (shape.positions() > 0 && (!dy || !dx)) throw Error("backward: dy and dx must not be null");
  const nn::Context ctx(opts);
  const int64_t n = int64_t(rows.pos.size()), d = cfg_.d_model;
  // Reuse the caller's gradient buffers when they have the right sizes: every
  // element is overwritten (a fresh zeroed 4·d·(d + d_ff)·layers floats per
  // step costs page faults and a memset).
  {
    const size_t d1 = size_t(d), ln = cfg_.norm_type == NormType::layernorm ? d1 : 0, b = cfg_.bias ? 1 : 0;
    auto is = [](const std::vector<float>& v, size_t size) { return v.size() == size; };
    bool ok = grads.layers.size() == size_t(cfg_.layers) && is(grads.norm_weight, cfg_.final_norm ? d1 : 0) &&
              is(grads.norm_bias, cfg_.final_norm ? ln : 0);
    for (size_t i = 0; ok && i < grads.layers.size(); ++i) {
      const auto& a = grads.layers[i];
      ok = is(a.in_proj_weight, 3 * d1 * d1) && is(a.in_proj_bias, 3 * d1 * b) && is(a.out_proj_weight, d1 * d1) &&
           is(a.out_proj_bias, d1 * b) && is(a.norm1_weight, d1) && is(a.norm1_bias, ln);
    }
    if (!ok || n == 0) grads = EncoderWeights::zeros(cfg_);
  }

  Buffer g(size_t(n * d)), gx(size_t(n * d));
  const nn::Addressing addr{d, shape.seq, Layout::tokens};
  nn::gather(dy, addr, rows.pos, g.data());
  if (cfg_.final_norm) {
    nn::norm_backward(ctx, cfg_.norm_type, c.last.data(), c.mean.data(), c.rstd.data(), n, d, w_.norm_weight.data(),
                      g.data(), gx.data(), false, grads.norm_weight.data(), ptr_or_null(grads.norm_bias));
    std::swap(g, gx);
  }
  nn::LayerRun lr = nn::layer_run(rows.off, shape.seq, c.training, c.causal, c.seed, ctx, opts);
  // RunOptions::interrupted: asked inside the FFN sublayer's backward and
  // before the attention sublayer's.
  lr.ask = [&] {
    if (opts.interrupted && opts.interrupted()) throw Interrupted();
  };
  const nn::AttentionBlockConfig bc = block_config(cfg_);
  const auto& packed = *static_cast<const PackedEncoder*>(packed_.get());
  for (int64_t l = cfg_.layers - 1; l >= 0; --l) {
    const nn::LayerView view{block_weights(w_.layers[size_t(l)]), packed[size_t(l)], nullptr, nullptr, nullptr,
                             nullptr, &ffn_[size_t(l)]};
    nn::LayerGrads lg{block_grads(grads.layers[size_t(l)]), nullptr, grads.layers[size_t(l)].ffn};
    nn::layer_backward(bc, view, l, c.layers[size_t(l)], g.data(), gx.data(), nullptr, nullptr, n, lg, lr);
  }
  nn::scatter(g.data(), addr, rows.pos, shape.positions(), dx);
  (void)x;
}

}  // namespace ffn
