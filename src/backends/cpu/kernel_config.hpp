// One kernel configuration per ISA, filled once (XNNPACK's gemm configs):
// which micro-kernels a fast path calls, the tile each computes, the cache
// blocking around it, the fused forward's token block, and the loops that
// measure the ISA's peak. Operators only ever call through a KernelConfig;
// adding an ISA means one kernel folder (src/backends/cpu/kernels/<isa>/) and one entry in
// src/backends/cpu/kernel_config.cpp.
#pragma once

#include "backends/cpu/qgemm.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include "ffn/types.hpp"
#include "backends/cpu/activation.hpp"
#include "backends/cpu/gemm.hpp"

namespace ffn::nn {

// What the CPU and the OS offer (CPUID, and XCR0 for the register state the
// OS saves: ymm for AVX/AVX2, opmask + zmm for AVX-512, tiles for AMX).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;             // with OS ymm state
  bool avx512 = false;                                      // F + BW + VL + DQ, with OS zmm state
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  bool amx = false;  // AMX-TILE + BF16 + INT8, with OS tile state and Linux's permission for it
};
const CpuFeatures& cpu_features();

// The activation epilogue (src/backends/cpu/activation_simd.hpp) per ISA: z[j] = act(z[j] + bz[j]),
// or act(g[j] + bg[j])·(z[j] + bz[j]) when g is given; null biases add nothing.
using ActivateFn = void (*)(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg);
namespace scalar { void activate(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg); }
namespace avx2 { void activate(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg); }
namespace avx512 { void activate(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg); }
// out = (a + b) + c, or a + b without c (simd::sum_rows).
using SumRowsFn = void (*)(float* out, const float* a, const float* b, const float* c, int64_t n);
namespace scalar { void sum_rows(float* out, const float* a, const float* b, const float* c, int64_t n); }
namespace avx2 { void sum_rows(float* out, const float* a, const float* b, const float* c, int64_t n); }
namespace avx512 { void sum_rows(float* out, const float* a, const float* b, const float* c, int64_t n); }
// Attention's softmax rows (simd::exp_rows): p[j] = e^(s[j]·scale − shift), returns Σ p.
using ExpRowsFn = float (*)(const float* s, int64_t n, float scale, float shift, float* p);
namespace scalar { float exp_rows(const float* s, int64_t n, float scale, float shift, float* p); }
namespace avx2 { float exp_rows(const float* s, int64_t n, float scale, float shift, float* p); }
namespace avx512 { float exp_rows(const float* s, int64_t n, float scale, float shift, float* p); }
// The online softmax's step over a tile of one query's scores (simd::softmax_step).
using SoftmaxStepFn = float (*)(float* s, int64_t n, float scale, float* m, float* l);
namespace scalar { float softmax_step(float* s, int64_t n, float scale, float* m, float* l); }
namespace avx2 { float softmax_step(float* s, int64_t n, float scale, float* m, float* l); }
namespace avx512 { float softmax_step(float* s, int64_t n, float scale, float* m, float* l); }

// A kernel set's block-quantized products: one kernel per quant type it has
// (src/core/quant_types.hpp), as ggml's type_traits_cpu.
struct QKernel {
  GgmlType type;
  QGemmFn gemm;
};

// Returns the operations done (2 per multiply-add).
using PeakLoop = double (*)(int64_t iters, float seed);

struct KernelConfig {
  Isa isa;
  F32Gemm f32;            // fp32 arithmetic: fp32, bf16- or fp16-stored B
  int mr, nr;             // the f32 kernel's bulk tile (rows × columns)
  const Int8Kernels* int8;
  const char* int8_instr; // the int8 product's instruction, for reports
  ActivateFn activate;    // pre-activations (+ biases) → activations, vectorized
  int64_t token_block;    // fused forward: tokens per block (a multiple of mr)
  PeakLoop fma_peak;      // the fp32 FMA loop of this ISA
  const char* fma_instr;
  PeakLoop int8_peak;     // the int8 product's instruction mix (null: none)
  const Bf16Kernels* bf16;  // the bf16 compute mode's product
  PeakLoop bf16_peak;     // its instruction (null: none)
  const char* bf16_peak_instr;
  ExpRowsFn exp_rows;     // attention's softmax exponentials
  SoftmaxStepFn softmax_step;
  SumRowsFn sum_rows;     // the fused forward's sums of shard partials
  std::span<const QKernel> qgemm;  // block-quantized weights × 16-bit activations, per type
  const char* qgemm_instr;
  QActsFn qacts;          // its activation quantization
};

// The configuration of a resolved ISA (never Isa::automatic).
const KernelConfig& kernel_config(Isa resolved);

// The product of kc for quant type t: its own kernel, else the scalar set's
// (the same bits, by the rule), else null (no kernel anywhere).
QGemmFn qgemm_kernel(const KernelConfig& kc, GgmlType t);

// The kernel sets a test runs op by op (tests/backends/test_backend_ops.cpp):
// every built-in set this CPU supports, worst first, then the registered ones.
std::vector<const KernelConfig*> kernel_sets();
// Adds a kernel set (a test's, an experiment's); kc must outlive the process's use of it.
void register_kernel_set(const KernelConfig* kc);

}  // namespace ffn::nn
