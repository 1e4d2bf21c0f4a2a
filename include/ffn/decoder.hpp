// The Transformer decoder (Vaswani et al., §3.1), as PyTorch's
// nn.TransformerDecoderLayer / nn.TransformerDecoder with batch_first=True:
//
//   post-LN (the paper):  x = Norm1(x + Drop(SelfMHA(x)))           (causal)
//                         x = Norm2(x + Drop(CrossMHA(x, memory)))
//                         x = Norm3(x + Drop(FFN(x)))
//   pre-LN (norm_first):  x = x + Drop(SelfMHA(Norm1(x)));  x = x + Drop(CrossMHA(Norm2(x), memory));
//                         x = x + Drop(FFN(Norm3(x)))
//
// and a stack of N such layers with an optional final norm. The self-attention
// is masked (a position sees itself and the positions before it) unless asked
// otherwise; the cross-attention's queries are the target positions and its
// keys and values the encoder's output ("memory"), projected by
// multihead_attn.in_proj_weight's last two thirds. The FFN sublayer is
// ffn::FeedForward with norm3 as its norm. Dropout (training only) at
// PyTorch's sites, on the encoder's Philox rule.
//
// Generation (DecoderState): the keys and values of the memory are projected
// once per layer, those of each generated position once when it is appended;
// a step's output is bitwise the output the whole prefix would give.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ffn/encoder.hpp"

namespace ffn {

// The same settings as the encoder's (d_model, heads, d_ff, layers,
// activation, norm placement and type, eps, bias, dropout, final_norm).
using DecoderConfig = EncoderConfig;
using DecoderLoadOptions = EncoderLoadOptions;

// One nn.MultiheadAttention's parameters.
struct AttentionWeights {
  std::vector<float> in_proj_weight, in_proj_bias;    // [3d, d], [3d]
  std::vector<float> out_proj_weight, out_proj_bias;  // [d, d], [d]
};

// One decoder layer's parameters, PyTorch's names in comments.
struct DecoderLayerWeights {
  AttentionWeights self_attn;                   // self_attn.*
  AttentionWeights cross_attn;                  // multihead_attn.*
  std::vector<float> norm1_weight, norm1_bias;  // norm1.* (after self-attention)
  std::vector<float> norm2_weight, norm2_bias;  // norm2.* (after cross-attention)
  Weights ffn;  // linear1.*, gate.* (gated), linear2.*, and norm3.* as the FFN's norm
};
struct DecoderWeights {
  std::vector<DecoderLayerWeights> layers;
  std::vector<float> norm_weight, norm_bias;  // the final norm (norm.*), when final_norm
  static DecoderWeights zeros(const DecoderConfig& cfg);
};

struct DecoderRunOptions : RunOptions {
  bool causal = true;  // target position s attends to target positions 0..s only
  // Called from the calling thread with each cross-attention sublayer's
  // query input (the valid target rows, n × d_model: x after norm1 for
  // post-LN, Norm2(x) for pre-LN) before its projection: for inspection
  // (Seq2SeqTrainer::cross_attention draws the attention from it).
  std::function<void(int64_t layer, const float* x, int64_t n)> cross_attention_input;
};

// What forward saves for backward; opaque.
class DecoderCache {
 public:
  DecoderCache();
  ~DecoderCache();
  DecoderCache(DecoderCache&&) noexcept;
  DecoderCache& operator=(DecoderCache&&) noexcept;
  size_t bytes() const;

 private:
  struct Data;
  friend struct detail::CacheAccess;
  Data& data();
  const Data& data() const;
  std::unique_ptr<Data> data_;
};

// The key/value caches of a batch of sequences being generated: made by
// Decoder::start from the encoder's output, advanced one position per live
// sequence by Decoder::step. Live sequence i continues source sequence
// source(i); select() rearranges the live sequences (beam search keeps the
// best continuations, finished sequences leave).
class DecoderState {
 public:
  DecoderState();
  ~DecoderState();
  DecoderState(DecoderState&&) noexcept;
  DecoderState& operator=(DecoderState&&) noexcept;
  int64_t live() const;              // sequences stepped together
  int64_t length(int64_t i) const;   // positions live sequence i has (0 before its first step)
  int64_t source(int64_t i) const;   // its memory sequence
  int64_t capacity() const;          // the most positions a sequence may have
  // New live sequence i is a copy of old live sequence from[i] (any order,
  // repeats allowed, fewer or more).
  void select(const std::vector<int64_t>& from);
  size_t bytes() const;

