// Built-in calibration texts for int8 sentence encoders (SentenceLoadOptions):
// ordinary English of several registers and lengths, written for this
// purpose and none of them a test sentence (tests/data/minilm_golden.safetensors).
#pragma once

#include <string>
#include <vector>

namespace ffn::text {

const std::vector<std::string>& calibration_texts();

}  // namespace ffn::text
