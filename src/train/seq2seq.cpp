// Training an encoder–decoder translation model (include/ffn/seq2seq.hpp):
// embeddings, ffn::Encoder and ffn::Decoder forward and backward, the tied
// output projection with label-smoothed cross-entropy, Adam on the warm-up
// schedule; and the MarianMT checkpoint it saves.
#include "ffn/seq2seq.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ffn/io.hpp"
#include "ffn/random.hpp"
#include "ffn/translation.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "core/json_file.hpp"
#include "core/positions.hpp"
#include "ops/linear.hpp"

namespace ffn {

namespace fs = std::filesystem;

void Seq2SeqConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("seq2seq: " + what);
  };
  need(vocab >= 2 && vocab <= (int64_t(1) << 24), "vocab " + std::to_string(vocab) + ", expected 2..2^24");
  need(d_model >= 1 && heads >= 1 && d_model % heads == 0,
       "d_model " + std::to_string(d_model) + " must be a positive multiple of heads " + std::to_string(heads));
  need(d_ff >= 1, "d_ff " + std::to_string(d_ff) + ", expected ≥ 1");
  need(encoder_layers >= 1 && decoder_layers >= 1, "layers: expected ≥ 1 encoder and decoder layer");
  need(dropout >= 0.0f && dropout < 1.0f, "dropout " + std::to_string(dropout) + ", expected [0, 1)");
  need(max_positions >= 2, "max_positions " + std::to_string(max_positions) + ", expected ≥ 2");
  need(pad_id >= 0 && pad_id < vocab && eos_id >= 0 && eos_id < vocab && pad_id != eos_id,
       "pad and eos ids must be distinct ids of the vocabulary");
}

EncoderConfig Seq2SeqConfig::stack(int64_t layers) const {
  EncoderConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = d_ff;
  c.layers = layers;
  c.activation = activation;
  c.norm = NormPlacement::post;
  c.norm_type = NormType::layernorm;
  c.eps = 1e-5f;
  c.bias = true;
  c.dropout = dropout;
  c.final_norm = false;
  return c;
}

namespace {

const Seq2SeqConfig& checked(const Seq2SeqConfig& c) {
  c.validate();
  return c;
}

OptimizerConfig adam_config(const Seq2SeqTrainOptions& o) {
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing < 1.0))
    throw Error("seq2seq: label smoothing " + std::to_string(o.label_smoothing) + ", expected [0, 1)");
  if (o.warmup < 1) throw Error("seq2seq: warmup " + std::to_string(o.warmup) + ", expected ≥ 1 step");
  if (!(o.lr_scale > 0.0 && o.lr_scale < 1e3)) throw Error("seq2seq: lr scale expected in (0, 1000)");
  OptimizerConfig c;
  c.kind = OptimizerKind::adam;
  c.lr = 1e-3;  // set at every step from the schedule
  c.beta1 = o.beta1;
  c.beta2 = o.beta2;
  c.eps = o.eps;
  c.validate();
  return c;
}

void add(std::vector<ParamRef>& r, std::vector<float>& v, const std::vector<float>& g) {
  if (!v.empty()) r.push_back({v.data(), g.data(), v.size()});
}

void add(std::vector<ParamRef>& r, AttentionWeights& v, const AttentionWeights& g) {
  add(r, v.in_proj_weight, g.in_proj_weight);
  add(r, v.in_proj_bias, g.in_proj_bias);
  add(r, v.out_proj_weight, g.out_proj_weight);
  add(r, v.out_proj_bias, g.out_proj_bias);
}

void add_ffn(std::vector<ParamRef>& r, Weights& v, const Weights& g) {
  for (const ParamRef& p : param_refs(v, g)) r.push_back(p);
}

void check_ids(const std::vector<std::vector<int64_t>>& seqs, const Seq2SeqConfig& c, const char* what) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& s = seqs[i];
    if (s.empty()) throw Error(std::string(what) + " " + std::to_string(i) + " is empty");
    if (int64_t(s.size()) > c.max_positions)
      throw Error(std::string(what) + " " + std::to_string(i) + " has " + std::to_string(s.size()) +
                  " ids, more than max_positions " + std::to_string(c.max_positions));
    for (int64_t id : s)
      if (id < 0 || id >= c.vocab)
        throw Error(std::string(what) + " " + std::to_string(i) + " holds id " + std::to_string(id) +
                    ", outside the vocabulary of " + std::to_string(c.vocab));
  }
}

