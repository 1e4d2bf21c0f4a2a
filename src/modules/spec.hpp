// A transformer stack as data (issue 46): one description from which the
// encoder (BERT, nn.TransformerEncoder, Marian's encoder), the seq2seq
// decoder (Marian's decoder) and the causal LM (LLaMA and the families after
// it) take their layers' settings through the same two functions,
// attention_config and ffn_config. An architecture is a function from its
// checkpoint's config to a StackSpec plus a name table
// (src/models/arch.hpp); the models are built from the spec, not from
// per-family code.
//
// Every field a family in the roadmap needs is here. What the blocks do not
// execute yet is refused by check_supported with the field's name, so a
// checkpoint that needs it is refused, never run without it. Run today:
// every norm kind, norm sites pre and post (and both: the causal LM's),
// heads/kv_heads/head_dim, Q|K|V and output biases, plain RoPE, causal and
// cross-attention, sliding windows, the attention and final soft-caps, the
// query scale (these three: the causal LM's), every FFN unit gated or not,
// the embedding scale, tied heads, an encoder's relative position bias
// (MPNet's: a table each forward call adds, EncoderRunOptions::position_bias,
// not a layer setting), and an encoder's rotary positions with a base per
// layer, local windows and a first layer without its attention norm
// (ModernBERT's: models::RotaryEncoder runs such a stack). Not yet: yarn
// rotary scaling, partial rotary positions, q/k norm outside a causal LM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ffn/feed_forward.hpp"
#include "ffn/types.hpp"
#include "modules/attention_block.hpp"

namespace ffn::nn {

// LayerNorm (γ, β), LayerNorm without β (OLMo), RMSNorm (γ), RMSNorm scaling
// by (1 + γ) (Gemma: the file stores γ − 1).
enum class NormKind { layernorm, layernorm_no_bias, rmsnorm, rmsnorm_one_plus };
// Where a sublayer's norm sits: post (Norm(x + f(x)), the 2017 paper, BERT,
// Marian), pre (x + f(Norm(x)), LLaMA) or both (x + Norm'(f(Norm(x))),
// Gemma 2's post-attention and post-FFN norms).
enum class NormSites { post, pre, pre_and_post };
struct NormSpec {
  NormKind kind = NormKind::layernorm;
  NormSites sites = NormSites::post;
  float eps = 1e-5f;
  // false: layer 0's attention reads its input without a norm (ModernBERT:
  // the embedding's norm comes just before it); pre-norm only.
  bool first_attention_norm = true;
};

// Rotary positions' frequency rule: none (θ^(−2i/d)), linear (positions / factor),
// llama3 (Llama 3.1's banded wavelengths), longrope (Phi-3's per-frequency factors), yarn.
enum class RopeScaling { none, linear, llama3, longrope, yarn };
struct RopeSpec {
  bool enabled = false;
  double theta = 10000.0;
  std::vector<double> layer_theta;  // per layer, where layers differ (empty: theta for all)
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_context = 0;
  // longrope (Phi-3 128k, Phi-3.5): frequency i is 1 / (factor_i · θ^(2i/dh)),
  // short_factors at positions below original_context, long_factors from it
  // on; cos and sin multiplied by attention_factor.
  std::vector<float> long_factors, short_factors;
  double attention_factor = 1.0;
  // A GGUF's rope_freqs (llama.cpp's form of Llama 3's rule): frequency i divided by freq_factors[i].
  std::vector<float> freq_factors;
  double fraction = 1.0;  // the rotated share of a head (partial rotary: Phi-2, NeoX)
  // Row order of a rotated head: false, its first and second halves rotate
  // together (transformers' rotate_half); true, adjacent pairs (GPT-J; a
  // GGUF's Q/K rows before the loader puts them back).
  bool adjacent_pairs = false;
};

struct AttentionSpec {
  int64_t heads = 1, kv_heads = 0, head_dim = 0;  // 0: heads; 0: d_model / heads
  bool qkv_bias = false;  // Q|K|V projections' bias (BERT, Marian, Qwen2)
  bool out_bias = false;  // W_O's bias
  bool qk_norm = false;   // per-head RMSNorm of Q and K before the rotation (Qwen3, Gemma 3)
  RopeSpec rope;
  bool causal = false;    // self-attention sees earlier positions only
  bool cross = false;     // a cross-attention sublayer over an encoder's output after it
  std::vector<int64_t> window;  // per layer: sliding window of keys (0: all); empty: none anywhere
  // per layer, non-causal: each query sees the keys within `local` positions
  // of its own (ModernBERT's local layers; 0: all); empty: none anywhere.
  std::vector<int64_t> local;
  float softcap = 0.0f;     // logits → c·tanh(logits / c) before the softmax (Gemma 2); 0: none
  float query_scale = 0.0f; // the logits' scale (Gemma 2: query_pre_attn_scalar^-½); 0: 1/√head_dim
  // A learned relative position bias added to the logits (MPNet, T5): buckets (0: none), max distance.
  int64_t relative_buckets = 0, relative_max_distance = 0;
};

// The FFN: f(x W1 + b1) W2 + b2, or gated, (f(x W_gate + b_g) ⊙ (x W_up + b_1)) W2 + b2.
struct FfnSpec {
  int64_t d_ff = 0;
  Activation unit = Activation::relu;  // f: relu, gelu, gelu_tanh or silu
  bool gated = false;                  // silu: SwiGLU; gelu: GEGLU; gelu_tanh: Gemma's GELU-tanh gating
  bool bias = true;
};

// Positions at the embedding: none, a learned table (BERT, XLM-R with an id
// offset), the sinusoidal table (the 2017 paper, Marian) or rotary (in the
// attention, RopeSpec).
enum class Positions { none, learned, sinusoidal, rotary };
struct EmbeddingSpec {
  int64_t vocab = 0;
  float scale = 1.0f;  // token embeddings multiplied by it (√d_model: Marian, Gemma)
  Positions positions = Positions::none;
  int64_t position_offset = 0;  // XLM-R/RoBERTa: positions start at padding_idx + 1
  int64_t max_positions = 0;
  int64_t token_types = 0;  // BERT's segment embeddings (0: none)
  bool norm = false;        // a norm after the embedding sum (BERT)
  bool tied_head = false;   // the output head is the token embedding
  float final_softcap = 0.0f;  // logits → c·tanh(logits / c) (Gemma 2); 0: none
};

enum class StackKind { encoder, seq2seq_decoder, causal_lm };

struct StackSpec {
  StackKind kind = StackKind::encoder;
  int64_t d_model = 0, layers = 0;
  NormSpec norm;
  bool final_norm = false;  // a norm after the last layer
  AttentionSpec attention;
  FfnSpec ffn;
  EmbeddingSpec embedding;
  float dropout = 0.0f;  // training only

