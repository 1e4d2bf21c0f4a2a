// The encoder (sentence-embedding) families as data, as the causal LMs'
// architectures are (src/models/arch.hpp): a family is its config.json
// model_type, its config reader (config.json → the stack's StackSpec, from
// which the model's EncoderConfig is made: src/modules/stack_config.hpp) and
// its file's tensor names (a name table over EncTensor,
// src/models/checkpoint.hpp); the loader (src/models/sentence.cpp) reads
// every family's tensors through a TensorSource with it. BERT is built in
// (all-MiniLM-L6-v2 and its kin); a test registers a toy family with other
// names and finds the same embeddings (tests/models/test_encoder_family.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/checkpoint.hpp"
#include "modules/spec.hpp"

namespace ffn::models {

struct EncoderFamily {
  std::string model_type;  // config.json's
  const EncoderNameTable* names = nullptr;
  // A prefix the file's names may carry (BertModel's "bert." when the model
  // was saved from a task model): used when the word embedding is not found
  // without it.
  std::string optional_prefix;
  // config.json (read from `path`, for messages) → the stack: sizes, norm,
  // FFN unit, biases, the embedding's vocabulary, positions and token types.
  // Throws Error naming the file and the key it cannot take.
  nn::StackSpec (*config)(const nlohmann::json& cfg, const std::filesystem::path& path) = nullptr;
  // The tokenizer: WordPiece from vocab.txt (BERT, MPNet), XLM-R's
  // SentencePiece from sentencepiece.bpe.model, or a byte-level BPE from
  // tokenizer.json with its post-processor's template (ModernBERT).
  enum class Tokenizer { wordpiece, xlmr_sentencepiece, bpe_json } tokenizer = Tokenizer::wordpiece;
};

// BertModel's config.json (transformers' BertConfig): BERT's row's reader,
// for families that keep BERT's config and rename its tensors.
nn::StackSpec bert_config(const nlohmann::json& cfg, const std::filesystem::path& path);

// The registered families: the built-in ones (bert), then any
// register_encoder_family added.
const std::vector<EncoderFamily>& encoder_families();
// Adds one; Error if the model_type is taken or the row has no name table or config reader.
void register_encoder_family(EncoderFamily f);
// The family of a model_type, or null.
const EncoderFamily* find_encoder_family(const std::string& model_type);
// "bert, ...": the model types, for messages.
std::string encoder_family_names();

}  // namespace ffn::models