constexpr uint32_t kEmbedStream = 101;  // derive_seed's sublayer index of the embeddings' dropout

}  // namespace

Seq2SeqTrainer::Seq2SeqTrainer(const Seq2SeqConfig& cfg, const Seq2SeqTrainOptions& opts, uint64_t seed)
    : cfg_(checked(cfg)),
      opts_(opts),
      encoder_(cfg.stack(cfg.encoder_layers), derive_seed(seed, 0, 0)),
      decoder_(cfg.stack(cfg.decoder_layers), derive_seed(seed, 1, 0)),
      adam_(adam_config(opts)),
      seed_(seed) {
  ew_ = encoder_.weights();
  dw_ = decoder_.weights();
  const int64_t d = cfg_.d_model;
  embed_.resize(size_t(cfg_.vocab * d));
  // Uniform of variance 1/d: the scaled embedding E·√d has unit variance.
  fill_uniform(embed_.data(), embed_.size(), float(std::sqrt(3.0 / double(d))), derive_seed(seed, 2, 0), 0);
  std::fill_n(embed_.begin() + cfg_.pad_id * d, d, 0.0f);  // nn.Embedding's padding_idx row starts at zero
  positions_ = marian_positions(cfg_.max_positions, d);
  logits_bias_.assign(size_t(cfg_.vocab), 0.0f);
}

Seq2SeqTrainer Seq2SeqTrainer::from_marian(const std::string& dir, const Seq2SeqTrainOptions& opts, uint64_t seed) {
  const TranslationModel m = TranslationModel::load(dir);
  const TranslationConfig& c = m.config();
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  auto refuse = [&](const std::string& why) { throw Error(cfg_path + ": " + why + "; ffn's seq2seq training needs it"); };
  if (!c.shared_embeddings || !c.tied_head) refuse("the embeddings are not shared and tied");
  if (!c.scale_embedding) refuse("\"scale_embedding\" is false");
  const EncoderConfig &e = c.encoder, &d = c.decoder;
  if (e.heads != d.heads || e.d_ff != d.d_ff || e.activation != d.activation)
    refuse("the encoder's and decoder's heads, ffn_dim and activation differ");
  if (e.activation != Activation::silu && e.activation != Activation::gelu && e.activation != Activation::relu)
    refuse("the activation is not swish, gelu or relu");
  Seq2SeqConfig sc;
  sc.vocab = c.vocab_size;
  sc.d_model = c.d_model;
  sc.heads = e.heads;
  sc.d_ff = e.d_ff;
  sc.encoder_layers = e.layers;
  sc.decoder_layers = d.layers;
  sc.activation = e.activation;
  sc.dropout = float(models::json_opt<double>(models::read_json(cfg_path), "dropout", 0.1, cfg_path));
  sc.max_positions = c.max_positions;
  sc.pad_id = c.pad_id;
  sc.eos_id = c.eos_id;
  if (c.decoder_start_id != c.pad_id) refuse("\"decoder_start_token_id\" is not the pad token");
  Seq2SeqTrainer t(sc, opts, seed);
  t.ew_ = m.encoder().weights();
  t.dw_ = m.decoder().weights();
  t.embed_ = m.source_embeddings();
  t.logits_bias_ = m.logits_bias();
  t.encoder_.set_weights(t.ew_);
  t.decoder_.set_weights(t.dw_);
  return t;
}

int64_t Seq2SeqTrainer::parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : marian_tensors(ew_, dw_, embed_, false).tensors) n += int64_t(t.data.size());
  return n;
}

double Seq2SeqTrainer::learning_rate(int64_t step) const {
  const double s = double(std::max<int64_t>(step, 1)), w = double(opts_.warmup);
  return opts_.lr_scale / std::sqrt(double(cfg_.d_model)) * std::min(1.0 / std::sqrt(s), s * std::pow(w, -1.5));
}

