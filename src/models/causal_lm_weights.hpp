// What a causal LM holds (src/models/causal_lm.cpp runs it,
// src/models/causal_lm_load.cpp fills it).
#pragma once

#include <vector>

#include "ffn/causal_lm.hpp"
#include "modules/attention_block.hpp"
#include "modules/ffn_sublayer.hpp"
#include "modules/spec.hpp"
#include "ops/linear.hpp"

namespace ffn {

// Every product is an nn::Linear: the file's quantized blocks (native
// compute, a native type of src/core/quant_types.hpp) or float32 panels.
struct CausalLM::Weights {
  struct Layer {
    std::vector<float> attn_norm;   // [d]
    std::vector<float> attn_post_norm;  // [d] or empty: the norm after the attention (Gemma 2)
    std::vector<float> q_norm, k_norm;  // [head_dim] or empty: per-head norms of Q and K (Qwen3)
    nn::PackedAttention attn;       // in: [qd + 2 kvd, d], W_Q, W_K, W_V stacked; out: W_O [d, qd]
    std::vector<nn::FfnSublayer> ffn;  // one: pre-norm RMSNorm SwiGLU, fused (fp32 compute) or on quantized products
  };
  nn::Linear embed;                 // [vocab, d] in the file's type (rows looked up), or empty: the head's rows (tied)
  std::vector<float> norm;          // [d]
  nn::Linear head;                  // [vocab, d]
  std::vector<Layer> layers;
  nn::StackSpec spec;               // the stack the architecture's config reader described
};

}  // namespace ffn
