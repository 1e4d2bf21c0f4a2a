// The LLaMA-architecture causal language model (include/ffn/causal_lm.hpp):
// the loader (one loop over the architecture's name table, for GGUF and
// Hugging Face checkpoints: src/models/arch.hpp, checkpoint.hpp), the forward
// pass over a key/value cache, and the generation loop. The sampler is in
// src/decoding/sampling.cpp, chat prompts in src/models/chat.cpp.
#include "ffn/causal_lm.hpp"

#include <algorithm>
#include <set>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <numeric>
#include <optional>
#include <tuple>

#include "backends/cpu/isa.hpp"
#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "core/json_file.hpp"
#include "core/positions.hpp"
#include "core/thread_pool.hpp"
#include "ffn/feed_forward.hpp"
#include "ffn/gguf.hpp"
#include "ffn/io.hpp"
#include "ops/attention.hpp"
#include "ops/linear.hpp"
#include "ops/qlinear.hpp"
#include "ops/norm.hpp"
#include "ops/rope.hpp"
#include "decoding/decoding.hpp"
#include "models/arch.hpp"
#include "models/causal_lm_weights.hpp"
#include "models/checkpoint.hpp"
#include "modules/attention_block.hpp"
#include "modules/layer.hpp"
#include "modules/ffn_sublayer.hpp"
#include "modules/kv_cache.hpp"

namespace fs = std::filesystem;