void Seq2SeqTrainer::embed(const std::vector<std::vector<int64_t>>& ids, bool shift, Shape& shape,
                           std::vector<float>& x, const uint64_t* dropout_seed) const {
  const int64_t d = cfg_.d_model, B = int64_t(ids.size());
  int64_t S = 0;
  for (const auto& s : ids) S = std::max(S, int64_t(s.size()));
  shape = Shape{B, S, Layout::tokens, {}};
  for (const auto& s : ids) shape.lengths.push_back(int64_t(s.size()));
  x.assign(size_t(B * S * d), 0.0f);
  const float scale = float(std::sqrt(double(d)));
  const DropoutRule rule = DropoutRule::make(dropout_seed ? cfg_.dropout : 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    const auto& s = ids[size_t(b)];
    for (int64_t t = 0; t < int64_t(s.size()); ++t) {
      const int64_t id = shift ? (t == 0 ? cfg_.pad_id : s[size_t(t - 1)]) : s[size_t(t)];
      const float* e = embed_.data() + id * d;
      const float* p = positions_.data() + t * d;
      float* out = x.data() + (b * S + t) * d;
      for (int64_t j = 0; j < d; ++j) {
        out[j] = e[j] * scale + p[j];
        if (rule.active()) out[j] *= rule.factor(*dropout_seed, Stream::dropout_output, uint64_t((b * S + t) * d + j));
      }
    }
  }
}

struct Seq2SeqTrainer::Grads {
  EncoderWeights e;
  DecoderWeights d;
  std::vector<float> embed;
};

