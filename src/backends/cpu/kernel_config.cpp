// The per-ISA kernel table (see kernel_config.hpp) and CPU feature detection.
#include "backends/cpu/kernel_config.hpp"

#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backends/cpu/peak.hpp"

namespace ffn::nn {

namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// Linux hands out the AMX tile data state only on request, per process
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without it the first
// tile instruction faults. True when granted (or already held).
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
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
  f.amx = f.avx512 && f.avx512_vnni && f.avx512_bf16 && os_tile && ((d7 >> 24) & 1u) && ((d7 >> 22) & 1u) &&
          ((d7 >> 25) & 1u) && request_amx_permission();
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

namespace {

const KernelConfig kScalar{
    Isa::scalar,
    {&scalar::gemm_block, &scalar::gemm_block, &scalar::gemm_block, {48, 256, 512}},
    1, 16,
    &scalar::int8_kernels, "int32 multiply-add (portable)",
    &scalar::activate,
    96,
    &scalar::fma_loop, "portable multiply-add",
    nullptr,
    &scalar::bf16_kernels, nullptr, "",
    &scalar::exp_rows, &scalar::softmax_step, &scalar::sum_rows,
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
    &scalar::bf16_kernels, nullptr, "",
    &avx2::exp_rows, &avx2::softmax_step, &avx2::sum_rows,
};

// 12×32 tiles of zmm (24 accumulators), k 256 (a pair of panels is 32 KiB,
// L1), 512 columns; 144 rows per block and per fused-forward token block, so
// each weight panel pair fetched from L3 serves 12 row tiles (measured on the
// Zen 5, 2 threads, T = 4096, alternating: 96 rows 399, 144 rows 405, 192
// rows 380 GFLOP/s; see bench/results/2026-11-23-avx512.md).
KernelConfig make_avx512() {
  // int8 on vpdpbusd where the CPU has AVX512_VNNI, else on AVX2's vpmaddwd;
  // bf16 compute on vdpbf16ps where it has AVX512_BF16, else portable.
  const bool vnni = cpu_features().avx512_vnni, bf16 = cpu_features().avx512_bf16;
  return KernelConfig{
    Isa::avx512,
    {&avx512::gemm_block, &avx512::gemm_block, &avx512::gemm_block, {144, 256, 512}},
    12, 32,
    vnni ? &avx512::int8_kernels_vnni : &avx2::int8_kernels, vnni ? "AVX-512 vpdpbusd zmm" : "AVX2 vpmaddwd ymm",
    &avx512::activate,
    144,
    &avx512::fma_loop, "AVX-512 vfmadd231ps zmm",
    vnni ? &avx512::dpbusd_loop : &avx2::madd_loop,
    bf16 ? &avx512::bf16_kernels : &scalar::bf16_kernels,
    bf16 ? &avx512::dpbf16_loop : nullptr, bf16 ? "AVX-512 vdpbf16ps zmm" : "",
    &avx512::exp_rows, &avx512::softmax_step, &avx512::sum_rows,
  };
}

// AVX-512 (fp32 products, quantizers, epilogues) with the bf16 and u8 × s8
// products on AMX tiles; only where cpu_features().amx (which implies
// AVX512_VNNI and AVX512_BF16).
KernelConfig make_amx() {
  static const Int8Kernels int8 = [] {
    Int8Kernels k = avx512::int8_kernels_vnni;
    k.igemm_u8 = &amx::igemm_u8;
    return k;
  }();
  KernelConfig k = make_avx512();
  k.isa = Isa::amx;
  k.int8 = &int8;
  k.int8_instr = "AMX tdpbusd";
  k.int8_peak = &amx::tdpbusd_loop;
  k.bf16 = &amx::bf16_kernels;
  k.bf16_peak = &amx::tdpbf16_loop;
  k.bf16_peak_instr = "AMX tdpbf16ps";
  return k;
}

}  // namespace


const KernelConfig& kernel_config(Isa resolved) {
  switch (resolved) {
    case Isa::amx: {
      static const KernelConfig amx = make_amx();
      return amx;
    }
    case Isa::avx512: {
      static const KernelConfig avx512 = make_avx512();
      return avx512;
    }
    case Isa::avx2: return kAvx2;
    default: return kScalar;
  }
}

}  // namespace ffn::nn

namespace ffn {

KernelInfo kernel_info(Isa isa) {
  const nn::KernelConfig& k = nn::kernel_config(isa);
  return KernelInfo{k.mr, k.nr, k.int8_instr, k.bf16 ? k.bf16->instr : ""};
}

}  // namespace ffn
