// The decoder layer and stack (include/ffn/decoder.hpp): per layer the
// causal self-attention block, the cross-attention block over the memory
// (src/modules/attention_block.hpp) and the FFN sublayer (ffn::FeedForward),
// on the target's valid rows gathered once, the memory's valid rows likewise.
// Generation keeps, per layer, the memory's K|V and each live sequence's
// self-attention K|V rows (DecoderState), and runs the same blocks on one
// new row per sequence.
#include "ffn/decoder.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/isa.hpp"
#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "modules/cache_access.hpp"
#include "core/init.hpp"
#include "core/philox.hpp"
#include "core/positions.hpp"
#include "modules/attention_block.hpp"
#include "modules/layer.hpp"
#include "modules/stack_config.hpp"
#include "ops/norm.hpp"

namespace ffn {

namespace {

const float* ptr_or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
float* ptr_or_null(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

AttentionWeights attention_zeros(size_t d, bool bias) {
  AttentionWeights a;
  a.in_proj_weight.assign(3 * d * d, 0.0f);
  a.out_proj_weight.assign(d * d, 0.0f);
  if (bias) {
    a.in_proj_bias.assign(3 * d, 0.0f);
    a.out_proj_bias.assign(d, 0.0f);
  }
  return a;
}

nn::AttentionBlockConfig block_config(const DecoderConfig& c) {
  return nn::attention_config(nn::stack_spec(c, nn::StackKind::seq2seq_decoder), 0);
}
nn::AttentionBlockWeights self_weights(const DecoderLayerWeights& l) {
  const auto& a = l.self_attn;
  return {a.in_proj_weight, a.in_proj_bias, a.out_proj_weight, a.out_proj_bias, l.norm1_weight, l.norm1_bias};
}
nn::AttentionBlockWeights cross_weights(const DecoderLayerWeights& l) {
  const auto& a = l.cross_attn;
  return {a.in_proj_weight, a.in_proj_bias, a.out_proj_weight, a.out_proj_bias, l.norm2_weight, l.norm2_bias};
}
nn::AttentionBlockGrads self_grads(DecoderLayerWeights& l) {
  auto& a = l.self_attn;
  return {a.in_proj_weight, a.in_proj_bias, a.out_proj_weight, a.out_proj_bias, l.norm1_weight, l.norm1_bias};
}
nn::AttentionBlockGrads cross_grads(DecoderLayerWeights& l) {
  auto& a = l.cross_attn;
  return {a.in_proj_weight, a.in_proj_bias, a.out_proj_weight, a.out_proj_bias, l.norm2_weight, l.norm2_bias};
}

struct PackedLayer {
  nn::PackedAttention self, cross;
};
using PackedDecoder = std::vector<PackedLayer>;

// Layer l's view: its self- and cross-attention and FFN sublayers.
nn::LayerView layer_view(const DecoderLayerWeights& lw, const PackedLayer& p, const nn::AttentionBlockWeights& cw,
                         const FeedForward& ffn, const float* cross_projected = nullptr) {
  return {self_weights(lw), p.self, &cw, &p.cross, cross_projected, nullptr, &ffn};
}

}  // namespace

DecoderWeights DecoderWeights::zeros(const DecoderConfig& cfg) {
  const size_t d = size_t(cfg.d_model);
  const bool ln = cfg.norm_type == NormType::layernorm;
  DecoderLayerWeights l;
  l.self_attn = attention_zeros(d, cfg.bias);
  l.cross_attn = attention_zeros(d, cfg.bias);
  l.norm1_weight.assign(d, 0.0f);
  l.norm2_weight.assign(d, 0.0f);
  if (ln) {
    l.norm1_bias.assign(d, 0.0f);
    l.norm2_bias.assign(d, 0.0f);
  }
  l.ffn = Weights::zeros(cfg.ffn_config());
  DecoderWeights w;
  w.layers.assign(size_t(cfg.layers), l);
  if (cfg.final_norm) {
    w.norm_weight.assign(d, 0.0f);
    if (ln) w.norm_bias.assign(d, 0.0f);
  }
  return w;
}

namespace {

void check_weights(const DecoderConfig& cfg, const DecoderWeights& w) {
  const size_t d = size_t(cfg.d_model);
  if (w.layers.size() != size_t(cfg.layers))
    throw Error("decoder weights: expected " + std::to_string(cfg.layers) + " layers, got " + std::to_string(w.layers.size()));
  const bool ln = cfg.norm_type == NormType::layernorm;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const auto& [a, name] : {std::pair{&l.self_attn, "self_attn."}, std::pair{&l.cross_attn, "multihead_attn."}}) {
      nn::check_size(a->in_proj_weight, 3 * d * d, p + name, "in_proj_weight");
      nn::check_size(a->in_proj_bias, cfg.bias ? 3 * d : 0, p + name, "in_proj_bias");
      nn::check_size(a->out_proj_weight, d * d, p + name, "out_proj.weight");
      nn::check_size(a->out_proj_bias, cfg.bias ? d : 0, p + name, "out_proj.bias");
    }
    nn::check_size(l.norm1_weight, d, p, "norm1.weight");
    nn::check_size(l.norm1_bias, ln ? d : 0, p, "norm1.bias");
    nn::check_size(l.norm2_weight, d, p, "norm2.weight");
    nn::check_size(l.norm2_bias, ln ? d : 0, p, "norm2.bias");
  }
  nn::check_size(w.norm_weight, cfg.final_norm ? d : 0, "norm.weight");
  nn::check_size(w.norm_bias, cfg.final_norm && ln ? d : 0, "norm.bias");
}

}  // namespace