Seq2SeqStep Seq2SeqTrainer::forward_backward(const std::vector<std::vector<int64_t>>& sources,
                                             const std::vector<std::vector<int64_t>>& targets,
                                             const uint64_t* dropout_seed, Grads& g) const {
  if (sources.size() != targets.size() || sources.empty())
    throw Error("seq2seq step: expected as many targets as sources (and at least one), got " +
                std::to_string(sources.size()) + " sources, " + std::to_string(targets.size()) + " targets");
  check_ids(sources, cfg_, "source");
  check_ids(targets, cfg_, "target");
  const int64_t d = cfg_.d_model, V = cfg_.vocab;
  const bool training = dropout_seed != nullptr;
  const nn::Context ctx(opts_.isa, opts_.threads);
  const int threads = ctx.threads();
  const uint64_t step_seed = training ? *dropout_seed : 0;
  const uint64_t src_drop = derive_seed(step_seed, kEmbedStream, 0), tgt_drop = derive_seed(step_seed, kEmbedStream, 1);

  // Forward.
  Shape src_shape, tgt_shape;
  std::vector<float> xs, xt;
  embed(sources, false, src_shape, xs, training ? &src_drop : nullptr);
  embed(targets, true, tgt_shape, xt, training ? &tgt_drop : nullptr);
  EncoderRunOptions eo;
  eo.training = training;
  eo.seed = derive_seed(step_seed, 0, 0);
  eo.threads = threads;
  eo.isa = ctx.isa();
  DecoderRunOptions dop;
  dop.training = training;
  dop.seed = derive_seed(step_seed, 1, 0);
  dop.threads = threads;
  dop.isa = ctx.isa();
  std::vector<float> memory(xs.size()), h(xt.size());
  EncoderCache ec;
  DecoderCache dc;
  encoder_.forward(xs.data(), memory.data(), src_shape, eo, &ec);
  decoder_.forward(xt.data(), tgt_shape, memory.data(), src_shape, h.data(), dop, &dc);

  // The output projection (tied to the embeddings, plus the fixed
  // final_logits_bias) over the valid target rows, and the loss.
  const std::vector<int64_t> pos = nn::valid_positions(tgt_shape);
  const int64_t n = int64_t(pos.size());
  std::vector<int64_t> labels;
  for (const auto& t : targets) labels.insert(labels.end(), t.begin(), t.end());
  std::vector<float> H(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i) std::copy_n(h.data() + pos[size_t(i)] * d, d, H.data() + i * d);
  std::vector<float> logits(static_cast<size_t>(n * V));
  // The tied output projection (packed again each step: the weights change).
  nn::Linear(embed_.data(), d, V, logits_bias_.data()).forward(ctx, H.data(), n, logits.data());
  const double eps = opts_.label_smoothing;
  std::vector<double> row_loss(static_cast<size_t>(n)), row_nll(static_cast<size_t>(n));
  std::vector<uint8_t> row_hit(static_cast<size_t>(n));
  // PyTorch's cross_entropy(label_smoothing=ε): (1−ε)(−log p_y) + ε·mean_v(−log p_v);
  // dlogits = (softmax − (1−ε)·onehot − ε/V) / n, written over the logits.
  ctx.parallel_range(n, nn::grain_for(n, threads), [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      float* z = logits.data() + i * V;
      const int64_t y = labels[size_t(i)];
      int64_t arg = 0;
      double mean = 0;
      for (int64_t v = 0; v < V; ++v) {
        if (z[v] > z[arg]) arg = v;
        mean += z[v];
      }
      mean /= double(V);
      const double m = z[arg];
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - m);
      const double lse = m + std::log(sum);
      row_nll[size_t(i)] = lse - z[y];
      row_loss[size_t(i)] = (1.0 - eps) * (lse - z[y]) + eps * (lse - mean);
      row_hit[size_t(i)] = arg == y;
      for (int64_t v = 0; v < V; ++v) {
        const double p = std::exp(double(z[v]) - lse);
        z[v] = float((p - eps / double(V) - (v == y ? 1.0 - eps : 0.0)) / double(n));
      }
    }
  });
  Seq2SeqStep st;
  st.tokens = n;
  for (int64_t i = 0; i < n; ++i) {
    st.loss += row_loss[size_t(i)];
    st.nll += row_nll[size_t(i)];
    st.correct += row_hit[size_t(i)];
  }
  st.loss /= double(n);
  st.nll /= double(n);

  // Backward.
  g.embed.assign(embed_.size(), 0.0f);
  std::vector<float> dH(static_cast<size_t>(n * d));
  nn::linear_backward(ctx, H.data(), n, d, embed_.data(), V, logits.data(), dH.data(), false, g.embed.data(),
                      nullptr);
  std::vector<float> dh(h.size(), 0.0f);
  for (int64_t i = 0; i < n; ++i) std::copy_n(dH.data() + i * d, d, dh.data() + pos[size_t(i)] * d);
  std::vector<float> dxt(xt.size()), dmem(memory.size()), dxs(xs.size());
  g.d = DecoderWeights::zeros(decoder_.config());
  g.e = EncoderWeights::zeros(encoder_.config());
  decoder_.backward(xt.data(), dh.data(), tgt_shape, memory.data(), src_shape, dc, dxt.data(), dmem.data(), g.d, dop);
  encoder_.backward(xs.data(), dmem.data(), src_shape, ec, dxs.data(), g.e, eo);
  // The embeddings' share: dE[id] += √d · dropout factor · dx, except the
  // pad row (nn.Embedding's padding_idx, as MarianMT: the decoder's start
  // token is the pad token, its lookup adds no gradient).
  const float scale = float(std::sqrt(double(d)));
  const DropoutRule rule = DropoutRule::make(training ? cfg_.dropout : 0.0f);
  auto scatter = [&](const std::vector<std::vector<int64_t>>& ids, bool shift, const Shape& sh,
                     const std::vector<float>& dx, uint64_t drop) {
    for (int64_t b = 0; b < sh.batch; ++b) {
      const auto& s = ids[size_t(b)];
      for (int64_t t = 0; t < int64_t(s.size()); ++t) {
        const int64_t id = shift ? (t == 0 ? cfg_.pad_id : s[size_t(t - 1)]) : s[size_t(t)];
        if (id == cfg_.pad_id) continue;
        const float* gx = dx.data() + (b * sh.seq + t) * d;
        float* out = g.embed.data() + id * d;
        for (int64_t j = 0; j < d; ++j)
          out[j] += scale * gx[j] * rule.factor(drop, Stream::dropout_output, uint64_t((b * sh.seq + t) * d + j));
      }
    }
  };
  scatter(sources, false, src_shape, dxs, src_drop);
  scatter(targets, true, tgt_shape, dxt, tgt_drop);
  return st;
}