namespace ffn {


struct CausalLMState::Data {
  nn::KvCache cache;  // paged (src/modules/kv_cache.hpp)
  int64_t head_dim = 0;
  nn::RopeTable rope;
};

CausalLMState::CausalLMState() : data_(std::make_unique<Data>()) {}
CausalLMState::~CausalLMState() = default;
CausalLMState::CausalLMState(CausalLMState&&) noexcept = default;
CausalLMState& CausalLMState::operator=(CausalLMState&&) noexcept = default;
int64_t CausalLMState::live() const { return data_->cache.live(); }
int64_t CausalLMState::length(int64_t i) const {
  if (i < 0 || i >= live()) throw std::out_of_range("CausalLMState::length: no sequence " + std::to_string(i));
  return data_->cache.length(i);
}
int64_t CausalLMState::capacity() const { return data_->cache.capacity(); }
size_t CausalLMState::bytes() const { return data_->cache.bytes(); }
void CausalLMState::select(const std::vector<int64_t>& from) { data_->cache.select(from); }
int64_t CausalLMState::join() {
  if (data_->cache.layers() == 0) throw Error("join: the state was not started by a model (CausalLM::start)");
  return data_->cache.join();
}
void CausalLMState::truncate(int64_t i, int64_t length) {
  if (i < 0 || i >= live())
    throw Error("truncate: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  if (length < 0 || length > data_->cache.length(i))
    throw Error("truncate: sequence " + std::to_string(i) + " holds " + std::to_string(data_->cache.length(i)) +
                " positions, cannot keep " + std::to_string(length));
  data_->cache.resize(i, length);
}
int64_t CausalLMState::fork(int64_t i, int64_t length) {
  if (i < 0 || i >= live())
    throw Error("fork: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  return data_->cache.fork(i, length);
}
int64_t CausalLMState::page_positions() const { return data_->cache.page(); }
int64_t CausalLMState::pages_used() const { return data_->cache.pages_used(); }
int64_t CausalLMState::pages_for(int64_t positions) const { return data_->cache.pages_for(positions); }
size_t CausalLMState::page_bytes() const { return data_->cache.page_bytes(); }
void CausalLMState::set_page_limit(int64_t pages) { data_->cache.set_page_limit(pages); }
int64_t CausalLMState::page_limit() const { return data_->cache.page_limit(); }
void CausalLMState::leave(int64_t i) {
  if (i < 0 || i >= live())
    throw Error("leave: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  data_->cache.leave(i);
}

void CausalLMConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    if (v < 1) throw Error(std::string("causal LM: ") + name + " must be at least 1, got " + std::to_string(v));
  };
  positive(vocab, "vocab");
  positive(d_model, "d_model");
  positive(layers, "layers");
  positive(heads, "heads");
  positive(kv_heads, "kv_heads");
  positive(head_dim, "head_dim");
  positive(d_ff, "d_ff");
  // Bounds far above any real model, so that no product of sizes below overflows.
  auto at_most = [](int64_t v, int64_t limit, const char* name) {
    if (v > limit)
      throw Error(std::string("causal LM: ") + name + " is " + std::to_string(v) + ", more than " + std::to_string(limit));
  };
  at_most(vocab, int64_t(1) << 24, "vocab");
  at_most(d_model, int64_t(1) << 20, "d_model");
  at_most(d_ff, int64_t(1) << 22, "d_ff");
  at_most(layers, 4096, "layers");
  at_most(heads, 4096, "heads");
  at_most(kv_heads, 4096, "kv_heads");
  at_most(head_dim, 4096, "head_dim");
  at_most(context, int64_t(1) << 24, "context");
  if (heads % kv_heads != 0)
    throw Error("causal LM: " + std::to_string(heads) + " query heads cannot share " + std::to_string(kv_heads) +
                " key/value heads evenly");
  if (head_dim % 2 != 0) throw Error("causal LM: head_dim must be even for rotary positions, got " + std::to_string(head_dim));
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) throw Error("causal LM: rope_theta must be positive");
  if (!(eps > 0)) throw Error("causal LM: eps must be positive");
  if (bos >= vocab || eos >= vocab) throw Error("causal LM: BOS/EOS id outside the vocabulary");
}

CausalLM::CausalLM() : w_(std::make_unique<Weights>()) {}
CausalLM::~CausalLM() = default;
CausalLM::CausalLM(CausalLM&&) noexcept = default;
CausalLM& CausalLM::operator=(CausalLM&&) noexcept = default;



CausalLMState CausalLM::start(int64_t sequences, int64_t capacity) const {
  if (sequences < 0) throw Error("start: sequences must be at least 0, got " + std::to_string(sequences));
  if (capacity < 1) throw Error("start: capacity must be at least 1, got " + std::to_string(capacity));
  // The caches' floats per layer, K and V each; refused past 2^40 (4 TiB), which also keeps the products exact.
  const int64_t kvd = cfg_.kv_heads * cfg_.head_dim;
  if (capacity > (int64_t(1) << 40) / kvd || sequences > (int64_t(1) << 40) / (capacity * kvd))
    throw Error("start: " + std::to_string(sequences) + " sequences of " + std::to_string(capacity) +
                " positions need more cache than any machine has");
  CausalLMState st;
  auto& s = *st.data_;
  s.cache = nn::KvCache(cfg_.layers, kvd, capacity, sequences);
  for (int64_t i = 0; i < sequences; ++i) s.cache.join();
  s.head_dim = cfg_.head_dim;
  s.rope = nn::rope_table(w_->spec, capacity);
  return st;
}

void CausalLM::extend(CausalLMState& state, const int32_t* ids, const std::vector<int64_t>& counts, float* logits,
                      bool every_position, const RunOptions& opts) const {
  CausalLMState::Data& s = *state.data_;
  nn::KvCache& cache = s.cache;
  const CausalLMConfig& c = cfg_;
  if (cache.layers() != c.layers || cache.kvd() != c.kv_heads * c.head_dim || s.head_dim != c.head_dim)
    throw Error("extend: the state was started by a model with other settings");
  const int64_t B = state.live();
  if (int64_t(counts.size()) != B)
    throw Error("extend: " + std::to_string(counts.size()) + " counts for " + std::to_string(B) + " live sequences");
  std::vector<int64_t> off(size_t(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = counts[size_t(b)];
    if (k < 0) throw Error("extend: sequence " + std::to_string(b) + " is given " + std::to_string(k) + " tokens");
    if (cache.length(b) + k > cache.capacity())
      throw Error("extend: sequence " + std::to_string(b) + " would hold " + std::to_string(cache.length(b) + k) +
                  " positions, more than the state's capacity " + std::to_string(cache.capacity()));
    off[size_t(b) + 1] = off[size_t(b)] + k;
  }
  const int64_t n = off.back();
  if (n == 0) return;
  if (!ids || !logits) throw Error("extend: ids and logits must not be null");
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      throw Error("token id " + std::to_string(ids[i]) + " is outside the vocabulary (0.." + std::to_string(c.vocab - 1) + ")");
  const nn::Context cx(opts);
  const int threads = cx.threads();
  const int64_t d = c.d_model;

  std::vector<float> x(size_t(n * d)), a(size_t(n * d));
  nn::QActs acts;
  std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
  const nn::StackSpec& spec = w_->spec;
  for (int64_t i = 0; i < n; ++i) {
    (w_->embed.empty() ? w_->head : w_->embed).row(ids[i], x.data() + i * d);
  }
  if (spec.embedding.scale != 1.0f)  // Gemma: × √d_model, in float32
    for (float& v : x) v *= spec.embedding.scale;
  // Each new row's position and its row of the cache.
  nn::KeysValues kv;
  kv.kind = nn::KeysValues::Kind::cache;
  kv.cache = &cache;
  kv.positions.resize(size_t(n));
  kv.write.resize(size_t(n));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = off[size_t(b)]; r < off[size_t(b) + 1]; ++r)
      kv.positions[size_t(r)] = cache.length(b) + r - off[size_t(b)];
  // The new positions' pages (the cache's rows may move: the block takes K
  // and V per layer); an error before the end gives the old lengths back.
  nn::KvCache::Step step(cache, counts);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = off[size_t(b)]; r < off[size_t(b) + 1]; ++r)
      kv.write[size_t(r)] = cache.row(b, kv.positions[size_t(r)]);
    kv.kv_len.push_back(cache.length(b));
  }
  // The attention sublayer every decoder has (src/modules/attention_block.hpp):
  // pre-norm RMSNorm, Q|K|V, rotary positions, the cache, grouped-query
  // causal attention, W_O and the residual.
  nn::LayerRun ls;
  ls.off = &off;
  ls.S = cache.capacity();
  ls.self = &kv;
  ls.run.causal = true;
  ls.run.ctx = &cx;
  ls.run.acts = &acts;
  ls.ffn_opts = opts;
  ls.ffn_opts.threads = threads;
  ls.ffn_opts.training = false;
  nn::LayerSaved scratch;
  static const std::vector<float> none;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Weights::Layer& L = w_->layers[size_t(l)];
    nn::AttentionBlockConfig bc = nn::attention_config(spec, l);
    bc.rope = &s.rope;
    const nn::LayerView view{
        {none, none, none, none, L.attn_norm, none, L.attn_post_norm.empty() ? nullptr : &L.attn_post_norm,
         L.q_norm.empty() ? nullptr : &L.q_norm, L.k_norm.empty() ? nullptr : &L.k_norm},
        L.attn, nullptr, nullptr, nullptr, &L.ffn[0], nullptr};
    nn::layer_forward(bc, view, l, x.data(), x.data(), a.data(), nullptr, n, ls, scratch, false);
  }
  // The rows that get logits: every position, or each sequence's last
  // (sequences given no tokens have none), packed to the front.
  int64_t m = n;
  std::vector<int64_t> to;  // with !every_position: the sequence of each packed row
  if (!every_position) {
    m = 0;
    for (int64_t b = 0; b < B; ++b)
      if (counts[size_t(b)] > 0) {
        std::copy_n(x.begin() + (off[size_t(b) + 1] - 1) * d, d, x.begin() + m * d);
        to.push_back(b);
        ++m;
      }
  }
  nn::norm_forward(cx, NormType::rmsnorm, c.eps, x.data(), m, d, w_->norm.data(), nullptr, a.data(), mean.data(),
                   rstd.data());
  const bool packed = !every_position && m < B;  // rows to spread out to their sequences afterwards
  std::vector<float> packed_logits(packed ? size_t(m * c.vocab) : 0);
  float* out = packed ? packed_logits.data() : logits;
  w_->head.forward(cx, a.data(), m, out, {.acts = &acts});
  if (const float cap = spec.embedding.final_softcap; cap > 0)  // Gemma 2: as transformers, ÷ cap, tanh, × cap
    for (int64_t i = 0; i < m * c.vocab; ++i) out[i] = std::tanh(out[i] / cap) * cap;
  if (packed)
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(out + r * c.vocab, c.vocab, logits + to[size_t(r)] * c.vocab);
  step.done();
}