// ---- the caches ---------------------------------------------------------------

struct DecoderCache::Data {
  bool filled = false;
  DecoderConfig cfg;
  Shape shape, memory_shape;
  bool causal = true, training = false;
  uint64_t seed = 0;
  std::vector<nn::LayerSaved> layers;  // src/modules/layer.hpp
  std::vector<float> last, mean, rstd;  // the final norm's input and statistics
};

using DecoderCacheData = detail::CacheAccess::DecoderData;

DecoderCache::DecoderCache() : data_(std::make_unique<Data>()) {}
DecoderCache::~DecoderCache() = default;
DecoderCache::DecoderCache(DecoderCache&&) noexcept = default;
DecoderCache& DecoderCache::operator=(DecoderCache&&) noexcept = default;
DecoderCache::Data& DecoderCache::data() { return *data_; }
const DecoderCache::Data& DecoderCache::data() const { return *data_; }
size_t DecoderCache::bytes() const {
  size_t b = 0;
  for (const auto& l : data_->layers) b += l.bytes();
  return b + (data_->last.size() + data_->mean.size() + data_->rstd.size()) * sizeof(float);
}

struct DecoderState::Data {
  int64_t d = 0, layers = 0;
  std::vector<std::vector<float>> memory_kv;  // per layer [m, 2d]
  std::vector<int64_t> memory_off;            // B + 1
  int64_t memory_S = 0;
  std::vector<int64_t> src;                   // per live sequence: its source
  nn::KvCache self;                           // the self-attention's keys and values, paged
};

DecoderState::DecoderState() : data_(std::make_unique<Data>()) {}
DecoderState::~DecoderState() = default;
DecoderState::DecoderState(DecoderState&&) noexcept = default;
DecoderState& DecoderState::operator=(DecoderState&&) noexcept = default;
int64_t DecoderState::live() const { return int64_t(data_->src.size()); }
namespace {
void check_live(int64_t i, int64_t live, const char* what) {
  if (i < 0 || i >= live)
    throw Error(std::string(what) + ": live sequence " + std::to_string(i) + " does not exist (" + std::to_string(live) +
                " live)");
}
}  // namespace
int64_t DecoderState::length(int64_t i) const {
  check_live(i, live(), "length");
  return data_->self.length(i);
}
int64_t DecoderState::source(int64_t i) const {
  check_live(i, live(), "source");
  return data_->src[size_t(i)];
}
int64_t DecoderState::capacity() const { return data_->self.capacity(); }
size_t DecoderState::bytes() const {
  size_t b = data_->self.bytes();
  for (const auto& v : data_->memory_kv) b += v.size() * sizeof(float);
  return b;
}

