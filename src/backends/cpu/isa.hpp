// Which instruction set the fast paths use: detected once from CPUID, or
// forced with the environment variable FFN_ISA=avx512|avx2|scalar, or per
// call with RunOptions::isa.
#pragma once

#include <string>

#include "ffn/diagnostics.hpp"

namespace ffn::nn {

// resolve_isa and cpu_name: public (ffn/diagnostics.hpp).
using ffn::cpu_name;
using ffn::resolve_isa;

}  // namespace ffn::nn