std::vector<float> CausalLM::logits(const std::vector<int32_t>& ids, const RunOptions& opts) const {
  CausalLMState st = start(1, std::max<int64_t>(1, int64_t(ids.size())));
  std::vector<float> out(ids.size() * size_t(cfg_.vocab));
  extend(st, ids.data(), {int64_t(ids.size())}, out.data(), true, opts);
  return out;
}

std::vector<int32_t> CausalLM::generate(const std::vector<int32_t>& prompt, const SamplingOptions& s,
                                        const std::function<bool(int32_t)>& on_token, const RunOptions& opts) const {
  s.validate();
  if (prompt.empty()) throw Error("generate: the prompt must hold at least one token");
  if (cfg_.context > 0 && s.max_new_tokens > cfg_.context - int64_t(prompt.size()))
    throw Error("generate: " + std::to_string(prompt.size()) + " prompt tokens + " + std::to_string(s.max_new_tokens) +
                " new tokens is past the model's context of " + std::to_string(cfg_.context) + " positions, by " +
                std::to_string(s.max_new_tokens - (cfg_.context - int64_t(prompt.size()))));
  const int64_t V = cfg_.vocab;
  if (s.beams > V / 2)
    throw Error("--beams: " + std::to_string(s.beams) + " is more than half the vocabulary (" + std::to_string(V) + ")");
  // (start refuses a capacity no machine could hold; the clamp keeps the sum from overflowing.)
  CausalLMState st = start(1, int64_t(prompt.size()) + std::clamp<int64_t>(s.max_new_tokens, 1, int64_t(1) << 41));
  if (s.max_new_tokens == 0) return {};
  return decode_in(st, prompt, 0, s, on_token, opts);
}