  // Throws Error naming the field when a size or setting is out of range or
  // two settings contradict each other.
  void validate() const;
  // Throws Error naming the first field the blocks do not execute yet
  // ("sliding window", "attention logit soft-cap", ...), with `who` (the
  // checkpoint) first in the message.
  void check_supported(const std::string& who) const;
  int64_t head_dim() const { return attention.head_dim > 0 ? attention.head_dim : d_model / attention.heads; }
  int64_t kv_heads() const { return attention.kv_heads > 0 ? attention.kv_heads : attention.heads; }
};

std::string_view to_string(NormKind k);
std::string_view to_string(StackKind k);

// Layer l's attention sublayers (self and, with attention.cross, cross):
// their width, heads, norm and eps. The rotary table is the caller's
// (AttentionBlockConfig::rope), built from attention.rope for its capacity.
AttentionBlockConfig attention_config(const StackSpec& s, int64_t layer);
// The FFN sublayer's Config (its norm is the layer's second).
Config ffn_config(const StackSpec& s);
// The rotary frequencies f_i (head_dim / 2) of attention.rope, as
// transformers' rope_init functions form them in float32: the default
// 1/θ^(2i/d), then linear (f / factor) or llama3 (Llama 3.1's bands:
// wavelengths 2π/f above original_context / low_freq_factor divided by
// factor, below original_context / high_freq_factor kept, between them
// interpolated), then divided by freq_factors where given.
std::vector<float> rope_frequencies(const StackSpec& s);
// The rotary table of `positions` positions: rope_frequencies', or
// longrope's short and long frequencies by position, scaled.
RopeTable rope_table(const StackSpec& s, int64_t positions);

}  // namespace ffn::nn