Seq2SeqStep Seq2SeqTrainer::gradients(const std::vector<std::vector<int64_t>>& sources,
                                      const std::vector<std::vector<int64_t>>& targets, bool dropout,
                                      SafetensorsFile* grads) const {
  const uint64_t seed = derive_seed(seed_, uint32_t(adam_.steps() + 1), 3);
  Grads g;
  const Seq2SeqStep st = forward_backward(sources, targets, dropout ? &seed : nullptr, g);
  if (grads) *grads = marian_tensors(g.e, g.d, g.embed, false);
  return st;
}

Seq2SeqStep Seq2SeqTrainer::step(const std::vector<std::vector<int64_t>>& sources,
                                 const std::vector<std::vector<int64_t>>& targets) {
  const int64_t t_next = adam_.steps() + 1;
  const uint64_t seed = derive_seed(seed_, uint32_t(t_next), 3);
  Grads g;
  Seq2SeqStep st = forward_backward(sources, targets, cfg_.dropout > 0.0f ? &seed : nullptr, g);
  // Adam on the schedule.
  std::vector<ParamRef> refs;
  for (size_t l = 0; l < ew_.layers.size(); ++l) {
    auto &v = ew_.layers[l], &gl = g.e.layers[l];
    add(refs, v.in_proj_weight, gl.in_proj_weight);
    add(refs, v.in_proj_bias, gl.in_proj_bias);
    add(refs, v.out_proj_weight, gl.out_proj_weight);
    add(refs, v.out_proj_bias, gl.out_proj_bias);
    add(refs, v.norm1_weight, gl.norm1_weight);
    add(refs, v.norm1_bias, gl.norm1_bias);
    add_ffn(refs, v.ffn, gl.ffn);
  }
  for (size_t l = 0; l < dw_.layers.size(); ++l) {
    auto &v = dw_.layers[l], &gl = g.d.layers[l];
    add(refs, v.self_attn, gl.self_attn);
    add(refs, v.cross_attn, gl.cross_attn);
    add(refs, v.norm1_weight, gl.norm1_weight);
    add(refs, v.norm1_bias, gl.norm1_bias);
    add(refs, v.norm2_weight, gl.norm2_weight);
    add(refs, v.norm2_bias, gl.norm2_bias);
    add_ffn(refs, v.ffn, gl.ffn);
  }
  add(refs, embed_, g.embed);
  st.lr = learning_rate(t_next);
  adam_.set_lr(st.lr);
  adam_.step(refs, nn::thread_count(RunOptions{.threads = opts_.threads}));
  encoder_.set_weights(ew_);
  decoder_.set_weights(dw_);
  return st;
}

