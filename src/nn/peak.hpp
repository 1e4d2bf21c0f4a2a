// The machine's peak fp32 rate, measured: an FMA loop with operands in
// registers, run on `threads` threads at once with the best ISA this CPU has.
#pragma once

#include "ffn/ffn.hpp"

namespace ffn::nn {

struct Peak {
  double gflops = 0;  // best of several short rounds
  Isa isa = Isa::scalar;
};
enum class PeakKind {
  fp32,   // FMA
  int16,  // vpmaddwd + vpaddd: the int8 path's instruction pair on AVX2
  u8s8,   // vpmaddubsw + vpmaddwd + vpaddd: the other AVX2 int8 idiom, for comparison
};
// Ops counted as FLOPs are: 2 per multiply-add. int16 and u8s8 need AVX2 (else 0).
Peak measure_peak(int threads, PeakKind kind = PeakKind::fp32);

namespace avx2 {
double fma_loop(int64_t iters, float seed);
double madd_loop(int64_t iters, float seed);
double maddubs_loop(int64_t iters, float seed);
}  // namespace avx2
namespace scalar { double fma_loop(int64_t iters, float seed); }

}  // namespace ffn::nn
