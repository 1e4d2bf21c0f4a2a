// The fast path (the default): a fused forward and a GEMM-based backward,
// both built on nn::gemm (src/backends/cpu/gemm.hpp) and its per-ISA block kernels.
//
// Forward: a block of kTokenBlock tokens goes through W1 in chunks of kChunk
// hidden units; bias, activation (and gate) and hidden dropout are applied to
// the chunk while it is in L1/L2, and the chunk goes straight through W2 into
// the block's output accumulator. b2, output dropout, residual and norm run on
// the finished rows. The [T, d_ff] hidden activation is never allocated
// (unless a ForwardCache asks for the pre-activations).
//
// d_ff is split into a fixed number of shards (DffShards::count, 4) whose W2
// partial sums are added over a fixed binary tree ((p₀ + p₁) + (p₂ + p₃)):
// a small batch can then use several threads, each streaming part of the
// weights, every token is still computed in one fixed order — outputs are
// bitwise identical for any thread count and batch composition — and ranks
// that each hold an aligned block of the shards (tensor parallelism) add
// their sums over the same tree and get the same bits as one process.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "ffn/types.hpp"
#include "core/buffer_pool.hpp"
#include "backends/context.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn {

// a[i] += b[i], i < n: the backward's sums of partials (shards, token
// slices) add with this one definition; the fused forward's shard sums use
// KernelConfig::sum_rows, the same operation on the ISA's vectors.
inline void add_rows(float* __restrict a, const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

// Weights re-laid-out once at load as B panels (see pack_panels).
struct PackedWeights {
  WeightDtype dtype = WeightDtype::fp32;
  // The fp32 panels come from the buffer pool: training packs the weights
  // again after every update, and fresh buffers cost their page faults.
  using Panels = std::vector<float, PoolAllocator<float>>;
  // forward, fp32
  Panels w1;  // B = W1ᵀ [d_model, d_ff]
  Panels wg;  // B = Wgᵀ [d_model, d_ff] (gated)
  Panels w2;  // B = W2ᵀ [d_ff, d_model]
  // forward, bf16 / fp16: the same panels with 16-bit elements
  AlignedVector<uint16_t> h1, hg, h2;
  // forward, int8: panels of k pairs and the per-output-channel scales
  AlignedVector<int8_t> q1, qg, q2;
  std::vector<float> s1, sg;
  std::vector<float> s2;  // [chunks, d_model]: one scale per output channel and hidden chunk
  // int8 with fp32 input channels (QuantizedWeights::fp32_inputs)
  std::vector<int64_t> x32;
  std::vector<float> w1_32, wg_32;  // [x32.size(), d_ff]
  // forward, int8 for u8 × s8 kernels (VNNI), packed on first use: quads of
  // k and the column sums (W1, Wg: over d_model; W2: per hidden chunk)
  struct S8Quads {
    AlignedVector<int8_t> q1, qg, q2;
    std::vector<int32_t> c1, cg, c2;
  };
  const S8Quads& quads() const;
  // backward, packed on first use
  struct Backward {
    Panels w2;  // B = W2 [d_model, d_ff]   (dH = dO · W2)
    Panels w1;  // B = W1 [d_ff, d_model]   (dIn = dZ1 · W1)
    Panels wg;  // B = Wg [d_ff, d_model]
  };
  const Backward& backward(const Config& cfg, const Weights& w) const;
  // the bf16 compute mode, packed on first use from the float weights
  // (pack_panels_bf16: bf16 pairs of k, k padded to bf16_kpad)
  struct Bf16Pairs {
    AlignedVector<uint16_t> w1, wg;  // B = W1ᵀ, Wgᵀ [d_model, d_ff]
    AlignedVector<uint16_t> w2;      // B = W2ᵀ [d_ff, d_model]
  };
  const Bf16Pairs& bf16_pairs(const Config& cfg, const Weights& w) const;

  // fp32 panels from w, or the low-precision panels from q when given.
  static std::shared_ptr<PackedWeights> make(const Config& cfg, const Weights& w, const QuantizedWeights* q = nullptr);

 private:
  mutable std::once_flag backward_once_, quads_once_, bf16_once_;
  mutable Backward backward_;
  mutable Bf16Pairs bf16_;
  mutable S8Quads quads_;
  int64_t d_model_ = 0, d_ff_ = 0;
  std::vector<int8_t> w1q_, wgq_, w2q_;  // int8: the PyTorch-layout values, for quads()
};

struct FusedSaved {
  float* z1 = nullptr;    // [n, d_ff]
  float* zg = nullptr;    // [n, d_ff]
  float* mean = nullptr;  // [n], pre only
  float* rstd = nullptr;  // [n]
  float* xhat = nullptr;  // [n, d_model]
};

// The forward in two stages with a seam between them (tensor parallelism,
// src/dist): the W1 → act → W2 products of the layer's shards of d_ff,
// summed over the shards' fixed tree (DffShards), then the tail (b2,
// output dropout, residual, norm) on the sum over every shard.
struct FusedSplit {
  DffShards shards;              // which shards of the global d_ff the weights are
  float* partial = nullptr;      // set: write the shards' sum [n, d_model] here and stop (y unused)
  const float* sum = nullptr;    // set: only the tail, y from this sum over every shard [n, d_model]
};

// y[n, d_model] from x[n, d_model] (valid tokens, contiguous); pos[i] is token
// i's global position (dropout key). saved may be null. Compute::bf16 (fp32,
// bf16 or fp16 weights) rounds the operands of both products to bf16.
void fused_forward(const Context& ctx, const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x,
                   int64_t n, const int64_t* pos, bool training, uint64_t seed, float* y, const FusedSaved* saved,
                   Compute compute = Compute::fp32, const FusedSplit& split = {});

// Gradients of the fast path (same contract as reference::backward, float
// accumulation): dx[n, d_model] and every gradient (overwritten). Weight
// gradients are sums over tokens in token order, whatever the thread count.
struct FusedGrads {
  float *w1 = nullptr, *b1 = nullptr, *wg = nullptr, *bg = nullptr;
  float *w2 = nullptr, *b2 = nullptr, *gamma = nullptr, *beta = nullptr;
};
// Backward's scratch comes from the process's buffer pool
// (core/buffer_pool.hpp); the bytes that pool keeps between calls, at most
// kBackwardScratchKeepBytes (its bound).
constexpr size_t kBackwardScratchKeepBytes = kBufferPoolKeepBytes;
size_t backward_scratch_bytes();

// token_slices: RunOptions::partition.token_slices (every weight gradient summed per
// slice and added over the slices' tree).
// In two stages as the forward (split): partial, stage 1: every gradient of
// the layer's shards (and b2's, and the post norm's γ, β), and the sum over
// its shards of dIn = dZ·W1 (+ dZg·Wg) written there [n, d_model] (dx
// unused; it must not overlap x or dy: dY is read as dO while it is written);
// sum, stage 2: dx (and the pre norm's γ, β) from dIn summed over every shard.
// The context's interrupt hook is asked between the stages and between
// pieces of the row blocks and of the weight gradients (the same bits).
void fused_backward(const Context& ctx, const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x,
                    int64_t n, const int64_t* pos, bool training, uint64_t seed, const FusedSaved& saved,
                    const float* dy, float* dx, const FusedGrads& g, const FusedSplit& split = {},
                    std::span<const int64_t> token_slices = {});

}  // namespace ffn::nn
