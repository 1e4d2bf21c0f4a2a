// The loaded BERT-shaped model behind SentenceEncoder and CrossEncoder
// (src/models/sentence.cpp loads it; src/models/cross_encoder.cpp adds its
// classification head): the tokenizer, the embeddings, the encoder and
// sentence-transformers' pipeline after it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ffn/encoder.hpp"
#include "ffn/sentence.hpp"
#include "models/pooling.hpp"
#include "models/rotary_encoder.hpp"
#include "text/encoder_tokenizer.hpp"

namespace ffn {

struct detail::SentenceModel {
  std::string config_path;  // config.json, for messages
  std::string dir;
  std::shared_ptr<const text::EncoderTokenizer> vocab;  // WordPiece or XLM-R's SentencePiece
  std::optional<Encoder> encoder;
  // A stack the Encoder cannot hold (ModernBERT's: rotary positions, local
  // windows), run instead of it; then `position` is empty (the positions are
  // in the attention) and the embedding is Norm(word) alone.
  std::optional<models::RotaryEncoder> rotary;
  int64_t d = 0, max_tokens = 0, positions = 0;  // positions: the ids a text may have (the table's rows past its offset)
  float eps = 1e-12f;
  std::vector<float> word, position, token_type, ln_weight, ln_bias;  // embeddings (token_type empty: none)
  // RoBERTa's and MPNet's positions (EmbeddingSpec::position_offset): the
  // pad id p (-1: rows 0, 1, ...); token i's row of the position table is
  // p + the count of non-pad ids through it, a pad id's p (transformers'
  // create_position_ids_from_input_ids).
  int32_t position_pad = -1;
  // MPNet's relative position bias: the encoder's position_bias table for
  // sequences of up to rel_span ids (empty: none; src/models/relative_bias.hpp).
  std::vector<float> rel_bias;
  int64_t rel_span = 0;
  models::Pooling pooling;  // sentence-transformers' modules after the encoder
  models::Prompts prompts;
  std::vector<std::string> notes;  // SentenceEncoder::load_notes
};

namespace models {

// The encoder's output y [B, S, d] (S: the longest list, set in shape) for
// B id lists; types: each id's token type (segment), null: all 0.
void encode_ids(const detail::SentenceModel& m, const std::vector<std::vector<int32_t>>& ids,
                const std::vector<std::vector<int32_t>>* types, int threads, EncoderRunOptions o, Shape& shape,
                std::vector<float>& y);

}  // namespace models
}  // namespace ffn
