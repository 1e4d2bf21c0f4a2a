// ffn — training an encoder–decoder translation model on the paper's recipe
// (Vaswani et al., §5): teacher forcing, cross-entropy with label smoothing,
// Adam (β2 = 0.98) with the warm-up schedule
//   lr(step) = scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5),
// and dropout (the layers' four sites and the sum of embeddings and
// positions).
//
// The model is MarianMT's architecture, so that what is trained here is a
// checkpoint transformers' MarianMTModel and ffn::TranslationModel read:
// one embedding table shared by source and target and tied to the output
// projection, embeddings scaled by √d_model, Marian's sinusoidal positions,
// post-LN ffn::Encoder and ffn::Decoder layers, the decoder starting from
// the pad token. save_marian writes config.json, generation_config.json and
// model.safetensors (MarianTokenizer::train writes the tokenizer's files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ffn/decoder.hpp"
#include "ffn/encoder.hpp"
#include "ffn/io.hpp"
#include "ffn/train.hpp"

namespace ffn {

struct Seq2SeqConfig {
  int64_t vocab = 0;  // the shared vocabulary (vocab.json's size)
  int64_t d_model = 128, heads = 4, d_ff = 512;
  int64_t encoder_layers = 2, decoder_layers = 2;
  Activation activation = Activation::silu;  // Marian's "swish"
  float dropout = 0.1f;
  int64_t max_positions = 64;  // the longest source or target (EOS counted; the target's start token too)
  int64_t pad_id = 0, eos_id = 0;  // the decoder starts from pad_id, as MarianMT does
  void validate() const;  // throws Error naming the field
  EncoderConfig stack(int64_t layers) const;
};

struct Seq2SeqTrainOptions {
  double label_smoothing = 0.1;
  double lr_scale = 1.0;  // the schedule's factor
  int64_t warmup = 400;   // steps
  double beta1 = 0.9, beta2 = 0.98, eps = 1e-9;
  int threads = 0;        // 0: all cores
  Isa isa = Isa::automatic;
};

// One optimizer step's figures (over the batch's target tokens, EOS included).
struct Seq2SeqStep {
  double loss = 0;  // the label-smoothed cross-entropy (what is minimised), mean per token
  double nll = 0;   // the plain cross-entropy −log p(label), mean per token
  int64_t tokens = 0, correct = 0;  // tokens, and those whose arg max is the label
  double lr = 0;
};

class Seq2SeqTrainer {
 public:
  // Embeddings N(0, 1/d_model)-like (uniform of that variance, so the scaled
  // embedding has unit variance), the layers PyTorch's initialization; all
  // deterministic in seed.
  Seq2SeqTrainer(const Seq2SeqConfig& cfg, const Seq2SeqTrainOptions& opts, uint64_t seed);

  // Continues training a MarianMT checkpoint (TranslationModel::load's
  // directory) whose embeddings are shared and tied, scaled by √d_model, with
  // one layer shape for encoder and decoder. Its final_logits_bias is kept,
  // fixed, as transformers keeps it (a buffer). Dropout: config.json's
  // "dropout" at every site (ffn's layers have one probability; transformers
  // also has attention_dropout and activation_dropout, which save_marian
  // writes equal to it). Generation settings are not kept: save_marian
  // writes its own (greedy, max_length = max_positions).
  static Seq2SeqTrainer from_marian(const std::string& dir, const Seq2SeqTrainOptions& opts, uint64_t seed);

  // The loss of a batch and the gradient of every parameter, without a
  // step: dropout off unless `dropout`. Gradients under MarianMT's names
  // (model.shared.weight, model.encoder.layers.N.self_attn.q_proj.weight, ...).
  Seq2SeqStep gradients(const std::vector<std::vector<int64_t>>& sources,
                        const std::vector<std::vector<int64_t>>& targets, bool dropout, SafetensorsFile* grads) const;

  // One step on a batch: sources[i] (ids, ending with EOS) translates to
  // targets[i] (ids, ending with EOS); the decoder reads [pad] + targets[i]
  // without its last id (teacher forcing). Throws Error for an id outside the
  // vocabulary, an empty sequence or one longer than max_positions.
  Seq2SeqStep step(const std::vector<std::vector<int64_t>>& sources, const std::vector<std::vector<int64_t>>& targets);

  // The MarianMT checkpoint: config.json, generation_config.json (greedy,
  // max_length = max_positions, the pad token banned) and model.safetensors
  // in dir (made if missing), each written atomically.
  void save_marian(const std::string& dir) const;

  // Cross-attention probabilities of decoder layer `layer`, averaged over the
  // heads, in evaluation mode (no dropout), with the decoder reading
  // [pad] + target: [target.size(), source.size()] row-major, each row a
  // distribution over the source tokens.
  std::vector<float> cross_attention(const std::vector<int64_t>& source, const std::vector<int64_t>& target,
                                     int64_t layer) const;

  const Seq2SeqConfig& config() const { return cfg_; }
  int64_t parameters() const;  // trained values: embeddings, every weight, bias and norm
  int64_t steps() const { return adam_.steps(); }
  double learning_rate(int64_t step) const;  // the schedule at step ≥ 1

 private:
  Seq2SeqConfig cfg_;
  Seq2SeqTrainOptions opts_;
  Encoder encoder_;
  Decoder decoder_;
  EncoderWeights ew_;  // the master copies the optimizer updates
  DecoderWeights dw_;
  std::vector<float> embed_;  // [vocab, d]: source and target embeddings and the output projection
  std::vector<float> positions_;
  std::vector<float> logits_bias_;  // final_logits_bias [vocab]: fixed (zero unless loaded)
  Optimizer adam_;
  uint64_t seed_ = 0;
  // x [B, S, d] = E[id]·√d + position (the decoder's ids shifted right after
  // the pad token when `shift`), dropout applied when `dropout_seed` is set.
  struct Grads;
  Seq2SeqStep forward_backward(const std::vector<std::vector<int64_t>>& sources,
                               const std::vector<std::vector<int64_t>>& targets, const uint64_t* dropout_seed,
                               Grads& g) const;
  SafetensorsFile marian_tensors(const EncoderWeights& ew, const DecoderWeights& dw, const std::vector<float>& embed,
                                 bool with_bias) const;
  void embed(const std::vector<std::vector<int64_t>>& ids, bool shift, Shape& shape, std::vector<float>& x,
             const uint64_t* dropout_seed) const;
};

}  // namespace ffn
