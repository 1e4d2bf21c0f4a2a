// The machine's peak rate, measured: a loop of one instruction with operands
// in registers, run on `threads` threads at once, with the best ISA this CPU
// has (whatever FFN_ISA forces: "% of peak" is the machine's).
#pragma once

#include "ffn/ffn.hpp"

namespace ffn::nn {

struct Peak {
  double gflops = 0;  // best of several short rounds
  Isa isa = Isa::scalar;
  const char* instr = "";  // what the loop ran, e.g. "AVX-512 vfmadd231ps zmm"
};
enum class PeakKind {
  fp32,   // FMA
  int8,   // the int8 product's instruction on that ISA (vpmaddwd + vpaddd on AVX2, vpdpbusd with VNNI)
  u8s8,   // vpmaddubsw + vpmaddwd + vpaddd: the other AVX2 int8 idiom, for comparison
  bf16,   // the bf16 compute mode's instruction (vdpbf16ps, AMX tdpbf16ps); 0 where none
};
// Ops counted as FLOPs are: 2 per multiply-add. int8 and u8s8 need AVX2 (else 0).
Peak measure_peak(int threads, PeakKind kind = PeakKind::fp32);

namespace avx2 {
double fma_loop(int64_t iters, float seed);
double madd_loop(int64_t iters, float seed);
double maddubs_loop(int64_t iters, float seed);
}  // namespace avx2
namespace avx512 {
double fma_loop(int64_t iters, float seed);
double dpbusd_loop(int64_t iters, float seed);
double dpbf16_loop(int64_t iters, float seed);
}  // namespace avx512
namespace amx {
double tdpbf16_loop(int64_t iters, float seed);
double tdpbusd_loop(int64_t iters, float seed);
}  // namespace amx
namespace scalar { double fma_loop(int64_t iters, float seed); }

}  // namespace ffn::nn
