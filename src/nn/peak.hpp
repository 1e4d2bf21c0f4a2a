// The machine's peak fp32 rate, measured: an FMA loop with operands in
// registers, run on `threads` threads at once with the best ISA this CPU has.
#pragma once

#include "ffn/ffn.hpp"

namespace ffn::nn {

struct Peak {
  double gflops = 0;  // best of several short rounds
  Isa isa = Isa::scalar;
};
Peak measure_peak(int threads);

namespace avx2 { double fma_loop(int64_t iters, float seed); }
namespace scalar { double fma_loop(int64_t iters, float seed); }

}  // namespace ffn::nn
