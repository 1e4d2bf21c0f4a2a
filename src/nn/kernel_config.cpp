// The per-ISA kernel table (see kernel_config.hpp) and CPU feature detection.
#include "nn/kernel_config.hpp"

#include <cpuid.h>

#include "nn/peak.hpp"

namespace ffn::nn {

namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1u, fma = (c >> 12) & 1u, f16c = (c >> 29) & 1u;
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;             // SSE + AVX state
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_tile = (xcr0 & 0x60000) == 0x60000;     // XTILECFG, XTILEDATA
  unsigned b7 = 0, c7 = 0, d7 = 0, a7 = 0;
  __cpuid_count(7, 0, a7, b7, c7, d7);
  unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  if (a7 >= 1) __cpuid_count(7, 1, a71, b71, c71, d71);
  const bool avx2 = (b7 >> 5) & 1u;
  const bool avx512f = (b7 >> 16) & 1u, avx512dq = (b7 >> 17) & 1u, avx512bw = (b7 >> 30) & 1u,
             avx512vl = (b7 >> 31) & 1u;
  f.avx2 = os_ymm && avx2;
  f.fma = os_ymm && fma;
  f.f16c = os_ymm && f16c;
  f.avx512 = os_zmm && avx512f && avx512dq && avx512bw && avx512vl && f.avx2 && f.fma && f.f16c;
  f.avx512_vnni = f.avx512 && ((c7 >> 11) & 1u);
  f.avx512_bf16 = f.avx512 && ((a71 >> 5) & 1u);
  f.avx_vnni = f.avx2 && ((a71 >> 4) & 1u);
  f.amx = f.avx512 && os_tile && ((d7 >> 24) & 1u) && ((d7 >> 22) & 1u) && ((d7 >> 25) & 1u);
  return f;
}

const KernelConfig kScalar{
    Isa::scalar,
    {&scalar::gemm_block, &scalar::gemm_block, &scalar::gemm_block, {48, 256, 512}},
    1, 16,
    &scalar::int8_kernels, "int32 multiply-add (portable)",
    &scalar::activate,
    96,
    &scalar::fma_loop, "portable multiply-add",
    nullptr,
};

// 6×16 tiles of ymm (12 accumulators): rows per block 48 (A block 48 KiB in
// L2), k 256 (a 16-column B panel is 16 KiB, L1), 512 columns (512 KiB of B, L2).
const KernelConfig kAvx2{
    Isa::avx2,
    {&avx2::gemm_block, &avx2::gemm_block, &avx2::gemm_block, {48, 256, 512}},
    6, 16,
    &avx2::int8_kernels, "AVX2 vpmaddwd ymm",
    &avx2::activate,
    96,
    &avx2::fma_loop, "AVX2 vfmadd231ps ymm",
    &avx2::madd_loop,
};

// 12×32 tiles of zmm (24 accumulators), k 256 (a pair of panels is 32 KiB,
// L1), 512 columns; 144 rows per block and per fused-forward token block, so
// each weight panel pair fetched from L3 serves 12 row tiles (measured on the
// Zen 5, 2 threads, T = 4096, alternating: 96 rows 399, 144 rows 405, 192
// rows 380 GFLOP/s; see bench/results/2026-11-23-avx512.md).
KernelConfig make_avx512() {
  // int8 on vpdpbusd where the CPU has AVX512_VNNI, else on AVX2's vpmaddwd.
  const bool vnni = detect().avx512_vnni;
  return KernelConfig{
    Isa::avx512,
    {&avx512::gemm_block, &avx512::gemm_block, &avx512::gemm_block, {144, 256, 512}},
    12, 32,
    vnni ? &avx512::int8_kernels_vnni : &avx2::int8_kernels, vnni ? "AVX-512 vpdpbusd zmm" : "AVX2 vpmaddwd ymm",
    &avx512::activate,
    144,
    &avx512::fma_loop, "AVX-512 vfmadd231ps zmm",
    vnni ? &avx512::dpbusd_loop : &avx2::madd_loop,
  };
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const KernelConfig& kernel_config(Isa resolved) {
  switch (resolved) {
    case Isa::avx512: {
      static const KernelConfig avx512 = make_avx512();
      return avx512;
    }
    case Isa::avx2: return kAvx2;
    default: return kScalar;
  }
}

}  // namespace ffn::nn