std::vector<int32_t> CausalLM::generate(CausalLMState& st, const std::vector<int32_t>& context, const SamplingOptions& s,
                                        const std::function<bool(int32_t)>& on_token, const RunOptions& opts) const {
  s.validate();
  if (s.beams > 1) throw Error("generate: beam search (--beams) starts from an empty state, not a kept one");
  if (context.empty()) throw Error("generate: the context must hold at least one token");
  if (st.live() != 1) throw Error("generate: the state must hold one sequence, not " + std::to_string(st.live()));
  if (st.data_->cache.layers() != cfg_.layers) throw Error("generate: the state was not started by this model");
  const int64_t n = int64_t(context.size());
  if (s.max_new_tokens > st.capacity() - n)
    throw Error("generate: " + std::to_string(n) + " context tokens + " + std::to_string(s.max_new_tokens) +
                " new tokens is past the state's capacity of " + std::to_string(st.capacity()) + " positions, by " +
                std::to_string(s.max_new_tokens - (st.capacity() - n)));
  // At least the last token is read again: its logits choose the first new one.
  if (st.length(0) >= n) st.truncate(0, n - 1);
  if (s.max_new_tokens == 0) return {};
  return decode_in(st, context, st.length(0), s, on_token, opts);
}

// The decoding engine on `st`, which holds context[0, from): step 0 reads
// context[from, end), each later step one token per live sequence.
std::vector<int32_t> CausalLM::decode_in(CausalLMState& st, const std::vector<int32_t>& prompt, int64_t from,
                                         const SamplingOptions& s, const std::function<bool(int32_t)>& on_token,
                                         const RunOptions& opts) const {
  const int64_t V = cfg_.vocab;
  struct Model final : decoding::Stepper {
    const CausalLM& m;
    CausalLMState& st;
    const std::vector<int32_t>& prompt;
    int64_t from;
    const RunOptions& opts;
    Model(const CausalLM& m, CausalLMState& st, const std::vector<int32_t>& prompt, int64_t from, const RunOptions& opts)
        : m(m), st(st), prompt(prompt), from(from), opts(opts) {}
    void step(const std::vector<int64_t>& last, int64_t t, float* logits) override {
      if (t == 0) {
        m.extend(st, prompt.data() + from, {int64_t(prompt.size()) - from}, logits, false, opts);
        return;
      }
      const std::vector<int32_t> ids(last.begin(), last.end());
      m.extend(st, ids.data(), std::vector<int64_t>(ids.size(), 1), logits, false, opts);
    }
    void select(const std::vector<int64_t>& from) override { st.select(from); }
  } model(*this, st, prompt, from, opts);
  const nn::Context cx(opts);
  decoding::Search search;
  search.vocab = V;
  search.max_new = s.max_new_tokens;
  if (s.stop_at_eos) search.end_ids = cfg_.end_ids;
  search.beams = s.beams;
  search.length_penalty = s.length_penalty;
  search.sampling = s;
  search.kernels = &cx.kernels();
  search.threads = cx.threads();
  search.process = [&](float* row, int64_t, int64_t t) { decoding::check_finite_logits(row, V, t); };
  if (s.beams == 1 && on_token) search.on_token = [&](int64_t, int64_t tok) { return on_token(int32_t(tok)); };
  const std::vector<std::vector<int64_t>> made = decoding::decode(model, {int64_t(prompt.back())}, {prompt}, search);
  std::vector<int32_t> out(made[0].begin(), made[0].end());
  if (s.beams > 1 && on_token)  // the best hypothesis, known only at the end
    for (int32_t tok : out)
      if (!on_token(tok)) break;
  return out;
}