void DecoderState::select(const std::vector<int64_t>& from) {
  Data& s = *data_;
  for (int64_t f : from)
    if (f < 0 || f >= live()) throw Error("select: live sequence " + std::to_string(f) + " does not exist (" +
                                          std::to_string(live()) + " live)");
  std::vector<int64_t> src;
  for (int64_t f : from) src.push_back(s.src[size_t(f)]);
  s.self.select(from);  // the first to continue a parent takes its pages; repeats copy them
  s.src = std::move(src);
}

// ---- construction ---------------------------------------------------------------

Decoder::Decoder(const DecoderConfig& cfg, uint64_t seed) : cfg_(cfg) {
  cfg_.validate();
  w_ = DecoderWeights::zeros(cfg_);
  const int64_t d = cfg_.d_model;
  for (size_t i = 0; i < w_.layers.size(); ++i) {
    auto& l = w_.layers[i];
    const uint64_t s = nn::derive_seed(seed, uint32_t(i), 2);
    int stream = 1;
    for (AttentionWeights* a : {&l.self_attn, &l.cross_attn}) {
      nn::fill_uniform(a->in_proj_weight.data(), a->in_proj_weight.size(), float(std::sqrt(6.0 / double(4 * d))), s,
                       uint32_t(stream++));
      nn::fill_uniform(a->out_proj_weight.data(), a->out_proj_weight.size(), float(1.0 / std::sqrt(double(d))), s,
                       uint32_t(stream++));
    }
    std::fill(l.norm1_weight.begin(), l.norm1_weight.end(), 1.0f);
    std::fill(l.norm2_weight.begin(), l.norm2_weight.end(), 1.0f);
    l.ffn = FeedForward(cfg_.ffn_config(), nn::derive_seed(seed, uint32_t(i), 3)).weights();
  }
  std::fill(w_.norm_weight.begin(), w_.norm_weight.end(), 1.0f);
  prepare();
}

Decoder::Decoder(const DecoderConfig& cfg, DecoderWeights weights) : cfg_(cfg), w_(std::move(weights)) {
  cfg_.validate();
  check_weights(cfg_, w_);
  prepare();
}

void Decoder::set_weights(DecoderWeights w) {
  check_weights(cfg_, w);
  w_ = std::move(w);
  prepare();
}

void Decoder::prepare() {
  const int64_t d = cfg_.d_model;
  ffn_.clear();
  auto packed = std::make_shared<PackedDecoder>();
  for (auto& l : w_.layers) {
    ffn_.emplace_back(cfg_.ffn_config(), std::move(l.ffn));
    l.ffn = Weights{};
    packed->push_back({nn::PackedAttention::self(self_weights(l), d), nn::PackedAttention::cross(cross_weights(l), d)});
  }
  packed_ = std::move(packed);
}

Decoder Decoder::converted(WeightDtype dtype, bool attention_int8) const {
  if (attention_int8 && dtype != WeightDtype::int8)
    throw Error("attention int8 asked for dtype " + std::string(to_string(dtype)) + ", expected int8");
  Decoder e = *this;
  auto packed = std::make_shared<PackedDecoder>(*static_cast<const PackedDecoder*>(packed_.get()));
  const int64_t d = cfg_.d_model;
  auto quantize = [&](const std::vector<float>& w, int64_t rows, int64_t from, const char* name) {
    return std::make_shared<const nn::Int8Linear>(nn::quantize_linear(w.data() + from * d, d, rows, {}, name));
  };
  for (size_t i = 0; i < e.ffn_.size(); ++i) {
    try {
      e.ffn_[i] = e.ffn_[i].converted(dtype);
      PackedLayer& p = (*packed)[i];
      for (nn::Linear* lin : {&p.self.in, &p.self.out, &p.cross.q, &p.cross.kv, &p.cross.out})
        lin->set_int8(nullptr);  // none left from an earlier conversion
      if (attention_int8) {
        const DecoderLayerWeights& l = w_.layers[i];
        p.self.in.set_int8(quantize(l.self_attn.in_proj_weight, 3 * d, 0, "self_attn.in_proj_weight"));
        p.self.out.set_int8(quantize(l.self_attn.out_proj_weight, d, 0, "self_attn.out_proj.weight"));
        p.cross.q.set_int8(quantize(l.cross_attn.in_proj_weight, d, 0, "multihead_attn.in_proj_weight"));
        p.cross.kv.set_int8(quantize(l.cross_attn.in_proj_weight, 2 * d, d, "multihead_attn.in_proj_weight"));
        p.cross.out.set_int8(quantize(l.cross_attn.out_proj_weight, d, 0, "multihead_attn.out_proj.weight"));
      }
    } catch (const Error& err) {
      throw Error("layer " + std::to_string(i) + ": " + err.what());
    }
  }
  e.packed_ = std::move(packed);
  return e;
}

