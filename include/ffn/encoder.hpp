// The Transformer encoder around the FFN sublayer (Vaswani et al., §3.1):
//
//   post-LN (the paper):  x = Norm1(x + Drop(MHA(x)));  x = Norm2(x + Drop(FFN(x)))
//   pre-LN (norm_first):  x = x + Drop(MHA(Norm1(x)));  x = x + Drop(FFN(Norm2(x)))
//
// and a stack of N such layers with an optional final norm, as PyTorch's
// nn.TransformerEncoderLayer / nn.TransformerEncoder with batch_first=True.
// MHA is nn.MultiheadAttention's self-attention: Q, K, V = x W_inᵀ + b_in
// (in_proj_weight [3d, d] packs W_q, W_k, W_v), `heads` heads of d/heads,
// softmax(Q Kᵀ / √(d/heads)) V per head with a key padding mask from the
// sequence lengths and an optional causal mask, heads concatenated, then
// out_proj (W_O, b_O). The FFN sublayer is ffn::FeedForward (its fast paths, its
// activations, gated ones included, LayerNorm or RMSNorm) with norm2 as its
// norm. Dropout (training only) uses the one probability `dropout` at
// PyTorch's four sites: the attention probabilities, the attention output,
// the FFN's hidden activation and its output.
//
// Inputs are [B, S, d] (tokens layout) with optional lengths; padding
// positions are never read and are written as zeros.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ffn/feed_forward.hpp"

namespace ffn {

struct EncoderConfig {
  int64_t d_model = 512;
  int64_t heads = 8;       // d_model must be a multiple of heads
  int64_t d_ff = 2048;
  int64_t layers = 1;
  Activation activation = Activation::relu;
  NormPlacement norm = NormPlacement::post;  // post or pre (PyTorch's norm_first)
  NormType norm_type = NormType::layernorm;
  float eps = 1e-5f;
  bool bias = true;         // every projection's bias (in_proj, out_proj, linear1, linear2)
  float dropout = 0.0f;     // training only, at PyTorch's four sites
  bool final_norm = false;  // nn.TransformerEncoder's `norm` after the last layer

  void validate() const;  // throws Error naming the field
  bool operator==(const EncoderConfig&) const = default;
  // The FFN sublayer's configuration (norm2 as its norm).
  Config ffn_config() const;
};

// One encoder layer's parameters, PyTorch layout and names (in comments).
struct EncoderLayerWeights {
  std::vector<float> in_proj_weight, in_proj_bias;    // self_attn.in_proj_*: [3d, d], [3d]
  std::vector<float> out_proj_weight, out_proj_bias;  // self_attn.out_proj.*: [d, d], [d]
  std::vector<float> norm1_weight, norm1_bias;        // norm1.*: [d] (no bias for RMSNorm)
  Weights ffn;  // linear1.*, gate.* (gated), linear2.*, and norm2.* as the FFN's norm
};
struct EncoderWeights {
  std::vector<EncoderLayerWeights> layers;
  std::vector<float> norm_weight, norm_bias;  // the final norm (norm.*), when final_norm
  // Zero-filled parameters of the right sizes (e.g. for gradients).
  static EncoderWeights zeros(const EncoderConfig& cfg);
};

// Mask options of one call.
struct EncoderRunOptions : RunOptions {
  bool causal = false;  // query s attends to keys 0..s only
  // Called from the calling thread with each FFN sublayer's input (the
  // valid tokens' rows, n × d_model floats) before the sublayer runs: for
  // calibration (FeedForward::input_absmax) and inspection.
  std::function<void(int64_t layer, const float* x, int64_t n)> ffn_input;
  // The same with each attention sublayer's input (x, or Norm1(x) for pre-LN:
  // what the Q/K/V projection reads), for the int8 projections' calibration.
  std::function<void(int64_t layer, const float* x, int64_t n)> attention_input;
  // A relative position bias added to every layer's scaled attention scores
  // before the softmax (MPNet's; inference, no cache): key j of query s in
  // head h gets position_bias[h · (2·span − 1) + (span − 1) + (j − s)], so
  // the table holds offsets −(span − 1) .. span − 1 for each head; every
  // sequence must be at most `span` long. Null: none.
  const float* position_bias = nullptr;
  int64_t position_bias_span = 0;
};

// What forward saves for backward; opaque.
class EncoderCache {
 public:
  EncoderCache();
  ~EncoderCache();
  EncoderCache(EncoderCache&&) noexcept;
  EncoderCache& operator=(EncoderCache&&) noexcept;
  size_t bytes() const;

