// The fast multi-head self-attention core: for each sequence and head, tiles
// of queries against tiles of keys with an online softmax (a running maximum
// and sum per query, FlashAttention's forward), so the [heads, S, S] score
// matrix is never stored: memory beyond the [n, 3d] projections grows
// linearly in S. The products run on the ISA's fp32 block kernels
// (KernelConfig::f32), the exponentials on its exp_rows.
//
// Same contract as the reference (src/reference/attention_reference.hpp):
// rows are the valid tokens, sequence b is rows [off[b], off[b+1]), qkv is
// [n, 3d], ctx is [n, d], the dropout rule and its index are the same.
// Forward also writes lse[n, heads] = max + log Σ e^(s − max) per query and
// head, from which backward recomputes each probability tile.
//
// Work is split over (sequence, head, query tile) units in forward and
// (sequence, head) units in backward, each done by one thread in a fixed
// order: results are bitwise the same for any thread count, and in
// inference a sequence's results do not depend on the other sequences of the
// batch. (In training the dropout masks are keyed by the valid-row index,
// which counts the rows of the sequences before it.)
#pragma once

#include <cstdint>

#include "backends/context.hpp"
#include "ffn/types.hpp"
#include "core/attention_shape.hpp"

namespace ffn::nn {

using ffn::AttentionGrad;
using ffn::AttentionInput;
using ffn::AttentionShape;

// Q, K and V where AttentionInput says (cross-attention, a key/value cache);
// out [n, d] is the context vectors.
void attention_forward(const Context& ctx, const AttentionShape& a, const AttentionInput<float>& in, float* out,
                       float* lse);
inline void attention_forward(const Context& ctx, const AttentionShape& a, const float* qkv, float* out, float* lse) {
  attention_forward(ctx, a, AttentionInput<float>::packed(qkv, a.d), out, lse);
}

// The gradients of Q, K and V (overwritten at the rows the sequences use)
// from dout [n, d] and forward's out and lse.
void attention_backward(const Context& ctx, const AttentionShape& a, const AttentionInput<float>& in, const float* out,
                        const float* lse, const float* dout, const AttentionGrad<float>& g);
// dqkv [n, 3d] (overwritten).
inline void attention_backward(const Context& ctx, const AttentionShape& a, const float* qkv, const float* out,
                               const float* lse, const float* dout, float* dqkv) {
  attention_backward(ctx, a, AttentionInput<float>::packed(qkv, a.d), out, lse, dout,
                     AttentionGrad<float>::packed(dqkv, a.d));
}

}  // namespace ffn::nn