DecoderWeights Decoder::weights() const {
  DecoderWeights w = w_;
  for (size_t i = 0; i < w.layers.size(); ++i) w.layers[i].ffn = ffn_[i].weights();
  return w;
}

double Decoder::forward_flops(const Shape& shape, const Shape& memory_shape, bool causal) const {
  if (memory_shape.batch != shape.batch) throw Error("forward_flops: the memory's batch differs from the target's");
  (void)nn::valid_positions(shape);  // checks the lengths
  (void)nn::valid_positions(memory_shape);
  const double d = double(cfg_.d_model);
  double tokens = 0, mtokens = 0, pairs = 0;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const double len = double(shape.lengths.empty() ? shape.seq : shape.lengths[size_t(b)]);
    const double mlen = double(memory_shape.lengths.empty() ? memory_shape.seq : memory_shape.lengths[size_t(b)]);
    tokens += len;
    mtokens += mlen;
    pairs += (causal ? len * (len + 1) / 2 : len * len) + len * mlen;
  }
  // self: Q|K|V and out of the target rows; cross: Q and out of the target
  // rows, K|V of the memory rows; 4 flops per (query, key) pair per feature.
  const double per_layer = 2.0 * tokens * 6.0 * d * d + 2.0 * mtokens * 2.0 * d * d + 4.0 * pairs * d;
  return double(cfg_.layers) * (per_layer + ffn_[0].forward_flops(int64_t(tokens)));
}

// ---- forward and backward ---------------------------------------------------------

namespace {

struct Rows {
  std::vector<int64_t> pos, off;
};

Rows valid_rows(const Shape& s, const char* what) {
  if (s.layout != Layout::tokens)
    throw Error(std::string(what) + ": the decoder takes the tokens layout [B, S, d_model]");
  Rows r;
  r.pos = nn::valid_positions(s, &r.off);
  return r;
}

void check_pair(const Shape& shape, const Shape& mshape, const Rows& t, const Rows& m) {
  if (mshape.batch != shape.batch)
    throw Error("memory: batch " + std::to_string(mshape.batch) + ", but the target's is " + std::to_string(shape.batch));
  for (int64_t b = 0; b < shape.batch; ++b)
    if (t.off[size_t(b) + 1] > t.off[size_t(b)] && m.off[size_t(b) + 1] == m.off[size_t(b)])
      throw Error("memory: sequence " + std::to_string(b) + " has no valid memory position to attend to (length 0)");
}

// The valid rows of x: x itself when it has no padding, else a gathered copy.
const float* rows_of(const float* x, const Shape& s, const Rows& r, int64_t d, std::vector<float>& copy) {
  if (int64_t(r.pos.size()) == s.positions()) return x;
  copy.resize(r.pos.size() * size_t(d));
  nn::gather(x, nn::Addressing{d, s.seq, Layout::tokens}, r.pos, copy.data());
  return copy.data();
}

nn::KeysValues memory_keys(const float* mem, const Rows& m, int64_t S, const float* projected = nullptr) {
  nn::KeysValues kv;
  kv.kind = nn::KeysValues::Kind::memory;
  kv.memory = mem;
  kv.projected = projected;
  kv.memory_off = m.off;
  kv.memory_S = S;
  for (size_t b = 0; b + 1 < m.off.size(); ++b) {
    kv.kv_base.push_back(m.off[b]);
    kv.kv_len.push_back(m.off[b + 1] - m.off[b]);
  }
  return kv;
}

}  // namespace

