// Which instruction set the fast paths use: detected once from CPUID, or
// forced with the environment variable FFN_ISA=avx512|avx2|scalar, or per
// call with RunOptions::isa.
#pragma once

#include "ffn/ffn.hpp"

namespace ffn::nn {

// The ISA a call runs: `requested` unless automatic, then FFN_ISA if set,
// else the best this CPU supports. Throws Error for an ISA the CPU lacks or
// that has no kernels in this build.
Isa resolve_isa(Isa requested);

}  // namespace ffn::nn
