// Philox4x32-10 and the dropout rule: defined in the public ffn/random.hpp;
// the library's own code spells them ffn::nn::.
#pragma once

#include "ffn/random.hpp"

namespace ffn::nn {
using ffn::derive_seed;
using ffn::DropoutRule;
using ffn::philox4x32_10;
using ffn::random_bits;
using ffn::Stream;
}  // namespace ffn::nn
