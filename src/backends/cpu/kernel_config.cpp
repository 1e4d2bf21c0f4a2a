// The ISA registry: CPU feature detection, the per-ISA kernel table (see
// kernel_config.hpp), and which ISAs exist, are supported and are best.
#include "backends/cpu/kernel_config.hpp"

#include <array>

#include <mutex>

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

// ---- the kernel table: one entry per ISA, fields named where they are set ----

// The block-quantized products: a row per quant type, a column per kernel
// set (ggml's type_traits_cpu); a type without a row runs on no set, and a
// kernel set without a column falls back to the scalar set's (qgemm_kernel).
// A new native type adds its row here (CONTRIBUTING.md, "Add a quant type").
struct QTypeKernels {
  GgmlType type;
  QGemmFn scalar, avx2, avx512_vnni, amx;
};
constexpr QTypeKernels kQGemm[] = {
    {GgmlType::q4_0, &scalar::qgemm<GgmlType::q4_0>, &avx2::qgemm<GgmlType::q4_0>,
     &avx512::qgemm_vnni<GgmlType::q4_0>, &amx::qgemm<GgmlType::q4_0>},
    {GgmlType::q4_1, &scalar::qgemm<GgmlType::q4_1>, &avx2::qgemm<GgmlType::q4_1>,
     &avx512::qgemm_vnni<GgmlType::q4_1>, &amx::qgemm<GgmlType::q4_1>},
    {GgmlType::q8_0, &scalar::qgemm<GgmlType::q8_0>, &avx2::qgemm<GgmlType::q8_0>,
     &avx512::qgemm_vnni<GgmlType::q8_0>, &amx::qgemm<GgmlType::q8_0>},
    // Q5_0, Q5_1 and the K-quants on AMX: AVX-512 VNNI's kernels (no tile kernels yet).
    {GgmlType::q5_0, &scalar::qgemm<GgmlType::q5_0>, &avx2::qgemm<GgmlType::q5_0>,
     &avx512::qgemm_vnni<GgmlType::q5_0>, &avx512::qgemm_vnni<GgmlType::q5_0>},
    {GgmlType::q5_1, &scalar::qgemm<GgmlType::q5_1>, &avx2::qgemm<GgmlType::q5_1>,
     &avx512::qgemm_vnni<GgmlType::q5_1>, &avx512::qgemm_vnni<GgmlType::q5_1>},
    {GgmlType::q4_k, &scalar::qgemm<GgmlType::q4_k>, &avx2::qgemm<GgmlType::q4_k>,
     &avx512::qgemm_vnni<GgmlType::q4_k>, &avx512::qgemm_vnni<GgmlType::q4_k>},
    {GgmlType::q5_k, &scalar::qgemm<GgmlType::q5_k>, &avx2::qgemm<GgmlType::q5_k>,
     &avx512::qgemm_vnni<GgmlType::q5_k>, &avx512::qgemm_vnni<GgmlType::q5_k>},
    {GgmlType::q6_k, &scalar::qgemm<GgmlType::q6_k>, &avx2::qgemm<GgmlType::q6_k>,
     &avx512::qgemm_vnni<GgmlType::q6_k>, &avx512::qgemm_vnni<GgmlType::q6_k>},
};
// One kernel set's column, as the (type, kernel) list KernelConfig::qgemm holds.
template <QGemmFn QTypeKernels::*column>
constexpr std::array<QKernel, std::size(kQGemm)> qgemm_column() {
  std::array<QKernel, std::size(kQGemm)> c{};
  for (size_t i = 0; i < std::size(kQGemm); ++i) c[i] = {kQGemm[i].type, kQGemm[i].*column};
  return c;
}
constexpr auto kScalarQ = qgemm_column<&QTypeKernels::scalar>();
constexpr auto kAvx2Q = qgemm_column<&QTypeKernels::avx2>();
constexpr auto kVnniQ = qgemm_column<&QTypeKernels::avx512_vnni>();
constexpr auto kAmxQ = qgemm_column<&QTypeKernels::amx>();