std::vector<float> Seq2SeqTrainer::cross_attention(const std::vector<int64_t>& source,
                                                   const std::vector<int64_t>& target, int64_t layer) const {
  if (layer < 0 || layer >= cfg_.decoder_layers)
    throw Error("cross_attention: layer " + std::to_string(layer) + ", expected 0.." +
                std::to_string(cfg_.decoder_layers - 1));
  check_ids({source}, cfg_, "source");
  check_ids({target}, cfg_, "target");
  const int64_t d = cfg_.d_model, S = int64_t(source.size()), T = int64_t(target.size()), H = cfg_.heads,
                dh = d / H;
  Shape ss, ts;
  std::vector<float> xs, xt;
  embed({source}, false, ss, xs, nullptr);
  embed({target}, true, ts, xt, nullptr);
  std::vector<float> memory(xs.size()), y(xt.size()), q_in;
  EncoderRunOptions eo;
  eo.threads = opts_.threads;
  eo.isa = opts_.isa;
  encoder_.forward(xs.data(), memory.data(), ss, eo);
  DecoderRunOptions o;
  o.threads = opts_.threads;
  o.isa = opts_.isa;
  o.cross_attention_input = [&](int64_t l, const float* x, int64_t n) {
    if (l == layer) q_in.assign(x, x + n * d);
  };
  decoder_.forward(xt.data(), ts, memory.data(), ss, y.data(), o);
  const AttentionWeights& w = dw_.layers[size_t(layer)].cross_attn;
  // q = q_in W_qᵀ + b_q, k = memory W_kᵀ + b_k (in double: a picture, not a kernel).
  auto project = [&](const float* x, int64_t rows, int64_t block) {
    std::vector<double> out(size_t(rows * d));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o2 = 0; o2 < d; ++o2) {
        double s = w.in_proj_bias[size_t(block * d + o2)];
        const float* wr = w.in_proj_weight.data() + (block * d + o2) * d;
        for (int64_t j = 0; j < d; ++j) s += double(x[r * d + j]) * double(wr[j]);
        out[size_t(r * d + o2)] = s;
      }
    return out;
  };
  const std::vector<double> q = project(q_in.data(), T, 0), k = project(memory.data(), S, 1);
  std::vector<float> a(size_t(T * S), 0.0f);
  std::vector<double> row(static_cast<size_t>(S));
  for (int64_t hd = 0; hd < H; ++hd)
    for (int64_t t = 0; t < T; ++t) {
      double m = -INFINITY;
      for (int64_t s = 0; s < S; ++s) {
        double dot = 0;
        for (int64_t j = 0; j < dh; ++j) dot += q[size_t(t * d + hd * dh + j)] * k[size_t(s * d + hd * dh + j)];
        row[size_t(s)] = dot / std::sqrt(double(dh));
        m = std::max(m, row[size_t(s)]);
      }
      double sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += row[size_t(s)] = std::exp(row[size_t(s)] - m);
      for (int64_t s = 0; s < S; ++s) a[size_t(t * S + s)] += float(row[size_t(s)] / sum / double(H));
    }
  return a;
}

SafetensorsFile Seq2SeqTrainer::marian_tensors(const EncoderWeights& ew, const DecoderWeights& dw,
                                               const std::vector<float>& embed, bool with_bias) const {
  SafetensorsFile f;
  const int64_t d = cfg_.d_model, V = cfg_.vocab;
  auto put = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    f.tensors[name] = NamedTensor{std::move(shape), v, "F32", {}};
  };
  put("model.shared.weight", {V, d}, embed);
  if (with_bias) put("final_logits_bias", {1, V}, logits_bias_);
  auto attention = [&](const std::string& p, const AttentionWeights& w) {
    const char* names[3] = {"q_proj", "k_proj", "v_proj"};
    for (int64_t i = 0; i < 3; ++i) {
      put(p + names[i] + ".weight", {d, d},
          std::vector<float>(w.in_proj_weight.begin() + i * d * d, w.in_proj_weight.begin() + (i + 1) * d * d));
      put(p + names[i] + ".bias", {d},
          std::vector<float>(w.in_proj_bias.begin() + i * d, w.in_proj_bias.begin() + (i + 1) * d));
    }
    put(p + "out_proj.weight", {d, d}, w.out_proj_weight);
    put(p + "out_proj.bias", {d}, w.out_proj_bias);
  };
  auto ffn = [&](const std::string& p, const Weights& w) {
    put(p + "fc1.weight", {cfg_.d_ff, d}, w.w1);
    put(p + "fc1.bias", {cfg_.d_ff}, w.b1);
    put(p + "fc2.weight", {d, cfg_.d_ff}, w.w2);
    put(p + "fc2.bias", {d}, w.b2);
    put(p + "final_layer_norm.weight", {d}, w.norm_weight);
    put(p + "final_layer_norm.bias", {d}, w.norm_bias);
  };
  for (size_t l = 0; l < ew.layers.size(); ++l) {
    const std::string p = "model.encoder.layers." + std::to_string(l) + ".";
    const auto& w = ew.layers[l];
    attention(p + "self_attn.", AttentionWeights{w.in_proj_weight, w.in_proj_bias, w.out_proj_weight, w.out_proj_bias});
    put(p + "self_attn_layer_norm.weight", {d}, w.norm1_weight);
    put(p + "self_attn_layer_norm.bias", {d}, w.norm1_bias);
    ffn(p, w.ffn);
  }
  for (size_t l = 0; l < dw.layers.size(); ++l) {
    const std::string p = "model.decoder.layers." + std::to_string(l) + ".";
    const auto& w = dw.layers[l];
    attention(p + "self_attn.", w.self_attn);
    attention(p + "encoder_attn.", w.cross_attn);
    put(p + "self_attn_layer_norm.weight", {d}, w.norm1_weight);
    put(p + "self_attn_layer_norm.bias", {d}, w.norm1_bias);
    put(p + "encoder_attn_layer_norm.weight", {d}, w.norm2_weight);
    put(p + "encoder_attn_layer_norm.bias", {d}, w.norm2_bias);
    ffn(p, w.ffn);
  }
  return f;
}

