// The machine's peak rate, measured: a loop of one instruction with operands
// in registers, run on `threads` threads at once, with the best ISA this CPU
// has (whatever FFN_ISA forces: "% of peak" is the machine's).
#pragma once

#include "ffn/diagnostics.hpp"

namespace ffn::nn {

// Peak, PeakKind and measure_peak: public (ffn/diagnostics.hpp).
using ffn::measure_peak;
using ffn::Peak;
using ffn::PeakKind;


namespace avx2 {
double fma_loop(int64_t iters, float seed);
uint64_t read_loop(const uint8_t* p, int64_t bytes);  // ORs every 32-byte word (bytes a multiple of 256)
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