const KernelConfig kScalar{
    .isa = Isa::scalar,
    .f32 = {.f32 = &scalar::gemm_block, .bf16 = &scalar::gemm_block, .fp16 = &scalar::gemm_block,
            .blocking = {.mc = 48, .kc = 256, .nc = 512}},
    .mr = 1, .nr = 16,
    .int8 = &scalar::int8_kernels, .int8_instr = "int32 multiply-add (portable)",
    .activate = &scalar::activate,
    .token_block = 96,
    .fma_peak = &scalar::fma_loop, .fma_instr = "portable multiply-add",
    .int8_peak = nullptr,
    .bf16 = &scalar::bf16_kernels, .bf16_peak = nullptr, .bf16_peak_instr = "",
    .exp_rows = &scalar::exp_rows, .softmax_step = &scalar::softmax_step, .sum_rows = &scalar::sum_rows,
    .qgemm = kScalarQ, .qgemm_instr = "int32 multiply-add (portable)", .qacts = &scalar::quantize_acts,
};

// 6×16 tiles of ymm (12 accumulators): rows per block 48 (A block 48 KiB in
// L2), k 256 (a 16-column B panel is 16 KiB, L1), 512 columns (512 KiB of B, L2).
const KernelConfig kAvx2{
    .isa = Isa::avx2,
    .f32 = {.f32 = &avx2::gemm_block, .bf16 = &avx2::gemm_block, .fp16 = &avx2::gemm_block,
            .blocking = {.mc = 48, .kc = 256, .nc = 512}},
    .mr = 6, .nr = 16,
    .int8 = &avx2::int8_kernels, .int8_instr = "AVX2 vpmaddwd ymm",
    .activate = &avx2::activate,
    .token_block = 96,
    .fma_peak = &avx2::fma_loop, .fma_instr = "AVX2 vfmadd231ps ymm",
    .int8_peak = &avx2::madd_loop,
    .bf16 = &scalar::bf16_kernels, .bf16_peak = nullptr, .bf16_peak_instr = "",
    .exp_rows = &avx2::exp_rows, .softmax_step = &avx2::softmax_step, .sum_rows = &avx2::sum_rows,
    .qgemm = kAvx2Q, .qgemm_instr = "AVX2 vpmaddubsw ymm", .qacts = &avx2::quantize_acts,
};

// The VNNI int8 set: the u8 × s8 product on vpdpbusd, which the FFN and the
// int8 linear (attention projections, output heads; since 2026-11-30) take.
// The int16 × int8 pair product on vpdpwssd, with AVX2's int16 row
// quantizer, is kept beside it and tested against its reference; no layer
// calls it now. Both are integer computations with their reference's bits.
const Int8Kernels& vnni_int8() {
  static const Int8Kernels k = [] {
    Int8Kernels v = avx512::int8_kernels_vnni;
    v.quantize_row = avx2::int8_kernels.quantize_row;
    return v;
  }();
  return k;
}

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
    .isa = Isa::avx512,
    .f32 = {.f32 = &avx512::gemm_block, .bf16 = &avx512::gemm_block, .fp16 = &avx512::gemm_block,
            .blocking = {.mc = 144, .kc = 256, .nc = 512}},
    .mr = 12, .nr = 32,
    .int8 = vnni ? &vnni_int8() : &avx2::int8_kernels,
    .int8_instr = vnni ? "AVX-512 vpdpbusd zmm" : "AVX2 vpmaddwd ymm",
    .activate = &avx512::activate,
    .token_block = 144,
    .fma_peak = &avx512::fma_loop, .fma_instr = "AVX-512 vfmadd231ps zmm",
    .int8_peak = vnni ? &avx512::dpbusd_loop : &avx2::madd_loop,
    .bf16 = bf16 ? &avx512::bf16_kernels : &scalar::bf16_kernels,
    .bf16_peak = bf16 ? &avx512::dpbf16_loop : nullptr,
    .bf16_peak_instr = bf16 ? "AVX-512 vdpbf16ps zmm" : "",
    .exp_rows = &avx512::exp_rows, .softmax_step = &avx512::softmax_step, .sum_rows = &avx512::sum_rows,
    .qgemm = vnni ? std::span<const QKernel>(kVnniQ) : std::span<const QKernel>(kAvx2Q),
    .qgemm_instr = vnni ? "AVX-512 vpdpbusd zmm" : "AVX2 vpmaddubsw ymm",
    .qacts = &avx512::quantize_acts,
  };
}

