// One multi-head attention sublayer with its residual and norm, as the
// encoder and decoder layers use it (PyTorch's _sa_block / _mha_block):
//
//   post-LN:  out = Norm(x + Drop(MHA(x, kv)))      pre-LN:  out = x + Drop(MHA(Norm(x), kv))
//
// where the keys and values come from
//   - the same rows (self-attention, optionally causal): Q|K|V = a W_inᵀ + b_in;
//   - a decoder's key/value cache: the new rows' K|V are written into the
//     cache and the queries attend to the cache (incremental decoding);
//   - the encoder's output, "memory" (cross-attention): Q = a W_qᵀ + b_q from
//     the rows, K|V = memory W_kvᵀ + b_kv, W_in = [W_q; W_k; W_v] as
//     nn.MultiheadAttention's in_proj_weight.
// The rows are the valid tokens, sequences by offsets (src/ops/attention.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "ffn/types.hpp"
#include "ops/attention.hpp"
#include "ops/linear.hpp"
#include "ops/rope.hpp"
#include "modules/kv_cache.hpp"

namespace ffn::nn {

struct AttentionBlockConfig {
  int64_t d = 0, heads = 1;
  NormPlacement norm = NormPlacement::post;
  NormType norm_type = NormType::layernorm;
  float eps = 1e-5f;
  float dropout = 0.0f;  // training: the probabilities and the output
  // Decoder-only LLMs (inference; self-attention and the cache kinds):
  // head_dim (0: d / heads; the attention's width is heads · head_dim, W_O
  // maps it back to d); grouped-query attention with kv_heads key/value
  // heads (0: heads), so Q|K|V is [heads·head_dim + 2·kv_heads·head_dim];
  // rotary positions on Q and K at KeysValues::positions (null: none).
  int64_t head_dim = 0, kv_heads = 0;
  const RopeTable* rope = nullptr;
  // Self-attention of an LLM's layer (inference; AttentionShape): a sliding
  // window of keys (0: none), a logit soft-cap (0: none), a query scale (0: 1/√head_dim).
  int64_t window = 0;
  float softcap = 0.0f, query_scale = 0.0f;
  // Non-causal self-attention's local window (inference; ModernBERT's local
  // layers): each query sees the keys within `local` positions of its own (0: all).
  int64_t local = 0;
  int64_t dh() const { return head_dim > 0 ? head_dim : d / heads; }
  int64_t qd() const { return heads * dh(); }
  int64_t kvd() const { return (kv_heads > 0 ? kv_heads : heads) * dh(); }
};

// A sublayer's parameters (views), nn.MultiheadAttention's and its norm's.
struct AttentionBlockWeights {
  const std::vector<float>& in_w;    // [3d, d]
  const std::vector<float>& in_b;    // [3d] or empty
  const std::vector<float>& out_w;   // [d, d]
  const std::vector<float>& out_b;   // [d] or empty
  const std::vector<float>& norm_w;  // [d]
  const std::vector<float>& norm_b;  // [d] or empty (RMSNorm)
  // Pre-LN inference only (Gemma 2): a second norm (γ, the block's norm type
  // and eps) on the attention's output before the residual sum:
  // out = x + PostNorm(MHA(Norm(x))). Null: none.
  const std::vector<float>* post_norm_w = nullptr;
  // Self-attention inference only (Qwen3): an RMSNorm (γ [head_dim], the
  // block's eps) of each head of Q and of K, before the rotation. Null: none.
  const std::vector<float>* q_norm_w = nullptr;
  const std::vector<float>* k_norm_w = nullptr;
};
struct AttentionBlockGrads {
  std::vector<float>& in_w;
  std::vector<float>& in_b;
  std::vector<float>& out_w;
  std::vector<float>& out_b;
  std::vector<float>& norm_w;
  std::vector<float>& norm_b;
};

// Packed panels of a sublayer's projections (fast path). Backward reads W_in
// and W_O as they are (the gemm packs them block by block).
// The block's projections (nn::Linear: the fp32 panels, and int8 weights set
// beside them for inference by Encoder::converted / Decoder::converted with
// attention_int8): self-attention's W_in (all 3d outputs), or
// cross-attention's W_q (d outputs) and W_k|W_v (2d); and W_O. The
// projections own copies of the biases; training's gradients use the
// weights themselves (AttentionBlockWeights).
struct PackedAttention {
  Linear in;      // self-attention
  Linear q, kv;   // cross-attention
  Linear out;
  static PackedAttention self(const AttentionBlockWeights& w, int64_t d);
  static PackedAttention cross(const AttentionBlockWeights& w, int64_t d);
};

struct AttentionSaved {
  std::vector<float> x;           // [n, d] the sublayer's input (save)
  std::vector<float> u;           // [n, d] pre: Norm(x), the attention's input
  std::vector<float> r;           // [n, d] post: x + Drop(MHA(x)), the norm's input (save)
  std::vector<float> mean, rstd;  // [n] the norm's statistics
  std::vector<float> qkv;         // [n, 3d] self-attention; [n, d] Q for cross-attention
  std::vector<float> kv;          // [m, 2d] cross-attention: K|V of the memory rows
  std::vector<float> ctx;         // [n, d]
  std::vector<float> lse;         // [n, heads]
  size_t bytes() const;
};

// Where the keys and values come from.
struct KeysValues {
  enum class Kind { self, cache, memory } kind = Kind::self;
  // cache: the paged cache (src/modules/kv_cache.hpp), layer `layer`:
  // query row i's K and V written at cache row write[i] before attending;
  // sequence b attends to its first kv_len[b] positions (its new rows
  // included, the last ones).
  KvCache* cache = nullptr;
  int64_t layer = 0;
  std::vector<int64_t> write;
  // With AttentionBlockConfig::rope: each query row's position.
  std::vector<int64_t> positions;
  // memory: the encoder output's valid rows [m, d] and its sequences'
  // offsets (B + 1), or K|V already projected ([m, 2d], e.g. at the start of
  // generation: then `memory` is not read).
  const float* memory = nullptr;
  const float* projected = nullptr;
  std::vector<int64_t> memory_off;
  int64_t memory_S = 0;  // padded memory length (the dropout index's stride)
  // memory: sequence b's key rows kv_base[b] .. + kv_len[b]; cache: kv_len only
  std::vector<int64_t> kv_base, kv_len;
};

struct BlockRun {
  bool training = false;
  bool causal = false;
  uint64_t seed = 0;  // this sublayer's
  const Context* ctx = nullptr;  // the call's execution context (kernels, threads, path); never null
  // Called with the projection's input (a, n rows) before the projection.
  std::function<void(const float*, int64_t)> observe;
  QActs* acts = nullptr;  // the projections' activation scratch for quantized blocks (null: their own)
  // Self-attention's relative position bias (inference; AttentionShape::rel_bias); null: none.
  const float* rel_bias = nullptr;
  int64_t rel_span = 0;
  bool bf16 = false;  // the projections in the bf16 compute mode (inference; Linear::Run::bf16)
};

// K|V = memory W_kvᵀ + b_kv, [m, 2d], for KeysValues::projected.
void project_memory(const AttentionBlockConfig& cfg, const AttentionBlockWeights& w, const PackedAttention& pk,
                    const float* memory, int64_t m, float* kv, const BlockRun& run);

// out [n, d] (may not alias x) from x [n, d]; off: the query sequences'
// offsets (B + 1), S the padded target length.
void attention_block_forward(const AttentionBlockConfig& cfg, const AttentionBlockWeights& w, const PackedAttention& pk,
                             const float* x, float* out, const std::vector<int64_t>& off, int64_t S,
                             const KeysValues& kv, AttentionSaved& s, bool save, const BlockRun& run);

// dx (overwritten) from dout through the sublayer, from what a saving
// forward kept; g receives the sublayer's gradients (overwritten). Memory
// keys: dmemory [m, d] gets the memory's gradient added.
void attention_block_backward(const AttentionBlockConfig& cfg, const AttentionBlockWeights& w,
                              const std::vector<int64_t>& off, int64_t S, const KeysValues& kv,
                              const AttentionSaved& s, const float* dout, float* dx, float* dmemory,
                              AttentionBlockGrads& g, const BlockRun& run);

}  // namespace ffn::nn
