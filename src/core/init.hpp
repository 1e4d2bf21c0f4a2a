// Deterministic uniform fills from Philox (initialization, test data): defined
// in the public ffn/random.hpp; the library's own code spells it ffn::nn::.
#pragma once

#include "core/philox.hpp"

namespace ffn::nn {
using ffn::fill_uniform;
}  // namespace ffn::nn
