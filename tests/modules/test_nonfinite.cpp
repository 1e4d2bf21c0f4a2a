// NaN and Inf propagate as in PyTorch (tests/data/nonfinite_golden.safetensors,
// from scripts/make_nonfinite_golden.py): for every activation and norm
// placement, an input row with a NaN, a +Inf, a -Inf or a value whose sums
// overflow gives NaN, ±Inf and finite values exactly where PyTorch does, on
// the reference and every fast path (the overflow row: see below); the
// other rows are unaffected.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "tolerances.hpp"

using namespace ffn;
using namespace ffn::test;

TEST(NonFinite, PropagatesLikePyTorch) {
  const SafetensorsFile f = read_safetensors(FFN_NONFINITE_GOLDEN);
  int cases = 0, nonfinite_seen = 0;
  for (const auto& [key, value] : f.metadata) {
    if (key.rfind("case", 0) != 0) continue;
    const nlohmann::json m = nlohmann::json::parse(value);
    LoadOptions lo;
    lo.prefix = key + ".";
    lo.activation = parse_activation(m["activation"].get<std::string>());
    lo.norm = parse_norm_placement(m["norm"].get<std::string>());
    lo.norm_type = parse_norm_type(m["norm_type"].get<std::string>());
    const FeedForward layer = FeedForward::load(FFN_NONFINITE_GOLDEN, lo);
    const NamedTensor& x = f.tensors.at(key + ".x");
    const NamedTensor& want = f.tensors.at(key + ".y");
    for (Isa isa : all_isas()) {
      for (Path path : {Path::reference, Path::automatic}) {
        if (path == Path::automatic && !isa_supported(isa)) continue;
        if (path == Path::reference && isa != Isa::scalar) continue;
        SCOPED_TRACE(key + " " + m.dump() + (path == Path::reference ? " reference" : " fast " + std::string(to_string(isa))));
        RunOptions ro;
        ro.path = path;
        ro.isa = isa;
        std::vector<float> y(x.data.size());
        layer.forward(x.data.data(), y.data(), Shape::tokens(x.shape[0]), ro);
        std::vector<float> got_finite, want_finite;
        const int64_t d = x.shape[1];
        for (size_t i = 0; i < y.size(); ++i) {
          // Row 4 is finite but overflows float32 inside the layer (3e38
          // times a weight; its square in the norm's variance). It is
          // compared on the fast path without a norm only: the reference
          // accumulates in double, and both paths compute the norm's
          // statistics in double, where PyTorch's float32 LayerNorm turns
          // the overflow into NaN and ours returns the finite answer.
          if (int64_t(i) / d == 4 && (path == Path::reference || layer.config().norm != NormPlacement::none)) continue;
          const float g = y[i], w = want.data[i];
          ASSERT_EQ(std::isnan(g), std::isnan(w)) << "element " << i << ": got " << g << ", PyTorch " << w;
          ASSERT_EQ(std::isinf(g), std::isinf(w)) << "element " << i << ": got " << g << ", PyTorch " << w;
          if (std::isinf(w)) {
            ASSERT_EQ(std::signbit(g), std::signbit(w)) << "element " << i;
          }
          if (std::isfinite(w)) {
            got_finite.push_back(g);
            want_finite.push_back(w);
          } else {
            ++nonfinite_seen;
          }
        }
        const auto c = compare(got_finite.data(), want_finite.data(), got_finite.size());
        EXPECT_TRUE(c.ok(kVsTorchY)) << c.describe();
        // Rows 0 and 5 are finite and must stay so.
        for (int64_t row : {0, 5})
          for (int64_t j = 0; j < d; ++j) ASSERT_TRUE(std::isfinite(y[size_t(row * d + j)]));
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 21);
  EXPECT_GT(nonfinite_seen, 0);
}
