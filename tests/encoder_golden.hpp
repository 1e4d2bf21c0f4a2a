// Access to the PyTorch encoder golden cases (tests/data/encoder_golden.safetensors,
// written by scripts/make_encoder_golden.py): case NNN's tensors under
// "caseNNN.", its settings as JSON in __metadata__["caseNNN"].
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn::test {

inline const SafetensorsFile& encoder_golden() {
  static const SafetensorsFile f = read_safetensors(FFN_ENCODER_GOLDEN);
  return f;
}

struct EncoderCase {
  std::string prefix;  // "case005."
  nlohmann::json meta;
  const NamedTensor& t(const std::string& n) const { return encoder_golden().tensors.at(prefix + n); }
  Shape shape() const {
    Shape s;
    s.batch = meta["batch"];
    s.seq = meta["seq"];
    if (meta["has_lengths"].get<bool>())
      for (float v : t("lengths").data) s.lengths.push_back(int64_t(v));
    return s;
  }
};

// The cases of one kind: "mha" (nn.MultiheadAttention) or "encoder" (nn.TransformerEncoder).
inline std::vector<EncoderCase> encoder_cases(const std::string& kind) {
  std::vector<EncoderCase> out;
  for (const auto& [key, value] : encoder_golden().metadata) {
    if (key.rfind("case", 0) != 0 || key == "cases") continue;
    EncoderCase c{key + ".", nlohmann::json::parse(value)};
    if (c.meta["kind"] == kind) out.push_back(c);
  }
  return out;
}

}  // namespace ffn::test
