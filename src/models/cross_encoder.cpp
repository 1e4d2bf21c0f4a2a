// Cross-encoder rerankers (include/ffn/cross_encoder.hpp): the BERT body of
// the sentence encoder (src/models/sentence_model.hpp), text pairs with
// token types, and BertForSequenceClassification's head (or XLM-R's, the same
// two layers under other names).
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

namespace ffn {

namespace fs = std::filesystem;
using models::json_get;
using models::json_opt;
using models::read_json;

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
  bool xlmr = false;
  if (cfg.is_object()) {
    const nlohmann::json archs = cfg.value("architectures", nlohmann::json::array());
    const std::string arch = archs.is_array() && archs.size() == 1 && archs[0].is_string() ? archs[0].get<std::string>() : "";
    xlmr = arch == "XLMRobertaForSequenceClassification";
    if (arch != "BertForSequenceClassification" && !xlmr)
      throw Error(cfg_path.string() + ": architectures is " + archs.dump() +
                  "; a cross-encoder here is a [\"BertForSequenceClassification\"] or "
                  "[\"XLMRobertaForSequenceClassification\"] (its pooler and classifier)");
  }
  SentenceLoadOptions lo;
  lo.isa = opts.isa;
  CrossEncoder ce(SentenceEncoder::load_body(dir_in, lo, false));
  const detail::SentenceModel& m = *ce.body_.impl_;
  const int64_t d = m.d;
  if (!xlmr && int64_t(m.token_type.size()) < 2 * d)
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
  auto linear = [&](const std::string& name, int64_t m) {
    const std::vector<float> w = f.read(name + ".weight", {m, d}), b = f.read(name + ".bias", {m});
    return std::make_shared<const nn::Linear>(w.data(), d, m, b.data());
  };
  ce.pooler_ = linear(xlmr ? "classifier.dense" : pre + "pooler.dense", d);
  ce.classifier_ = linear(xlmr ? "classifier.out_proj" : "classifier", ce.labels_);
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
  const auto& pooler = *static_cast<const nn::Linear*>(pooler_.get());
  const auto& classifier = *static_cast<const nn::Linear*>(classifier_.get());
  std::vector<float> y, cls, p;
  for (int64_t b0 = 0; b0 < N; b0 += opts.batch) {
    if (o.interrupted && o.interrupted()) throw Interrupted();
    const int64_t B = std::min(opts.batch, N - b0);
    const std::vector<std::vector<int32_t>> bi(ids.begin() + b0, ids.begin() + b0 + B),
        bt(types.begin() + b0, types.begin() + b0 + B);
    Shape shape;
    models::encode_ids(m, bi, &bt, threads, o, shape, y);
    // The batch's [CLS] rows through the head: p = tanh(pooler(cls)), scores = act(classifier(p)).
    cls.resize(size_t(B * d));
    p.resize(cls.size());
    for (int64_t b = 0; b < B; ++b) std::copy_n(y.data() + b * shape.seq * d, d, cls.data() + b * d);
    pooler.forward(ctx, cls.data(), B, p.data());
    for (float& v : p) v = std::tanh(v);
    float* e = out.data.data() + b0 * L;
    classifier.forward(ctx, p.data(), B, e);
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
