// Which instruction set the fast paths use: detected once from CPUID, or
// forced with the environment variable FFN_ISA=avx512|avx2|scalar, or per
// call with RunOptions::isa.
#pragma once

#include <string>

#include "ffn/ffn.hpp"

namespace ffn::nn {

// The ISA a call runs: `requested` unless automatic, then FFN_ISA if set,
// else the best this CPU supports. Throws Error for an ISA the CPU lacks or
// that has no kernels in this build.
Isa resolve_isa(Isa requested);

// The CPU's name as the OS reports it (/proc/cpuinfo "model name"), or
// "unknown CPU"; printed with benchmark figures so they name their machine.
std::string cpu_name();

}  // namespace ffn::nn