 private:
  // The contents (src/ops/forward_cache.hpp, src/modules/encoder.cpp): the
  // library's own, reached through detail::CacheAccess.
  struct Data;
  friend struct detail::CacheAccess;
  Data& data();
  const Data& data() const;
  std::unique_ptr<Data> data_;
};

struct EncoderLoadOptions {
  std::string prefix;                   // e.g. "encoder." (a trailing '.' is added if missing)
  std::optional<int64_t> heads;         // required when the file's __metadata__ has no ffn.heads
  std::optional<Activation> activation; // else __metadata__ ffn.activation, else relu
  std::optional<NormPlacement> norm;    // else __metadata__ ffn.norm, else post
  std::optional<NormType> norm_type;    // else __metadata__ ffn.norm_type, else layernorm
  std::optional<float> eps;             // else __metadata__ ffn.eps, else 1e-5
  float dropout = 0.0f;
  // (What load assumed: Encoder::assumed_settings().)
};

// forward and backward are const and may run concurrently on one Encoder.
class Encoder {
 public:
  // PyTorch's initialization: in_proj_weight Xavier-uniform, in_proj_bias and
  // out_proj.bias zero, out_proj.weight, linear1 and linear2 as nn.Linear,
  // norms γ = 1, β = 0. Each layer draws its own values (PyTorch deep-copies
  // one layer, so its layers start equal).
  Encoder(const EncoderConfig& cfg, uint64_t seed);
  // Takes the given weights; throws Error if a size does not match cfg.
  Encoder(const EncoderConfig& cfg, EncoderWeights weights);

  // Reads nn.TransformerEncoder's state_dict names (layers.N.self_attn.in_proj_weight,
  // layers.N.linear1.weight, layers.N.norm1.weight, …, norm.weight), or one
  // nn.TransformerEncoderLayer's (self_attn.in_proj_weight, …). Separate
  // self_attn.{q,k,v}_proj_weight are accepted for in_proj_weight. Sizes,
  // layer count, gating and bias come from the tensors; heads and the
  // settings from __metadata__ unless given.
  static Encoder load(const std::string& path, const EncoderLoadOptions& opts = {});
  // Writes nn.TransformerEncoder's names (prefix kept) and the settings in
  // __metadata__ (ffn.heads, ffn.layers, ffn.activation, ffn.norm, ...), atomically.
  void save(const std::string& path) const;
  // Gradients under the names the weights were loaded from.
  void save_gradients(const std::string& path, const EncoderWeights& grads) const;
  // What save writes (tensors and __metadata__), and gradients (or any
  // parameter-shaped values) under the same names, without writing a file.
  SafetensorsFile to_safetensors() const;
  SafetensorsFile to_safetensors(const EncoderWeights& values) const;

  const EncoderConfig& config() const { return cfg_; }
  // The settings load took from a default (a PyTorch file records none), as
  // FeedForward::assumed_settings; empty for an encoder made in memory.
  const std::vector<AssumedSetting>& assumed_settings() const { return assumed_; }
  // A copy whose FFN sublayers store their weight matrices as `dtype`
  // (inference only), and layer l's FFN sublayer. layers: which layers to
  // convert (empty: all); int8: layer l's FFN Int8Options (empty: none).
  // attention_int8 (int8 only; one per layer, or empty): the attention's
  // Q/K/V and output projections of the converted layers in int8 too, the
  // Q/K/V projection with layer l's fp32 input channels (the output
  // projection with none). Empty: attention stays fp32. The projections run
  // on the u8 × s8 product on AVX-512 VNNI and AMX CPUs, on AVX2's int16 ×
  // int8 vpmaddwd on AVX2 (and AVX-512 without VNNI), portable code elsewhere.
  Encoder converted(WeightDtype dtype, const std::vector<int64_t>& layers = {},
                    const std::vector<Int8Options>& int8 = {},
                    const std::vector<Int8Options>& attention_int8 = {}) const;
  const FeedForward& ffn_layer(int64_t l) const { return ffn_.at(size_t(l)); }
  EncoderWeights weights() const;  // a copy
  void set_weights(EncoderWeights w);

  // y = encoder(x); x, y: shape.positions() × d_model floats, tokens layout, not overlapping.
  void forward(const float* x, float* y, const Shape& shape, const EncoderRunOptions& opts = {},
               EncoderCache* cache = nullptr) const;
  // dx and every gradient (overwritten) from dy and what forward saved.
  void backward(const float* x, const float* dy, const Shape& shape, const EncoderCache& cache, float* dx,
                EncoderWeights& grads, const EncoderRunOptions& opts = {}) const;

  // Operations of one forward call (2 per multiply-add): projections, FFN and
  // attention's two products over the keys each query sees.
  double forward_flops(const Shape& shape, bool causal) const;

 private:
  EncoderConfig cfg_;
  EncoderWeights w_;           // without the FFN parts, which ffn_ owns
  std::string prefix_;         // of the file it was loaded from ("" for one made in memory)
  bool single_ = false;        // names of one nn.TransformerEncoderLayer (no "layers.N.")
  bool separate_qkv_ = false;  // loaded from self_attn.{q,k,v}_proj_weight: saved so
  std::vector<FeedForward> ffn_;     // the FFN sublayers
  std::shared_ptr<const void> packed_;  // fast-path layouts of the attention weights
  std::vector<AssumedSetting> assumed_;  // by load
  void prepare();
};

// Self-attention alone, as Encoder runs it (QKᵀ/√d_head, softmax, PV per head,
// the score matrix never stored): qkv [batch·seq, 3·d_model] holds the Q, K
// and V projections of each position, in that order; writes ctx
// [batch·seq, d_model] and lse [batch·seq, heads] (each query's log-sum-exp,
// what backward reads). Inference. For benchmarks: `ffn bench --encoder`
// times it beside the layer.
void self_attention_forward(const float* qkv, float* ctx, float* lse, int64_t d_model, int64_t heads, int64_t batch,
                            int64_t seq, bool causal, int threads, Isa isa);

}  // namespace ffn
