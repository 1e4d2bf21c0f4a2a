// The reference multi-head self-attention core: plain loops, the whole score
// row of one query materialized, every dot product and sum in double. It is
// the oracle the tiled fast path (src/ops/attention.cpp) is tested against
// and, in double, the function the finite-difference checks differentiate.
//
// Rows are the valid tokens only, contiguous: sequence b's queries are rows
// [off[b], off[b+1]); a query attends to the keys of its own sequence (the
// key padding mask), and with `causal` only to keys at or before it.
//   qkv  [n, 3d]  the projected Q | K | V; head h uses columns h·dh..(h+1)·dh
//                 of each third (dh = d / heads), as nn.MultiheadAttention
//   ctx  [n, d]   softmax(Q Kᵀ / √dh) V per head, heads concatenated
// Cross-attention and a decoder's key/value cache (AttentionInput): Q, K and
// V from separate arrays, sequence b's keys and values rows
// [kv_base[b], kv_base[b] + kv_len[b]) of K and V. With `causal` the queries
// are the last q_len positions of the kv_len (kv_len ≥ q_len): query s sees
// keys 0 .. kv_len − q_len + s, so a step that appends one position to a
// cache computes what the whole prefix would.
// Dropout on the attention probabilities (training): the probability of
// query row i (of all n), head h, key j (position in its sequence) is kept
// with factor 1/(1-p) unless Philox's bits for index (i·heads + h)·S + j
// under Stream::attention are below p·2³², S the padded sequence length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/attention_shape.hpp"

namespace ffn::reference {

// The problem's shape, where Q, K and V are and the shape check: the fast
// op's too (src/core/attention_shape.hpp).
using ffn::AttentionGrad;
using ffn::AttentionInput;
using ffn::AttentionShape;
using ffn::check_attention_shape;

// lse [n, heads] (optional): max + log Σ e^(s − max) of each query's scaled
// scores, what the fast backward reads.
template <typename T>
void attention_forward(const AttentionShape& a, const AttentionInput<T>& in, T* ctx, float* lse = nullptr);
template <typename T>
void attention_forward(const AttentionShape& a, const T* qkv, T* ctx, float* lse = nullptr) {
  attention_forward(a, AttentionInput<T>::packed(qkv, a.d), ctx, lse);
}

// The gradients of Q, K and V from dctx [n, d].
template <typename T>
void attention_backward(const AttentionShape& a, const AttentionInput<T>& in, const T* dctx, const AttentionGrad<T>& g);
// dqkv [n, 3d] (overwritten).
template <typename T>
void attention_backward(const AttentionShape& a, const T* qkv, const T* dctx, T* dqkv) {
  attention_backward(a, AttentionInput<T>::packed(qkv, a.d), dctx, AttentionGrad<T>::packed(dqkv, a.d));
}

}  // namespace ffn::reference
