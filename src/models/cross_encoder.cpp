// Cross-encoder rerankers (include/ffn/cross_encoder.hpp): the body of the
// sentence encoder (src/models/sentence_model.hpp), text pairs with token
// types, and BertForSequenceClassification's head (XLM-R's: the same two
// layers under other names; ModernBERT's: its pooling, dense, activation,
// norm and classifier).
#include "ffn/cross_encoder.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/json_file.hpp"
#include "backends/context.hpp"
#include "ffn/diagnostics.hpp"
#include "models/checkpoint.hpp"
#include "ops/linear.hpp"
#include "models/sentence_model.hpp"
#include "ops/norm.hpp"

namespace ffn {

namespace fs = std::filesystem;
using models::json_get;
using models::json_opt;
using models::read_json;

namespace {

// The classification head on the body's rows y [B, S, d] (sequence b's first lengths[b] rows):
//   BERT, XLM-R:  scores = W_c tanh(W_p h[CLS] + b_p) + b_c
//   ModernBERT:   scores = W_c Norm(act(W_d pool(h) + b_d)) + b_c, pool = [CLS] or the mean of the rows
struct Head {
  nn::Linear dense, classifier;
  bool modernbert = false, mean = false;
  Activation act = Activation::gelu;
  std::vector<float> norm_w, norm_b;  // ModernBERT's LayerNorm (β zeros where it has none)
  float eps = 1e-5f;
};

float activate(Activation a, float x) {
  switch (a) {
    case Activation::gelu: return 0.5f * x * (1.0f + std::erf(x * float(M_SQRT1_2)));
    case Activation::gelu_tanh: return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    case Activation::silu: return x / (1.0f + std::exp(-x));
    case Activation::relu: return x > 0 ? x : 0.0f;
    default: return x;
  }
}

}  // namespace

CrossEncoder::CrossEncoder(SentenceEncoder body) : body_(std::move(body)) {}
CrossEncoder::~CrossEncoder() = default;
CrossEncoder::CrossEncoder(CrossEncoder&&) noexcept = default;
CrossEncoder& CrossEncoder::operator=(CrossEncoder&&) noexcept = default;

CrossEncoder CrossEncoder::load(const std::string& dir_in, const CrossEncoderLoadOptions& opts) {
  const fs::path dir(dir_in);
  const fs::path cfg_path = dir / "config.json";
  std::error_code ec;
  // The head first: a directory of another kind is refused before its body is read.
  const nlohmann::json cfg = fs::is_directory(dir, ec) && fs::exists(cfg_path, ec) ? read_json(cfg_path) : nlohmann::json{};
  // BERT's head: BertPooler (dense, tanh on [CLS]) and the classifier; XLM-R's
  // (bge-reranker-base): RobertaClassificationHead, the same two layers on <s>
  // (classifier.dense, tanh, classifier.out_proj).
  // ModernBERT's (gte-reranker-modernbert): ModernBertPredictionHead (dense, act, norm) on the [CLS] row or
  // the rows' mean (classifier_pooling), then the classifier.
  bool xlmr = false, modernbert = false;
  if (cfg.is_object()) {
    const nlohmann::json archs = cfg.value("architectures", nlohmann::json::array());
    const std::string arch = archs.is_array() && archs.size() == 1 && archs[0].is_string() ? archs[0].get<std::string>() : "";
    xlmr = arch == "XLMRobertaForSequenceClassification";
    modernbert = arch == "ModernBertForSequenceClassification";
    if (arch != "BertForSequenceClassification" && !xlmr && !modernbert)
      throw Error(cfg_path.string() + ": architectures is " + archs.dump() +
                  "; a cross-encoder here is a [\"BertForSequenceClassification\"], "
                  "[\"XLMRobertaForSequenceClassification\"] or [\"ModernBertForSequenceClassification\"] "
                  "(its pooler and classifier)");
  }
  SentenceLoadOptions lo;
  lo.isa = opts.isa;
  CrossEncoder ce(SentenceEncoder::load_body(dir_in, lo, false));
  const detail::SentenceModel& m = *ce.body_.impl_;
  const int64_t d = m.d;
  if (!xlmr && !modernbert && int64_t(m.token_type.size()) < 2 * d)
    throw Error(cfg_path.string() + ": type_vocab_size is 1; a BERT cross-encoder reads its second text as token "
                "type 1 (type_vocab_size 2)");

  // How many labels and their activation, as sentence-transformers reads them.
  ce.labels_ = cfg.contains("id2label") && cfg["id2label"].is_object() ? int64_t(cfg["id2label"].size())
                                                                      : json_opt<int64_t>(cfg, "num_labels", 2, cfg_path);
  if (ce.labels_ < 1)
    throw Error(cfg_path.string() + ": the classifier has no labels (id2label, num_labels); it needs at least one");
  const std::string act = json_opt<std::string>(cfg, "sbert_ce_default_activation_function", "", cfg_path);
  if (act.empty()) ce.sigmoid_ = ce.labels_ == 1;
  else if (act == "torch.nn.modules.activation.Sigmoid") ce.sigmoid_ = true;
  else if (act == "torch.nn.modules.linear.Identity") ce.sigmoid_ = false;
  else
    throw Error(cfg_path.string() + ": sbert_ce_default_activation_function '" + act +
                "' is not supported (torch.nn.modules.linear.Identity, torch.nn.modules.activation.Sigmoid)");
  ce.activation_ = ce.sigmoid_ ? "sigmoid" : "identity";

  // Tokens per pair: the tokenizer's model_max_length, capped by the positions.
  ce.max_tokens_ = m.positions;
  const fs::path tp = dir / "tokenizer_config.json";
  if (fs::exists(tp, ec)) {
    const nlohmann::json tc = read_json(tp);
    if (tc.contains("model_max_length") && tc["model_max_length"].is_number_integer())
      ce.max_tokens_ = std::min(ce.max_tokens_, std::max<int64_t>(3, tc["model_max_length"].get<int64_t>()));
  }
  if (opts.max_tokens) {
    if (*opts.max_tokens < 3 || *opts.max_tokens > m.positions)
      throw Error("max tokens (--max-tokens): expected 3.." + std::to_string(m.positions) +
                  " (the model's position table), got " + std::to_string(*opts.max_tokens));
    ce.max_tokens_ = *opts.max_tokens;
  }

  // The head: BertPooler's dense layer (under the body's "bert." prefix, as
  // the task model saves it) and the classifier; or XLM-R's classification head.
  const models::TensorSource f = models::TensorSource::open((dir / "model.safetensors").string(), "config.json");
  const std::string pre = f.has("bert.pooler.dense.weight") ? "bert." : "";
  auto linear = [&](const std::string& name, int64_t m, bool bias = true) {
    const std::vector<float> w = f.read(name + ".weight", {m, d}), b = bias ? f.read(name + ".bias", {m}) : std::vector<float>{};
    return nn::Linear(w.data(), d, m, bias ? b.data() : nullptr);
  };
  auto head = std::make_shared<Head>();
  head->modernbert = modernbert;
  if (modernbert) {
    const std::string pooling = json_opt<std::string>(cfg, "classifier_pooling", "cls", cfg_path);
    if (pooling != "cls" && pooling != "mean")
      throw Error(cfg_path.string() + ": classifier_pooling '" + pooling + "' is not supported (cls, mean)");
    head->mean = pooling == "mean";
    const std::string act = json_opt<std::string>(cfg, "classifier_activation", "gelu", cfg_path);
    if (act == "gelu") head->act = Activation::gelu;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh") head->act = Activation::gelu_tanh;
    else if (act == "silu" || act == "swish") head->act = Activation::silu;
    else if (act == "relu") head->act = Activation::relu;
    else throw Error(cfg_path.string() + ": classifier_activation '" + act + "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, silu, relu)");
    head->dense = linear("head.dense", d, json_opt<bool>(cfg, "classifier_bias", false, cfg_path));
    head->norm_w = f.read("head.norm.weight", {d});
    head->norm_b = json_opt<bool>(cfg, "norm_bias", false, cfg_path) ? f.read("head.norm.bias", {d})
                                                                     : std::vector<float>(size_t(d), 0.0f);
    head->eps = float(json_opt<double>(cfg, "norm_eps", 1e-5, cfg_path));
    head->classifier = linear("classifier", ce.labels_);
  } else {
    head->dense = linear(xlmr ? "classifier.dense" : pre + "pooler.dense", d);
    head->classifier = linear(xlmr ? "classifier.out_proj" : "classifier", ce.labels_);
  }
  ce.head_ = head;
  return ce;
}

std::vector<int32_t> CrossEncoder::tokenize(const std::string& a, const std::string& b, std::vector<int32_t>* types,
                                            bool* cut) const {
  std::vector<int32_t> t;
  std::vector<int32_t> ids = body_.impl_->vocab->encode_pair(a, b, max_tokens_, t, "pair", cut);
  if (types) *types = std::move(t);
  return ids;
}

Array CrossEncoder::predict(const std::vector<std::pair<std::string, std::string>>& pairs,
                            const RerankOptions& opts) const {
  if (opts.batch < 1) throw Error("batch: expected a positive integer, got " + std::to_string(opts.batch));
  const detail::SentenceModel& m = *body_.impl_;
  const int threads = resolve_threads(opts.threads);
  const int64_t N = int64_t(pairs.size()), d = m.d, L = labels_;
  // Every pair is tokenized (and checked) before any work.
  std::vector<std::vector<int32_t>> ids(pairs.size()), types(pairs.size());
  for (int64_t i = 0; i < N; ++i) {
    const std::string what = "pair " + std::to_string(i);
    bool cut = false;
    ids[size_t(i)] = m.vocab->encode_pair(pairs[size_t(i)].first, pairs[size_t(i)].second, max_tokens_,
                                         types[size_t(i)], what, &cut);
    if (cut && !opts.truncate)
      throw Error(what + ": more than the model's " + std::to_string(max_tokens_) +
                  " tokens (its special tokens included), and truncation is off (--no-truncate, truncate=False)");
    if (cut && opts.truncated) opts.truncated(i);
  }
  Array out;
  out.shape = {N, L};
  out.data.assign(size_t(N * L), 0.0f);
  EncoderRunOptions o;
  o.isa = opts.isa;
  o.interrupted = opts.interrupted;
  const nn::Context ctx(opts.isa, threads);
  const Head& head = *static_cast<const Head*>(head_.get());
  std::vector<float> y, cls, p, mean, rstd;
  for (int64_t b0 = 0; b0 < N; b0 += opts.batch) {
    if (o.interrupted && o.interrupted()) throw Interrupted();
    const int64_t B = std::min(opts.batch, N - b0);
    const std::vector<std::vector<int32_t>> bi(ids.begin() + b0, ids.begin() + b0 + B),
        bt(types.begin() + b0, types.begin() + b0 + B);
    Shape shape;
    models::encode_ids(m, bi, &bt, threads, o, shape, y);
    // The batch's pooled rows ([CLS], or the mean of each sequence's rows) through the head.
    cls.assign(size_t(B * d), 0.0f);
    p.resize(cls.size());
    for (int64_t b = 0; b < B; ++b) {
      const float* h = y.data() + b * shape.seq * d;
      float* c = cls.data() + b * d;
      const int64_t n = head.mean ? shape.lengths[size_t(b)] : 1;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) c[j] += h[i * d + j];
      if (head.mean)
        for (int64_t j = 0; j < d; ++j) c[j] /= float(n);
    }
    head.dense.forward(ctx, cls.data(), B, p.data());
    for (float& v : p) v = head.modernbert ? activate(head.act, v) : std::tanh(v);
    if (head.modernbert) {
      mean.resize(size_t(B));
      rstd.resize(size_t(B));
      nn::norm_forward(ctx, NormType::layernorm, head.eps, p.data(), B, d, head.norm_w.data(), head.norm_b.data(),
                       p.data(), mean.data(), rstd.data());
    }
    float* e = out.data.data() + b0 * L;
    head.classifier.forward(ctx, p.data(), B, e);
    if (sigmoid_ && !opts.raw_scores)
      for (int64_t k = 0; k < B * L; ++k) e[k] = 1.0f / (1.0f + std::exp(-e[k]));
  }
  return out;
}

std::vector<std::pair<int64_t, float>> CrossEncoder::rank(const std::string& query,
                                                          const std::vector<std::string>& documents,
                                                          const RerankOptions& opts) const {
  if (labels_ != 1)
    throw Error("rank: the model has " + std::to_string(labels_) + " labels; ranking needs a one-score model");
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& doc : documents) pairs.emplace_back(query, doc);
  const Array s = predict(pairs, opts);
  std::vector<std::pair<int64_t, float>> r;
  for (size_t i = 0; i < documents.size(); ++i) r.emplace_back(int64_t(i), s.data[i]);
  // Best first; a NaN score (broken weights) last, so that the order is a strict weak one.
  auto key = [](float s) { return std::isnan(s) ? -INFINITY : s; };
  std::stable_sort(r.begin(), r.end(), [&](const auto& a, const auto& b) { return key(a.second) > key(b.second); });
  return r;
}

}  // namespace ffn