  struct Data;

 private:
  friend class Decoder;
  std::unique_ptr<Data> data_;
};

// forward, backward and step are const and may run concurrently on one Decoder.
class Decoder {
 public:
  // PyTorch's initialization (as Encoder's), each layer its own values.
  Decoder(const DecoderConfig& cfg, uint64_t seed);
  Decoder(const DecoderConfig& cfg, DecoderWeights weights);

  // Reads nn.TransformerDecoder's state_dict names (layers.N.self_attn.in_proj_weight,
  // layers.N.multihead_attn.*, layers.N.linear1.weight, layers.N.norm1..3.*, norm.*),
  // or one nn.TransformerDecoderLayer's (self_attn.in_proj_weight, ...); with
  // prefix "decoder." those of an nn.Transformer. Settings as Encoder::load.
  static Decoder load(const std::string& path, const DecoderLoadOptions& opts = {});
  void save(const std::string& path) const;
  void save_gradients(const std::string& path, const DecoderWeights& grads) const;
  SafetensorsFile to_safetensors() const;
  SafetensorsFile to_safetensors(const DecoderWeights& values) const;

  const DecoderConfig& config() const { return cfg_; }
  const std::vector<AssumedSetting>& assumed_settings() const { return assumed_; }
  // A copy whose FFN sublayers store their weight matrices as `dtype` (inference).
  // attention_int8 (int8 only): the self- and cross-attention's projections
  // (W_in, W_q, W_k|W_v, W_O) in int8 too, per-row weight scales and
  // per-token activation scales as the FFN's; false: attention stays fp32.
  // On CPUs whose int8 product is u8 × s8 only (AVX-512 VNNI, AMX) the
  // projections run in fp32 for now, as the encoder's.
  Decoder converted(WeightDtype dtype, bool attention_int8 = false) const;
  DecoderWeights weights() const;
  void set_weights(DecoderWeights w);

  // y = decoder(x, memory). x, y: shape.positions() × d_model (tokens layout
  // [B, T, d]); memory: memory_shape.positions() × d_model ([B, S, d], the
  // same B), its lengths the memory's key padding. Padding positions of x
  // and memory are never read; y is zero there.
  void forward(const float* x, const Shape& shape, const float* memory, const Shape& memory_shape, float* y,
               const DecoderRunOptions& opts = {}, DecoderCache* cache = nullptr) const;
  // dx, dmemory and every gradient (overwritten) from dy and what forward saved.
  void backward(const float* x, const float* dy, const Shape& shape, const float* memory, const Shape& memory_shape,
                const DecoderCache& cache, float* dx, float* dmemory, DecoderWeights& grads,
                const DecoderRunOptions& opts = {}) const;

  // Generation. start: the memory's keys and values of every layer, for
  // sequences of at most `capacity` positions; the live sequences are the
  // memory's sequences, none stepped yet. step: x [live, d] is each live
  // sequence's next position (its embedding), y [live, d] the decoder's
  // output there; every live sequence advances by one position. Inference only.
  DecoderState start(const float* memory, const Shape& memory_shape, int64_t capacity,
                     const RunOptions& opts = {}) const;
  void step(DecoderState& state, const float* x, float* y, const RunOptions& opts = {}) const;

  // Operations of one forward call (2 per multiply-add).
  double forward_flops(const Shape& shape, const Shape& memory_shape, bool causal) const;

 private:
  DecoderConfig cfg_;
  DecoderWeights w_;            // without the FFN parts, which ffn_ owns
  std::string prefix_;
  bool single_ = false;         // one nn.TransformerDecoderLayer's names
  std::vector<FeedForward> ffn_;
  std::shared_ptr<const void> packed_;
  std::vector<AssumedSetting> assumed_;
  void prepare();
};

}  // namespace ffn
