// The default forward path: token blocks go through W1 (bias and activation
// applied per chunk of d_ff), into a small per-thread hidden buffer, then
// through W2 into the block's output rows; bias, dropout, residual and norm
// run on the finished rows. The [T, d_ff] hidden activation is never
// allocated (unless a ForwardCache asks for the pre-activations).
//
// Portable C++ (the compiler vectorizes the inner loops); ISA-specific
// micro-kernels slot in under the same loops. Each token's result is computed
// in a fixed order that does not depend on the block it shares or on the
// thread count, so outputs are bitwise identical for any threads/batching.
#pragma once

#include <cstdint>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn::nn {

// Weights re-laid-out once at load for the fused loops.
struct PackedWeights {
  std::vector<float> w1t;  // [d_model, d_ff]  W1ᵀ
  std::vector<float> wgt;  // [d_model, d_ff]  Wgᵀ (gated)
  std::vector<float> w2t;  // [d_ff, d_model]  W2ᵀ
  static PackedWeights pack(const Config& cfg, const Weights& w);
};

struct FusedSaved {
  float* z1 = nullptr;    // [n, d_ff]
  float* zg = nullptr;    // [n, d_ff]
  float* mean = nullptr;  // [n], pre only
  float* rstd = nullptr;  // [n]
  float* xhat = nullptr;  // [n, d_model]
};

// y[n, d_model] from x[n, d_model] (valid tokens, contiguous); pos[i] is token
// i's global position (dropout key). saved may be null. isa: see isa.hpp.
void fused_forward(const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x, int64_t n,
                   const int64_t* pos, bool training, uint64_t seed, int threads, Isa isa, float* y,
                   const FusedSaved* saved);

// The per-ISA kernels (src/kernels/<isa>/f32_ffn_fused_<isa>.cpp).
#define FFN_DECLARE_FUSED_KERNEL(ns)                                                                         \
  namespace ns {                                                                                             \
  void fused_forward_kernel(const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x,   \
                            int64_t n, const int64_t* pos, bool training, uint64_t seed, int threads, float* y, \
                            const FusedSaved* saved);                                                        \
  }
FFN_DECLARE_FUSED_KERNEL(scalar)
FFN_DECLARE_FUSED_KERNEL(avx2)
#undef FFN_DECLARE_FUSED_KERNEL

}  // namespace ffn::nn
