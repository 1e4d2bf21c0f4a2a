// An attention problem's shape (sequences, keys and values, paged keys,
// grouped-query heads, the inference settings and training's dropout),
// where Q, K and V are, and the one check of it, below both the reference
// attention (src/reference/attention_reference.hpp, which documents the
// rows and their layout) and the fast op (src/ops/attention.hpp): the fast
// op checks its shape here, not through its oracle.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ffn {

struct AttentionShape {
  int64_t d = 0, heads = 1;
  int64_t S = 0;                 // padded sequence length (the dropout index's stride)
  std::vector<int64_t> off;      // B + 1 row offsets
  // Keys and values of sequence b (AttentionInput); empty: the query rows
  // themselves (self-attention over off).
  std::vector<int64_t> kv_base, kv_len;
  // Paged keys and values (a KV cache; inference only): key j of sequence b
  // at row kv_pages[b][j / kv_page] · kv_page + j % kv_page of K and V
  // instead of keys_base(b) + j (kv_base unused). The fast path needs a key
  // tile in one page: kv_page a multiple of its 256-key tile, or sequences
  // of one page (a multiple of 16). A view: the caller keeps it.
  const std::vector<std::vector<int64_t>>* kv_pages = nullptr;
  int64_t kv_page = 0;
  bool causal = false;
  // Grouped-query attention (inference): K and V hold kv_heads heads, query
  // head h reading kv head h / (heads / kv_heads); 0 means heads.
  int64_t kv_heads = 0;
  // Inference settings of today's LLMs (refused in training):
  //   window: a causal query sees its last `window` keys only, itself
  //     included (Mistral, Gemma 2's sliding layers); 0: all it may see;
  //   softcap: each scaled score s becomes c·tanh(s / c) before the softmax (Gemma 2); 0: none;
  //   scale: the scores' scale; 0: 1/√head_dim.
  int64_t window = 0;
  float softcap = 0.0f, scale = 0.0f;
  // A local window of non-causal attention (inference; ModernBERT's local
  // layers): the query at key position p (= keys_len − q_len + s) sees keys
  // p − local .. p + local only; 0: all keys.
  int64_t local = 0;
  // A relative position bias (inference; MPNet's, T5's): key j of query s
  // (at key position p = keys_len − q_len + s) in head h gets
  //   rel_bias[h · (2·rel_span − 1) + (rel_span − 1) + (j − p)]
  // added to its scaled score (before a soft-cap). Every sequence's keys must
  // fit in rel_span. Null: none.
  const float* rel_bias = nullptr;
  int64_t rel_span = 0;
  float relative_bias(int64_t h, int64_t p, int64_t j) const {
    return rel_bias[h * (2 * rel_span - 1) + (rel_span - 1) + (j - p)];
  }
  float dropout = 0.0f;          // p, used only when training
  bool training = false;
  uint64_t seed = 0;
  int64_t rows() const { return off.empty() ? 0 : off.back(); }
  int64_t q_len(size_t b) const { return off[b + 1] - off[b]; }
  int64_t keys_base(size_t b) const { return kv_base.empty() ? off[b] : kv_base[b]; }
  // The row of K and V holding key j of sequence b.
  int64_t key_row(size_t b, int64_t j) const {
    return kv_pages ? (*kv_pages)[b][size_t(j / kv_page)] * kv_page + j % kv_page : keys_base(b) + j;
  }
  int64_t keys_len(size_t b) const { return kv_len.empty() ? q_len(b) : kv_len[b]; }
  // The column of K and V where query head h's key/value head starts.
  int64_t kv_column(int64_t h) const {
    const int64_t dh = d / heads;
    return (kv_heads > 0 ? h / (heads / kv_heads) : h) * dh;
  }
  // Keys query s of sequence b sees: keys first_visible .. visible - 1.
  int64_t visible(size_t b, int64_t s) const {
    const int64_t kl = keys_len(b), p = kl - q_len(b) + s;
    return causal ? std::min(kl, p + 1) : local > 0 ? std::min(kl, p + local + 1) : kl;
  }
  int64_t first_visible(size_t b, int64_t s) const {
    if (window > 0) return std::max<int64_t>(0, visible(b, s) - window);
    return local > 0 ? std::max<int64_t>(0, keys_len(b) - q_len(b) + s - local) : 0;
  }
  bool windowed() const { return window > 0 || local > 0; }
};

// Where Q, K and V are: row i's query at q + i·ldq, key row r at k + r·ldkv,
// value row r at v + r·ldkv (head h at column h·dh of each).
template <typename T>
struct AttentionInput {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t ldq = 0, ldkv = 0;
  static AttentionInput packed(const T* qkv, int64_t d) { return {qkv, qkv + d, qkv + 2 * d, 3 * d, 3 * d}; }
};
// Where their gradients go (overwritten at the rows the sequences use).
template <typename T>
struct AttentionGrad {
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;
  int64_t ldq = 0, ldkv = 0;
  static AttentionGrad packed(T* dqkv, int64_t d) { return {dqkv, dqkv + d, dqkv + 2 * d, 3 * d, 3 * d}; }
};

// Throws Error unless the kv lists have one entry per sequence, kv_heads
// divides heads (and is only set with training off), and, with
// causal, every sequence has at least as many keys as queries; and unless
// every sequence with queries has keys.
void check_attention_shape(const AttentionShape& a);

}  // namespace ffn