void Decoder::forward(const float* x, const Shape& shape, const float* memory, const Shape& memory_shape, float* y,
                      const DecoderRunOptions& opts, DecoderCache* cache) const {
  const Rows rows = valid_rows(shape, "input"), mrows = valid_rows(memory_shape, "memory");
  check_pair(shape, memory_shape, rows, mrows);
  const nn::Context ctx(opts);
  const int64_t n = int64_t(rows.pos.size()), d = cfg_.d_model;
  if (shape.positions() > 0 && (!x || !y)) throw Error("forward: x and y must not be null");
  if (!mrows.pos.empty() && !memory) throw Error("forward: memory must not be null");
  if (opts.compute != Compute::fp32) throw Error("forward: the decoder computes in fp32 (compute bf16 is the FFN's and the encoder's)");
  const auto& packed = *static_cast<const PackedDecoder*>(packed_.get());
  DecoderCacheData* c = cache ? &detail::CacheAccess::data(*cache) : nullptr;
  if (c) {
    c->filled = true;
    c->cfg = cfg_;
    c->shape = shape;
    c->memory_shape = memory_shape;
    c->causal = opts.causal;
    c->training = opts.training;
    c->seed = opts.seed;
    c->layers.resize(size_t(cfg_.layers));
  }
  auto ask = [&] {
    if (opts.interrupted && opts.interrupted()) {
      if (c) c->filled = false;
      throw Interrupted();
    }
  };
  std::vector<float> xcopy, mcopy;
  const float* mem = rows_of(memory, memory_shape, mrows, d, mcopy);
  nn::KeysValues mkv = memory_keys(mem, mrows, memory_shape.seq);
  const float* xr = rows_of(x, shape, rows, d, xcopy);
  std::vector<float> cur(xr, xr + n * d);
  std::vector<float> a(size_t(n * d)), h(size_t(n * d));
  const nn::AttentionBlockConfig bc = block_config(cfg_);
  nn::LayerRun lr = nn::layer_run(rows.off, shape.seq, opts.training, opts.causal, opts.seed, ctx, opts);
  lr.cross = &mkv;
  lr.cross_attention_input = opts.cross_attention_input;
  lr.ask = ask;
  nn::LayerSaved scratch;
  try {
    for (int64_t l = 0; l < cfg_.layers; ++l) {
      const DecoderLayerWeights& lw = w_.layers[size_t(l)];
      const nn::AttentionBlockWeights cw = cross_weights(lw);
      nn::layer_forward(bc, layer_view(lw, packed[size_t(l)], cw, ffn_[size_t(l)]), l, cur.data(), cur.data(),
                        a.data(), h.data(), n, lr, c ? c->layers[size_t(l)] : scratch, c != nullptr);
    }
  } catch (const Interrupted&) {
    if (c) c->filled = false;
    throw;
  }
  if (cfg_.final_norm) {
    std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
    if (c) c->last = cur;
    nn::norm_forward(ctx, cfg_.norm_type, cfg_.eps, cur.data(), n, d, w_.norm_weight.data(), ptr_or_null(w_.norm_bias),
                     cur.data(), mean.data(), rstd.data());
    if (c) {
      c->mean = std::move(mean);
      c->rstd = std::move(rstd);
    }
  }
  nn::scatter(cur.data(), nn::Addressing{d, shape.seq, Layout::tokens}, rows.pos, shape.positions(), y);
}

