// Access to the PyTorch golden cases (tests/data/golden.safetensors, written
// by scripts/make_golden.py).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn::test {

struct GoldenCase {
  std::string name;    // "case017"
  std::string prefix;  // "case017."
  nlohmann::json meta;
  const SafetensorsFile* file = nullptr;

  const NamedTensor& tensor(const std::string& n) const { return file->tensors.at(prefix + n); }
  bool has(const std::string& n) const { return file->tensors.count(prefix + n) != 0; }
  LoadOptions load_options() const;
  Shape shape() const;
  RunOptions run_options(Path path, int threads) const;
  std::string describe() const { return name + " " + meta.dump(); }
};

const SafetensorsFile& golden_file();
std::vector<GoldenCase> golden_cases();

}  // namespace ffn::test
