// Access to the PyTorch decoder golden cases (tests/data/decoder_golden.safetensors,
// written in float64 by scripts/make_decoder_golden.py).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn::test {

inline const SafetensorsFile& decoder_golden() {
  static const SafetensorsFile f = read_safetensors(FFN_DECODER_GOLDEN);
  return f;
}

struct DecoderCase {
  std::string prefix;  // "case005."
  nlohmann::json meta;
  const NamedTensor& t(const std::string& n) const { return decoder_golden().tensors.at(prefix + n); }
  Shape shape(bool memory) const {
    Shape s;
    s.batch = meta["batch"];
    s.seq = meta[memory ? "memory_seq" : "seq"];
    if (meta[memory ? "has_memory_lengths" : "has_lengths"].get<bool>())
      for (float v : t(memory ? "memory_lengths" : "lengths").data) s.lengths.push_back(int64_t(v));
    return s;
  }
};

inline std::vector<DecoderCase> decoder_cases(const std::vector<std::string>& kinds) {
  std::vector<DecoderCase> out;
  for (const auto& [key, value] : decoder_golden().metadata) {
    if (key.rfind("case", 0) != 0 || key == "cases") continue;
    DecoderCase c{key + ".", nlohmann::json::parse(value)};
    for (const auto& k : kinds)
      if (c.meta["kind"] == k) out.push_back(c);
  }
  return out;
}

}  // namespace ffn::test