// AVX-512 (fp32 products, quantizers, epilogues) with the bf16 and u8 × s8
// products on AMX tiles; only where cpu_features().amx (which implies
// AVX512_VNNI and AVX512_BF16).
KernelConfig make_amx() {
  static const Int8Kernels int8 = [] {
    Int8Kernels k = vnni_int8();
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
  k.qgemm = kAmxQ;
  k.qgemm_instr = "AMX tdpbsud/tdpbssd (16 tokens at a time; the rest on AVX-512 vpdpbusd zmm)";
  return k;
}

// ---- the registry: every ISA of this build, worst first ----------------------
// Adding an ISA: its kernel folder (src/backends/cpu/kernels/<isa>/, listed
// in CMakeLists.txt's ffn_isa_kernels), its Isa value (ffn/types.hpp, with its
// name in src/core/types.cpp) and one entry here.
struct IsaEntry {
  Isa isa;
  bool (*supported)(const CpuFeatures& f);  // by this CPU (and its OS)
  const KernelConfig& (*config)();          // built once, on first use
};

const IsaEntry kIsas[] = {
    {.isa = Isa::scalar,
     .supported = [](const CpuFeatures&) { return true; },
     .config = []() -> const KernelConfig& { return kScalar; }},
    {.isa = Isa::avx2,
     .supported = [](const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c; },
     .config = []() -> const KernelConfig& { return kAvx2; }},
    {.isa = Isa::avx512,
     .supported = [](const CpuFeatures& f) { return f.avx512; },
     .config = []() -> const KernelConfig& {
       static const KernelConfig k = make_avx512();
       return k;
     }},
    {.isa = Isa::amx,
     .supported = [](const CpuFeatures& f) { return f.amx; },
     .config = []() -> const KernelConfig& {
       static const KernelConfig k = make_amx();
       return k;
     }},
};

const IsaEntry* entry(Isa i) {
  for (const IsaEntry& e : kIsas)
    if (e.isa == i) return &e;
  return nullptr;
}

}  // namespace

const KernelConfig& kernel_config(Isa resolved) {
  const IsaEntry* e = entry(resolved);
  return e ? e->config() : kScalar;
}

QGemmFn qgemm_kernel(const KernelConfig& kc, GgmlType t) {
  for (const KernelConfig* set : {&kc, &kScalar})
    for (const QKernel& q : set->qgemm)
      if (q.type == t) return q.gemm;
  return nullptr;
}

namespace {
struct Registered {
  std::mutex mu;
  std::vector<const KernelConfig*> sets;
};
Registered& registered() {
  static Registered r;
  return r;
}
}  // namespace

std::vector<const KernelConfig*> kernel_sets() {
  std::vector<const KernelConfig*> v;
  for (const IsaEntry& e : kIsas)
    if (e.supported(cpu_features())) v.push_back(&e.config());
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  v.insert(v.end(), r.sets.begin(), r.sets.end());
  return v;
}

void register_kernel_set(const KernelConfig* kc) {
  if (!kc) throw Error("register_kernel_set: null kernel set");
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  r.sets.push_back(kc);
}

}  // namespace ffn::nn

namespace ffn {

const std::vector<Isa>& all_isas() {
  static const std::vector<Isa> isas = [] {
    std::vector<Isa> v;
    for (const nn::IsaEntry& e : nn::kIsas) v.push_back(e.isa);
    return v;
  }();
  return isas;
}

bool isa_supported(Isa i) {
  if (i == Isa::automatic) return true;
  const nn::IsaEntry* e = nn::entry(i);
  return e && e->supported(nn::cpu_features());
}

// The best this CPU supports: the last supported entry of the registry.
Isa best_isa() {
  Isa best = Isa::scalar;
  for (const nn::IsaEntry& e : nn::kIsas)
    if (e.supported(nn::cpu_features())) best = e.isa;
  return best;
}

KernelInfo kernel_info(Isa isa) {
  const nn::KernelConfig& k = nn::kernel_config(isa);
  return KernelInfo{k.mr, k.nr, k.int8_instr, k.bf16 ? k.bf16->instr : ""};
}

}  // namespace ffn
