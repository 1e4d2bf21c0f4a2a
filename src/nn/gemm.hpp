// The one matrix product every fast path is built from:
//
//   C[m, n] = (accumulate ? C : 0) + A[m, k] · B[k, n]
//
//   A(i, p) = a[i·rsa + p·csa]                 (row- or column-major, any strides)
//   B(p, j) = b[(j / 16)·psb + p·ldb + j % 16]  (16-column panels; packed weights
//                                               use ldb = 16, psb = K·16; a plain
//                                               row-major matrix uses ldb = N, psb = 16)
//   C(i, j) = c[i·ldc + j]
//
// Each C element is one chain of multiply-adds over p = 0, 1, …, k−1 in that
// order, whatever the tile shape, the blocking or the thread count; so a row's
// result does not depend on which other rows share the call, and blocking
// over k (storing and reloading the float partial sums) changes no bit.
//
// Per-ISA block kernels: src/kernels/<isa>/f32_gemm_<isa>.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn::nn {

constexpr int64_t kPanel = 16;  // columns per B panel

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t rsa = 0, csa = 1;
  const float* b = nullptr;
  int64_t ldb = kPanel, psb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
};

// One cache block (any m, n, k ≥ 1), single-threaded.
using GemmBlockFn = void (*)(const GemmArgs&);
namespace scalar { void gemm_block(const GemmArgs& g); }
namespace avx2 { void gemm_block(const GemmArgs& g); }

GemmBlockFn gemm_kernel(Isa resolved);

// The whole product, blocked for the caches and split over `threads` (by rows
// or by column panels; each C element is computed by one thread).
void gemm(GemmBlockFn kernel, const GemmArgs& g, int threads);

// B packed as panels: out[(j/16)·K·16 + p·16 + j%16] = B(p, j), zero-padded
// to a whole panel. B(p, j) = src[j·K + p] when n_major, else src[p·N + j].
std::vector<float> pack_panels(const float* src, int64_t K, int64_t N, bool n_major);

inline int64_t panels(int64_t n) { return (n + kPanel - 1) / kPanel; }

}  // namespace ffn::nn
