#include "golden.hpp"

namespace ffn::test {

const SafetensorsFile& golden_file() {
  static const SafetensorsFile f = read_safetensors(FFN_GOLDEN);
  return f;
}

std::vector<GoldenCase> golden_cases() {
  const SafetensorsFile& f = golden_file();
  std::vector<GoldenCase> out;
  const int n = std::stoi(f.metadata.at("cases"));
  for (int i = 0; i < n; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "case%03d", i);
    GoldenCase c;
    c.name = name;
    c.prefix = c.name + ".";
    c.meta = nlohmann::json::parse(f.metadata.at(c.name));
    c.file = &f;
    out.push_back(std::move(c));
  }
  return out;
}

LoadOptions GoldenCase::load_options() const {
  LoadOptions o;
  o.prefix = prefix;
  o.activation = parse_activation(meta["activation"].get<std::string>());
  o.norm = parse_norm_placement(meta["norm"].get<std::string>());
  o.norm_type = parse_norm_type(meta["norm_type"].get<std::string>());
  o.eps = meta["eps"].get<float>();
  o.dropout_hidden = meta["dropout_hidden"].get<float>();
  o.dropout_output = meta["dropout_output"].get<float>();
  return o;
}

Shape GoldenCase::shape() const {
  Shape s;
  s.layout = parse_layout(meta["layout"].get<std::string>());
  s.batch = meta["batch"].get<int64_t>();
  s.seq = meta["seq"].get<int64_t>();
  if (meta.contains("lengths")) s.lengths = meta["lengths"].get<std::vector<int64_t>>();
  return s;
}

RunOptions GoldenCase::run_options(Path path, int threads) const {
  RunOptions r;
  r.training = meta["training"].get<bool>();
  r.seed = meta["seed"].get<uint64_t>();
  r.path = path;
  r.threads = threads;
  return r;
}

}  // namespace ffn::test
