// Translation with Hugging Face MarianMT checkpoints (the opus-mt models):
// an encoder–decoder Transformer (ffn::Encoder, ffn::Decoder) with token
// embeddings scaled by √d_model (scale_embedding), Marian's sinusoidal
// positions (sines in the first half of each vector, cosines in the second,
// computed: save_pretrained does not store them), post-LN layers, the output
// projection tied to the embeddings (or lm_head) plus final_logits_bias, and
// generation as transformers' MarianMTModel.generate does it: greedy or beam
// search (num_beams, length_penalty, early_stopping), bad_words_ids,
// forced_eos_token_id at the last position, min_length / min_new_tokens,
// renormalize_logits, max_new_tokens. A generation setting that changes the
// result and is not among these (sampling, repetition penalties, n-gram
// bans, ...) is refused at load, naming the file and the key.
//
// A model directory holds config.json, model.safetensors and optionally
// generation_config.json (its values override config.json's, as in
// transformers); the tokenizer files are read by ffn::MarianTokenizer.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ffn/decoder.hpp"
#include "ffn/encoder.hpp"
#include "ffn/marian_tokenizer.hpp"

namespace ffn {

struct TranslationConfig {
  int64_t vocab_size = 0;          // source embeddings (and target when shared)
  int64_t decoder_vocab_size = 0;  // target vocabulary: the logits' width
  int64_t d_model = 0;
  int64_t max_positions = 0;       // max_position_embeddings: the position table's rows
  EncoderConfig encoder;
  DecoderConfig decoder;
  bool scale_embedding = false;    // multiply embeddings by √d_model
  bool shared_embeddings = true;   // share_encoder_decoder_embeddings
  // tie_word_embeddings: the output projection is the input embeddings
  // (transformers ties lm_head to the encoder's embeddings, which are the
  // target's when shared; untied: lm_head.weight).
  bool tied_head = true;
  int64_t pad_id = 0, eos_id = 0, decoder_start_id = 0;
  std::optional<int64_t> forced_eos_id;  // the last position's token, when set
  std::vector<int64_t> bad_words;        // single-token bad_words_ids: never generated
  // Generation defaults (generation_config.json, else config.json, else transformers' defaults).
  int64_t num_beams = 1;
  int64_t max_length = 20;  // counts the decoder start token, as transformers does
  double length_penalty = 1.0;
  bool early_stopping = false;
  int64_t min_length = 0;             // EOS banned while the sequence (start token counted) is shorter
  std::optional<int64_t> min_new_tokens;  // EOS banned before this many new tokens
  bool renormalize_logits = false;    // log-softmax again after the processors (beam scores)
};

struct GenerateOptions {
  std::optional<int64_t> beams;           // default: config().num_beams (1 when sampling)
  std::optional<int64_t> max_new_tokens;  // default: config().max_length − 1
  // Sampling instead of the search (beams 1), as CausalLM's SamplingOptions:
  // temperature > 0 draws from softmax(logits / T) after top_k and top_p;
  // repeat_penalty (also for greedy) as transformers' repetition_penalty over
  // the decoder's tokens (its start token included); seed: each source b
  // draws from seed + b·φ (source 0 from seed itself).
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  int threads = 0;                        // 0: all cores
  Isa isa = Isa::automatic;
  // Asked between decoding steps (and inside the encoder); true stops the
  // call with ffn::Interrupted.
  std::function<bool()> interrupted;
};

// What a generate call spent where (for benchmarks): seconds.
struct GenerateTimes {
  double encoder = 0, decoder = 0, projection = 0, search = 0;
  int64_t steps = 0, tokens = 0;  // decoding steps, target tokens produced
};

// MarianTokenizer: ffn/marian_tokenizer.hpp (the text room's).

// Marian's sinusoidal position table [n, d]: row p, column j < ⌈d/2⌉ is
// sin(p / 10000^(2j/d)), column ⌈d/2⌉ + j is cos(p / 10000^(2j/d)).
std::vector<float> marian_positions(int64_t n, int64_t d);

class TranslationModel {
 public:
  // Reads a MarianMT directory; errors name the file and the setting or tensor.
  // dtype: how the encoder's and decoder's FFN matrices are stored (as `ffn
  // run --dtype`); int8 also stores the output projection in int8 (per-row
  // scales, activations quantized per token), where the CPU runs the int8 product.
  static TranslationModel load(const std::string& dir, WeightDtype dtype = WeightDtype::fp32);

  const TranslationConfig& config() const { return cfg_; }
  const Encoder& encoder() const { return encoder_; }
  const Decoder& decoder() const { return decoder_; }
  // The source embeddings [vocab_size, d_model] (the target's too when
  // shared, and the output projection when tied), and final_logits_bias.
  const std::vector<float>& source_embeddings() const { return src_embed_; }
  const std::vector<float>& logits_bias() const { return logits_bias_; }

  // Teacher forcing, as MarianMTModel(input_ids, decoder_input_ids).logits:
  // [decoder_input.size(), decoder_vocab_size] for one source.
  std::vector<float> logits(const std::vector<int64_t>& source, const std::vector<int64_t>& decoder_input,
                            const RunOptions& opts = {}) const;

  // One result per source (any lengths, no padding needed): the generated ids
  // after the decoder start token, up to and including EOS when one was made.
  // Throws Error for an id out of range, an empty source, or max_new_tokens
  // past the position table.
  std::vector<std::vector<int64_t>> generate(const std::vector<std::vector<int64_t>>& sources,
                                             const GenerateOptions& opts = {}, GenerateTimes* times = nullptr) const;

 private:
  TranslationConfig cfg_;
  Encoder encoder_;
  Decoder decoder_;
  std::vector<float> src_embed_, tgt_embed_;  // [vocab, d] each (tgt empty when shared; transformers copies one table)
  std::vector<float> head_;                   // [decoder_vocab, d] when not tied (lm_head.weight)
  std::shared_ptr<const void> head_linear_;   // the output projection (nn::Linear: its panels, int8 weights for dtype int8, the bias)
  std::vector<float> logits_bias_;            // final_logits_bias [decoder_vocab]
  std::vector<float> positions_;              // [max_positions, d]
  TranslationModel(TranslationConfig cfg, Encoder e, Decoder d);
  const std::vector<float>& target_embeddings() const { return cfg_.shared_embeddings ? src_embed_ : tgt_embed_; }
  const std::vector<float>& head() const { return cfg_.tied_head ? src_embed_ : head_; }
  void embed(const std::vector<float>& table, int64_t id, int64_t position, float* out) const;
  void project(const float* h, int64_t n, float* logits, int threads, Isa isa) const;
  void encode(const std::vector<std::vector<int64_t>>& sources, std::vector<float>& memory, Shape& shape,
              const GenerateOptions& opts) const;
};

}  // namespace ffn