void Decoder::backward(const float* x, const float* dy, const Shape& shape, const float* memory,
                       const Shape& memory_shape, const DecoderCache& cache, float* dx, float* dmemory,
                       DecoderWeights& grads, const DecoderRunOptions& opts) const {
  const DecoderCacheData& c = detail::CacheAccess::data(cache);
  if (!c.filled) throw Error("backward: the cache was not filled by forward");
  const DecoderConfig& f = c.cfg;
  if (f != cfg_)
    throw Error("backward: the cache comes from a forward call of a decoder with other settings");
  auto same = [](const Shape& a, const Shape& b) {
    return a.batch == b.batch && a.seq == b.seq && a.lengths == b.lengths && a.layout == b.layout;
  };
  if (!same(c.shape, shape) || !same(c.memory_shape, memory_shape))
    throw Error("backward: the cache comes from a forward call with another shape or lengths");
  const Rows rows = valid_rows(shape, "input"), mrows = valid_rows(memory_shape, "memory");
  if (shape.positions() > 0 && (!dy || !dx)) throw Error("backward: dy and dx must not be null");
  if (memory_shape.positions() > 0 && (!memory || !dmemory)) throw Error("backward: memory and dmemory must not be null");
  const nn::Context ctx(opts);
  const int64_t n = int64_t(rows.pos.size()), m = int64_t(mrows.pos.size()), d = cfg_.d_model;
  grads = DecoderWeights::zeros(cfg_);  // FFN parts are overwritten by its backward

  std::vector<float> mcopy;
  const float* mem = rows_of(memory, memory_shape, mrows, d, mcopy);
  nn::KeysValues mkv = memory_keys(mem, mrows, memory_shape.seq);
  std::vector<float> g(size_t(n * d)), gx(size_t(n * d)), gh(size_t(n * d)), dmem(size_t(m * d), 0.0f);
  const nn::Addressing addr{d, shape.seq, Layout::tokens};
  nn::gather(dy, addr, rows.pos, g.data());
  if (cfg_.final_norm) {
    nn::norm_backward(ctx, cfg_.norm_type, c.last.data(), c.mean.data(), c.rstd.data(), n, d, w_.norm_weight.data(),
                      g.data(), gx.data(), false, grads.norm_weight.data(), ptr_or_null(grads.norm_bias));
    std::swap(g, gx);
  }
  const nn::AttentionBlockConfig bc = block_config(cfg_);
  const auto& packed = *static_cast<const PackedDecoder*>(packed_.get());
  nn::LayerRun lr = nn::layer_run(rows.off, shape.seq, c.training, c.causal, c.seed, ctx, opts);
  lr.cross = &mkv;
  lr.ask = [&] {
    if (opts.interrupted && opts.interrupted()) throw Interrupted();
  };
  for (int64_t l = cfg_.layers - 1; l >= 0; --l) {
    const DecoderLayerWeights& lw = w_.layers[size_t(l)];
    DecoderLayerWeights& gl = grads.layers[size_t(l)];
    const nn::AttentionBlockWeights cw = cross_weights(lw);
    nn::AttentionBlockGrads cg = cross_grads(gl);
    nn::LayerGrads lg{self_grads(gl), &cg, gl.ffn};
    nn::layer_backward(bc, layer_view(lw, packed[size_t(l)], cw, ffn_[size_t(l)]), l, c.layers[size_t(l)], g.data(),
                       gx.data(), gh.data(), dmem.data(), n, lg, lr);
  }
  nn::scatter(g.data(), addr, rows.pos, shape.positions(), dx);
  if (memory_shape.positions() > 0)
    nn::scatter(dmem.data(), nn::Addressing{d, memory_shape.seq, Layout::tokens}, mrows.pos, memory_shape.positions(),
                dmemory);
  (void)x;
}

// ---- generation -------------------------------------------------------------------

DecoderState Decoder::start(const float* memory, const Shape& memory_shape, int64_t capacity,
                            const RunOptions& opts) const {
  const Rows mrows = valid_rows(memory_shape, "memory");
  if (capacity < 1) throw Error("start: capacity must be at least 1, got " + std::to_string(capacity));
  for (int64_t b = 0; b < memory_shape.batch; ++b)
    if (mrows.off[size_t(b) + 1] == mrows.off[size_t(b)])
      throw Error("memory: sequence " + std::to_string(b) + " has no valid memory position to attend to (length 0)");
  if (!mrows.pos.empty() && !memory) throw Error("start: memory must not be null");
  const nn::Context ctx(opts);
  const int64_t m = int64_t(mrows.pos.size()), d = cfg_.d_model;
  const auto& packed = *static_cast<const PackedDecoder*>(packed_.get());
  std::vector<float> mcopy;
  const float* mem = rows_of(memory, memory_shape, mrows, d, mcopy);
  DecoderState st;
  DecoderState::Data& s = *st.data_;
  s.d = d;
  s.layers = cfg_.layers;
  s.memory_off = mrows.off;
  s.memory_S = memory_shape.seq;
  nn::BlockRun run{false, false, 0, &ctx, {}};
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    s.memory_kv.emplace_back(size_t(m * 2 * d));
    nn::project_memory(block_config(cfg_), cross_weights(w_.layers[size_t(l)]), packed[size_t(l)].cross, mem, m,
                       s.memory_kv.back().data(), run);
  }
  s.self = nn::KvCache(cfg_.layers, d, capacity, memory_shape.batch);
  for (int64_t b = 0; b < memory_shape.batch; ++b) {
    s.src.push_back(b);
    s.self.join();
  }
  return st;
}