size_t CausalLM::weight_bytes() const {
  return w_->embed.bytes() + (step_bytes(0) - (w_->embed.empty() ? 0 : w_->embed.bytes() / size_t(cfg_.vocab)));
}

size_t CausalLM::step_bytes(int64_t positions) const {
  // One embedding row (tied: the head's, read with the head), the norms, every product, the head.
  size_t b = w_->norm.size() * sizeof(float) + w_->head.bytes();
  if (!w_->embed.empty()) b += w_->embed.bytes() / size_t(cfg_.vocab);
  for (const auto& L : w_->layers)
    b += (L.attn_norm.size() + L.attn_post_norm.size() + L.q_norm.size() + L.k_norm.size()) * sizeof(float) + L.attn.in.bytes() + L.attn.out.bytes() +
         L.ffn[0].bytes();
  // Each layer's cached keys and values (float32) at `positions`.
  return b + size_t(cfg_.layers) * size_t(std::max<int64_t>(positions, 0)) * size_t(2 * cfg_.kv_heads * cfg_.head_dim) *
                 sizeof(float);
}

double CausalLM::flops(int64_t t, int64_t p) const {
  const CausalLMConfig& c = cfg_;
  const double d = double(c.d_model), qd = double(c.heads * c.head_dim), kvd = double(c.kv_heads * c.head_dim);
  const double per_token = 2.0 * (d * (qd + 2 * kvd) + qd * d + 3.0 * d * double(c.d_ff));
  // Attention: each query against p + its own position keys, QKᵀ and PV.
  const double keys = double(t) * double(p) + double(t) * double(t + 1) / 2.0;
  return double(c.layers) * (double(t) * per_token + 4.0 * qd * keys) + 2.0 * double(t) * d * double(c.vocab);
}

}  // namespace ffn
