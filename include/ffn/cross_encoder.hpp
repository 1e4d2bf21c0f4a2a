// Cross-encoder rerankers (sentence-transformers' CrossEncoder, e.g.
// cross-encoder/ms-marco-MiniLM-L-6-v2): a BERT reads a (query, document)
// pair as one sequence, [CLS] query [SEP] document [SEP] with token types 0
// and 1, and a classification head turns its [CLS] row into scores:
//
//   p      = tanh(W_p h[CLS] + b_p)    (BertPooler)
//   scores = act(W_c p + b_c)          (the classifier: one label, or several)
//
// act is config.json's sbert_ce_default_activation_function (Identity, as
// the ms-marco models say; Sigmoid; unset: sigmoid for one label, identity
// for several, sentence-transformers' default). A model directory holds what
// transformers' BertForSequenceClassification saves (config.json,
// model.safetensors, vocab.txt, tokenizer_config.json); the body loads as
// SentenceEncoder's does (include/ffn/sentence.hpp). Pairs longer than
// max_tokens are cut longest first, as the fast tokenizer cuts them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ffn/sentence.hpp"

namespace ffn {

struct CrossEncoderLoadOptions {
  // Tokens per pair, [CLS] and both [SEP] included. Unset: tokenizer_config.json's
  // model_max_length, capped by max_position_embeddings.
  std::optional<int64_t> max_tokens;
  Isa isa = Isa::automatic;
};

struct RerankOptions {
  int threads = 0;     // 0: all cores
  int64_t batch = 32;  // pairs per encoder call (padding has no effect on any result)
  // As RunOptions::interrupted: asked before each batch and inside the encoder.
  std::function<bool()> interrupted;
  Isa isa = Isa::automatic;
  // A pair longer than max_tokens() is cut (longest first) and `truncated` is
  // called with its index; with truncate off it is refused (Error naming it).
  bool truncate = true;
  std::function<void(int64_t pair)> truncated;
  // The classifier's logits as they are, without the model's activation
  // (text-embeddings-inference's raw_scores).
  bool raw_scores = false;
};

class CrossEncoder {
 public:
  static CrossEncoder load(const std::string& dir, const CrossEncoderLoadOptions& opts = {});
  ~CrossEncoder();
  CrossEncoder(CrossEncoder&&) noexcept;
  CrossEncoder& operator=(CrossEncoder&&) noexcept;

  // The scores of (first, second) text pairs as CrossEncoder.predict gives
  // them: [pairs, labels()].
  Array predict(const std::vector<std::pair<std::string, std::string>>& pairs, const RerankOptions& opts = {}) const;
  // The documents ranked by their score for the query, best first (ties in
  // input order): (index, score). A model of one label only.
  std::vector<std::pair<int64_t, float>> rank(const std::string& query, const std::vector<std::string>& documents,
                                              const RerankOptions& opts = {}) const;
  // A pair's ids ([CLS] a [SEP] b [SEP], cut to max_tokens) and, if asked,
  // their token types and whether the pair was cut. Error for invalid UTF-8.
  std::vector<int32_t> tokenize(const std::string& a, const std::string& b, std::vector<int32_t>* types = nullptr,
                                bool* cut = nullptr) const;

  int64_t labels() const { return labels_; }
  int64_t max_tokens() const { return max_tokens_; }
  const std::string& activation() const { return activation_; }  // "identity" or "sigmoid"
  const std::vector<std::string>& load_notes() const { return body_.load_notes(); }
  const std::string& dir() const { return body_.dir(); }

 private:
  explicit CrossEncoder(SentenceEncoder body);
  SentenceEncoder body_;
  // The classification head (src/models/cross_encoder.cpp): BERT's and XLM-R's pooler and classifier, or
  // ModernBERT's pooling, dense layer, activation, norm and classifier.
  std::shared_ptr<const void> head_;
  int64_t labels_ = 1, max_tokens_ = 0;
  bool sigmoid_ = false;
  std::string activation_ = "identity";
};

}  // namespace ffn
