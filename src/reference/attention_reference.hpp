// The reference multi-head self-attention core: plain loops, the whole score
// row of one query materialized, every dot product and sum in double. It is
// the oracle the tiled fast path (src/ops/attention.cpp) is tested against
// and, in double, the function the finite-difference checks differentiate.
//
// Rows are the valid tokens only, contiguous: sequence b is rows
// [off[b], off[b+1]); a query attends to the keys of its own sequence (the
// key padding mask), and with `causal` only to keys at or before it.
//   qkv  [n, 3d]  the projected Q | K | V; head h uses columns h·dh..(h+1)·dh
//                 of each third (dh = d / heads), as nn.MultiheadAttention
//   ctx  [n, d]   softmax(Q Kᵀ / √dh) V per head, heads concatenated
// Dropout on the attention probabilities (training): the probability of
// query row i (of all n), head h, key j (position in its sequence) is kept
// with factor 1/(1-p) unless Philox's bits for index (i·heads + h)·S + j
// under Stream::attention are below p·2³², S the padded sequence length.
#pragma once

#include <cstdint>
#include <vector>

namespace ffn::reference {

struct AttentionShape {
  int64_t d = 0, heads = 1;
  int64_t S = 0;                 // padded sequence length (the dropout index's stride)
  std::vector<int64_t> off;      // B + 1 row offsets
  bool causal = false;
  float dropout = 0.0f;          // p, used only when training
  bool training = false;
  uint64_t seed = 0;
  int64_t rows() const { return off.empty() ? 0 : off.back(); }
};

// lse [n, heads] (optional): max + log Σ e^(s − max) of each query's scaled
// scores, what the fast backward reads.
template <typename T>
void attention_forward(const AttentionShape& a, const T* qkv, T* ctx, float* lse = nullptr);

// dqkv [n, 3d] (overwritten) from dctx [n, d].
template <typename T>
void attention_backward(const AttentionShape& a, const T* qkv, const T* dctx, T* dqkv);

}  // namespace ffn::reference