void Seq2SeqTrainer::save_marian(const std::string& dir_in) const {
  const fs::path dir(dir_in);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) throw Error(dir_in + ": cannot make the directory");
  const int64_t d = cfg_.d_model, V = cfg_.vocab;
  const char* act = cfg_.activation == Activation::silu ? "swish"
                    : cfg_.activation == Activation::gelu ? "gelu"
                    : cfg_.activation == Activation::relu ? "relu"
                                                          : nullptr;
  if (!act) throw Error("save_marian: MarianMT's activations are swish, gelu and relu");
  const double dropout = std::round(double(cfg_.dropout) * 1e6) / 1e6;  // 0.1, not 0.10000000149
  const nlohmann::ordered_json config = {
      {"activation_dropout", dropout}, {"activation_function", act}, {"architectures", {"MarianMTModel"}},
      {"attention_dropout", dropout}, {"d_model", d}, {"decoder_attention_heads", cfg_.heads},
      {"decoder_ffn_dim", cfg_.d_ff}, {"decoder_layerdrop", 0.0}, {"decoder_layers", cfg_.decoder_layers},
      {"decoder_start_token_id", cfg_.pad_id}, {"decoder_vocab_size", V}, {"dropout", dropout},
      {"encoder_attention_heads", cfg_.heads}, {"encoder_ffn_dim", cfg_.d_ff}, {"encoder_layerdrop", 0.0},
      {"encoder_layers", cfg_.encoder_layers}, {"eos_token_id", cfg_.eos_id}, {"forced_eos_token_id", cfg_.eos_id},
      {"init_std", 0.02}, {"is_encoder_decoder", true}, {"max_position_embeddings", cfg_.max_positions},
      {"model_type", "marian"}, {"normalize_before", false}, {"num_hidden_layers", cfg_.encoder_layers},
      {"pad_token_id", cfg_.pad_id}, {"scale_embedding", true}, {"share_encoder_decoder_embeddings", true},
      {"static_position_embeddings", true}, {"tie_word_embeddings", true}, {"torch_dtype", "float32"},
      {"use_cache", true}, {"vocab_size", V}};
  const nlohmann::ordered_json generation = {
      {"bad_words_ids", {{cfg_.pad_id}}}, {"decoder_start_token_id", cfg_.pad_id}, {"eos_token_id", cfg_.eos_id},
      {"forced_eos_token_id", cfg_.eos_id}, {"max_length", cfg_.max_positions}, {"num_beams", 1},
      {"pad_token_id", cfg_.pad_id}};
  SafetensorsFile f = marian_tensors(ew_, dw_, embed_, true);
  f.metadata["format"] = "pt";  // as transformers' save_pretrained
  auto text = [&](const fs::path& p, const std::string& s) {
    io::write_file_atomic(p.string(), [&](std::FILE* fp) { io::write_all(fp, s.data(), s.size(), p.string()); });
  };
  write_safetensors((dir / "model.safetensors").string(), f);
  text(dir / "config.json", config.dump(2) + "\n");
  text(dir / "generation_config.json", generation.dump(2) + "\n");
}

}  // namespace ffn
