// Sentence embeddings from a Hugging Face BERT checkpoint (e.g.
// sentence-transformers' all-MiniLM-L6-v2) through ffn's encoder:
//
//   ids   = WordPiece(text): [CLS] pieces [SEP], at most max_tokens
//   x     = LayerNorm(word[ids] + position[0..n) + token_type[0])
//   h     = the encoder layers (post-LN: attention + Add & Norm, FFN + Add & Norm)
//   e     = h pooled as the model's 1_Pooling/config.json says (mean, cls,
//           max, mean_sqrt_len, last token, or several concatenated), then
//           L2-normalized when modules.json has a Normalize module; a
//           prompt from config_sentence_transformers.json before the text
//
// A model directory holds config.json, model.safetensors and vocab.txt (and,
// from sentence-transformers, sentence_bert_config.json, modules.json and
// 1_Pooling/config.json). Every error names the file, tensor or setting;
// what a file leaves unsaid is noted (SentenceEncoder::load_notes).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ffn/encoder.hpp"
#include "ffn/ffn.hpp"

namespace ffn {

namespace detail {
struct SentenceModel;
}  // namespace detail

struct SentenceLoadOptions {
  // Tokens per text, [CLS] and [SEP] included. Unset: the model's
  // max_seq_length (sentence_bert_config.json), else max_position_embeddings.
  // Never more than max_position_embeddings.
  std::optional<int64_t> max_tokens;
  WeightDtype dtype = WeightDtype::fp32;  // how the FFN sublayers store their weights
  Isa isa = Isa::automatic;               // the kernels of int8's calibration run
  std::vector<int64_t> dtype_layers;      // the layers whose FFNs take `dtype` (empty: all)
  // int8: keep each layer's outlier input channels in float32 (Int8Options):
  // the float32 model runs once over the calibration texts at load, and the
  // channels whose largest |value| / rms(row) (FeedForward::input_peak_ratio)
  // exceeds the threshold are kept, at most 16 per layer and projection.
  // Off: plain per-token int8.
  bool int8_outliers = true;
  float outlier_threshold = 8.0f;  // |x| / rms(row); 8: bench/results/2026-11-29-int8-error-table.md
  // int8: the attention's Q/K/V and output projections in int8 too (the Q/K/V
  // projection's outlier channels calibrated as the FFN's); off: FFN only.
  bool int8_attention = true;
  std::vector<std::string> calibration_texts;  // empty: built-in (src/text/calibration.cpp)
};

struct EmbedOptions {
  int threads = 0;      // 0: all cores
  int64_t batch = 32;   // texts per encoder call (padding has no effect on any result)
  // Called after each batch with the texts done so far and the total.
  std::function<void(int64_t done, int64_t total)> progress;
  // As RunOptions::interrupted (ffn/types.hpp): asked before each batch and
  // between the encoder's sublayers; true stops embed with Interrupted.
  std::function<bool()> interrupted;
  Isa isa = Isa::automatic;  // the kernels (the caller's --isa)
  // The encoder's products (ffn/types.hpp Compute): fp32, or bf16 for every
  // projection of a BERT, MPNet or XLM-R stack whose layers are not int8
  // (Error naming the layer otherwise; a ModernBERT stack: Error): AMX or
  // AVX512_BF16 where the CPU has them.
  Compute compute = Compute::fp32;
  // The text put before each input, as sentence-transformers' encode(prompt=,
  // prompt_name=): prompt's text, or the model's prompt of that name
  // (config_sentence_transformers.json: E5's "query: ", BGE's instruction);
  // neither: the model's default prompt, if it names one. Not both.
  std::optional<std::string> prompt, prompt_name;
  // A text longer than max_tokens() (its prompt, [CLS] and [SEP] included)
  // is cut to it, as sentence-transformers does, and `truncated` is called
  // with its index; with truncate off it is refused (Error naming it), as
  // text-embeddings-inference does with truncate=false.
  bool truncate = true;
  std::function<void(int64_t text)> truncated;
};

class SentenceEncoder {
 public:
  // $FFN_MODEL_DIR if set, else ~/.cache/ffn/all-MiniLM-L6-v2 (where
  // scripts/setup.sh installs it).
  static std::string default_model_dir();
  static SentenceEncoder load(const std::string& dir, const SentenceLoadOptions& opts = {});
  ~SentenceEncoder();
  SentenceEncoder(SentenceEncoder&&) noexcept;
  SentenceEncoder& operator=(SentenceEncoder&&) noexcept;

  // Token ids as the model's tokenizer gives them ([CLS] … [SEP], truncated);
  // *cut (if given): whether the text was longer and was cut.
  std::vector<int32_t> tokenize(const std::string& text, bool* cut = nullptr) const;
  // The text embed puts before each input for these options (EmbedOptions::prompt,
  // prompt_name, else the model's default; "" for none); Error as embed gives it.
  std::string prompt_text(const EmbedOptions& opts) const;
  // Unit-length (if the model normalizes) embeddings, [texts.size(), dim()].
  Array embed(const std::vector<std::string>& texts, const EmbedOptions& opts = {}) const;
  // The same from token ids (each list as tokenize gives it: [CLS] … [SEP],
  // at most max_tokens()); Error naming the input for an id outside the vocabulary.
  Array embed_ids(const std::vector<std::vector<int32_t>>& ids, const EmbedOptions& opts = {}) const;
  // The encoder's output for one tokenized text, [ids.size(), dim()] (before pooling).
  // opts: the encoder call's run options (e.g. ffn_input), threads from `threads`.
  std::vector<float> hidden(const std::vector<int32_t>& ids, int threads = 0, const EncoderRunOptions& opts = {}) const;

  // What load assumed or left unused because the directory's files do not
  // say (e.g. "<dir>/1_Pooling/config.json: not found; assumed mean pooling",
  // a config.json num_hidden_layers below the layers model.safetensors
  // holds): one line each, naming the file; empty when the files say it all.
  // The library prints nothing: the caller shows them (ffn embed on stderr,
  // Python as UserWarnings from SentenceEncoder.load).
  const std::vector<std::string>& load_notes() const;
  int64_t dim() const;  // the pooled width: d_model per pooling mode
  // The pipeline after the encoder, for messages and docs: "mean, normalized",
  // "cls, normalized", "cls + mean", ...
  std::string pooling() const;
  // The model's prompts (config_sentence_transformers.json): name → text, and the default's name ("": none).
  const std::map<std::string, std::string>& prompts() const;
  const std::string& default_prompt_name() const;
  int64_t max_tokens() const;
  const Encoder& encoder() const;
  const std::string& dir() const;
  // The FFN input channels each layer keeps in float32 (int8 with outliers).
  std::vector<std::vector<int64_t>> fp32_input_channels() const;

 private:
  std::unique_ptr<detail::SentenceModel> impl_;  // the loaded model (src/models/sentence_model.hpp)
  SentenceEncoder();
  // The model without sentence-transformers' pipeline files when !pipeline
  // (a cross-encoder's body: no pooling, prompts or their notes).
  static SentenceEncoder load_body(const std::string& dir, const SentenceLoadOptions& opts, bool pipeline);
  friend class CrossEncoder;
};

}  // namespace ffn