void Decoder::step(DecoderState& state, const float* x, float* y, const RunOptions& opts) const {
  DecoderState::Data& s = *state.data_;
  if (s.d != cfg_.d_model || s.layers != cfg_.layers)
    throw Error("step: the state was started by a decoder with other settings");
  const int64_t n = state.live(), d = cfg_.d_model;
  for (int64_t i = 0; i < n; ++i)
    if (s.self.length(i) >= s.self.capacity())
      throw Error("step: live sequence " + std::to_string(i) + " already has " + std::to_string(s.self.capacity()) +
                  " positions, the state's capacity");
  if (n == 0) return;
  if (!x || !y) throw Error("step: x and y must not be null");
  if (opts.compute != Compute::fp32) throw Error("step: the decoder computes in fp32");
  const nn::Context ctx(opts);
  const int threads = ctx.threads();
  const auto& packed = *static_cast<const PackedDecoder*>(packed_.get());
  std::vector<int64_t> off(size_t(n) + 1);
  for (int64_t i = 0; i <= n; ++i) off[size_t(i)] = i;
  // Self-attention over each sequence's slot of the cache, its new row last.
  // Each sequence's new position first (its page, when it starts one); an
  // error before the end gives the old lengths back.
  nn::KvCache::Step step(s.self, std::vector<int64_t>(size_t(n), 1));
  nn::KeysValues self;
  self.kind = nn::KeysValues::Kind::cache;
  self.cache = &s.self;
  for (int64_t i = 0; i < n; ++i) {
    self.kv_len.push_back(s.self.length(i));
    self.write.push_back(s.self.row(i, s.self.length(i) - 1));
  }
  // Cross-attention over the memory rows of each sequence's source.
  // Consecutive live sequences of one source (beam search's beams) form one
  // group of query rows over those keys: each row's result is the same as
  // alone (no row's arithmetic depends on the rows beside it), and the
  // keys are packed once per group.
  nn::KeysValues cross;
  cross.kind = nn::KeysValues::Kind::memory;
  cross.memory_off = s.memory_off;
  cross.memory_S = s.memory_S;
  std::vector<int64_t> cross_off{0};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = s.src[size_t(i)];
    if (i > 0 && b == s.src[size_t(i) - 1]) {
      ++cross_off.back();
      continue;
    }
    cross_off.push_back(i + 1);
    cross.kv_base.push_back(s.memory_off[size_t(b)]);
    cross.kv_len.push_back(s.memory_off[size_t(b) + 1] - s.memory_off[size_t(b)]);
  }
  std::vector<float> cur(x, x + n * d), a(size_t(n * d)), h(size_t(n * d));
  const nn::AttentionBlockConfig bc = block_config(cfg_);
  nn::LayerSaved scratch;
  nn::LayerRun ls;
  ls.off = &off;
  ls.S = s.self.capacity();
  ls.self = &self;
  ls.cross = &cross;
  ls.cross_off = &cross_off;
  ls.run = nn::BlockRun{false, true, 0, &ctx, {}};
  ls.ffn_opts = opts;
  ls.ffn_opts.threads = threads;
  ls.ffn_opts.training = false;
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const DecoderLayerWeights& lw = w_.layers[size_t(l)];
    const nn::AttentionBlockWeights cw = cross_weights(lw);
    nn::layer_forward(bc, layer_view(lw, packed[size_t(l)], cw, ffn_[size_t(l)], s.memory_kv[size_t(l)].data()), l,
                      cur.data(), cur.data(), a.data(), h.data(), n, ls, scratch, false);
  }
  if (cfg_.final_norm) {
    std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
    nn::norm_forward(ctx, cfg_.norm_type, cfg_.eps, cur.data(), n, d, w_.norm_weight.data(), ptr_or_null(w_.norm_bias),
                     cur.data(), mean.data(), rstd.data());
  }
  std::copy(cur.begin(), cur.end(), y);
  step.done();
}

}  // namespace ffn
