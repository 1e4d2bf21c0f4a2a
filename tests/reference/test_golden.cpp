// Every golden case from PyTorch: load the case's weights through FeedForward::load
// (its naming scheme and prefix), run forward on both paths and backward,
// and compare y, dL/dx and every parameter gradient with PyTorch's.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "ffn/diagnostics.hpp"
#include "golden.hpp"
#include "tolerances.hpp"

using namespace ffn;
using namespace ffn::test;

namespace {

struct Worst {
  double err = 0;
  std::string where;
  void note(double e, const std::string& w) {
    if (e > err) { err = e; where = w; }
  }
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what, const GoldenCase& c, Worst& worst) {
  ASSERT_EQ(got.size(), want.size()) << what << " " << c.describe();
  const Comparison r = compare(got.data(), want.data(), got.size());
  worst.note(r.max_error, c.name + " " + what);
  EXPECT_TRUE(r.ok(tol)) << what << ": " << r.describe() << "\n  " << c.describe();
}

class Golden : public ::testing::TestWithParam<Path> {};

TEST_P(Golden, ForwardAndBackwardMatchPyTorch) {
  const auto cases = golden_cases();
  ASSERT_GT(cases.size(), 300u);
  Worst worst_y, worst_dx, worst_dw;
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.describe());
    const FeedForward layer = FeedForward::load(FFN_GOLDEN, c.load_options());
    const Shape shape = c.shape();
    const auto& x = c.tensor("x").data;
    const auto& dy = c.tensor("dy").data;
    const auto& y_want = c.tensor("y").data;
    // The check proves something only if the expected output is mostly non-zero.
    ASSERT_GT(nonzero_fraction(y_want.data(), y_want.size()), 0.5);

    for (int threads : {1, 2}) {
      const RunOptions ro = c.run_options(GetParam(), threads);
      std::vector<float> y(x.size(), -1.0f);
      ForwardCache cache;
      layer.forward(x.data(), y.data(), shape, ro, &cache);
      expect_close(y, y_want, kVsTorchY, "y", c, worst_y);

      std::vector<float> dx(x.size(), -1.0f);
      Weights g;
      layer.backward(x.data(), dy.data(), shape, cache, dx.data(), g, ro);
      const auto& dx_want = c.tensor("grad_input").data;
      ASSERT_GT(nonzero_fraction(dx_want.data(), dx_want.size()), 0.5);
      expect_close(dx, dx_want, kVsTorchDx, "grad_input", c, worst_dx);
      const TensorNames& n = layer.names();
      auto grad_of = [&](const std::string& full) { return c.tensor("grad." + full.substr(c.prefix.size())).data; };
      const std::pair<const std::string*, const std::vector<float>*> params[] = {
          {&n.w1, &g.w1}, {&n.b1, &g.b1}, {&n.wg, &g.wg}, {&n.bg, &g.bg},
          {&n.w2, &g.w2}, {&n.b2, &g.b2}, {&n.norm_weight, &g.norm_weight}, {&n.norm_bias, &g.norm_bias}};
      int checked = 0;
      for (const auto& [name, grad] : params) {
        if (name->empty()) {
          EXPECT_TRUE(grad->empty());
          continue;
        }
        const auto want = grad_of(*name);
        EXPECT_GT(nonzero_fraction(want.data(), want.size()), 0.0) << *name;
        expect_close(*grad, want, kVsTorchDw, "grad " + *name, c, worst_dw);
        ++checked;
      }
      // Every parameter PyTorch differentiated was compared.
      int in_file = 0;
      for (const auto& [k, v] : c.file->tensors)
        in_file += k.rfind(c.prefix + "grad.", 0) == 0;
      EXPECT_EQ(checked, in_file);
    }
  }
  // The margins, for tests/README.md.
  std::printf("worst scaled errors vs PyTorch: y %.2e (%s), dx %.2e (%s), dW %.2e (%s)\n", worst_y.err,
              worst_y.where.c_str(), worst_dx.err, worst_dx.where.c_str(), worst_dw.err, worst_dw.where.c_str());
}

INSTANTIATE_TEST_SUITE_P(Paths, Golden, ::testing::Values(Path::automatic, Path::reference),
                         [](const auto& info) { return info.param == Path::reference ? "reference" : "fused"; });

// Checkpoints named like PyTorch's TransformerEncoderLayer and LLaMA, loaded
// with no settings at all (only the prefix, and LLaMA's eps): the defaults the
// names imply (post-LN LayerNorm relu; pre-LN RMSNorm swiglu) give PyTorch's output.
TEST(GoldenDefaults, ForeignNamesNeedNoSettings) {
  int checked = 0;
  for (const GoldenCase& c : golden_cases()) {
    const std::string naming = c.meta["naming"];
    if (naming == "native" || c.meta["activation"] == "gelu" || c.meta["norm"] != (naming == "llama" ? "pre" : "post"))
      continue;
    LoadOptions o;
    o.prefix = c.prefix;
    if (naming == "llama") o.eps = c.meta["eps"].get<float>();
    const FeedForward layer = FeedForward::load(FFN_GOLDEN, o);
    EXPECT_EQ(layer.config().activation, naming == "llama" ? Activation::swiglu : Activation::relu);
    EXPECT_EQ(layer.config().norm_type, naming == "llama" ? NormType::rmsnorm : NormType::layernorm);
    const auto& x = c.tensor("x").data;
    std::vector<float> y(x.size());
    layer.forward(x.data(), y.data(), c.shape());
    const Comparison r = compare(y.data(), c.tensor("y").data.data(), y.size());
    EXPECT_TRUE(r.ok(kVsTorchY)) << c.describe() << ": " << r.describe();
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// The golden data itself covers what it claims: every activation x bias x
// norm placement x norm type x layout x lengths, dropout, and the three naming schemes.
TEST(GoldenData, CoversTheProduct) {
  std::set<std::string> combos, namings;
  int training = 0;
  for (const GoldenCase& c : golden_cases()) {
    const auto& m = c.meta;
    combos.insert(m["activation"].get<std::string>() + "/" + std::to_string(m["bias"].get<bool>()) + "/" +
                  m["norm"].get<std::string>() + "/" +
                  (m["norm"] == "none" ? std::string("-") : m["norm_type"].get<std::string>()) + "/" +
                  m["layout"].get<std::string>() + "/" + std::to_string(m.contains("lengths")));
    namings.insert(m["naming"].get<std::string>());
    training += m["training"].get<bool>();
  }
  EXPECT_EQ(combos.size(), 7u * 2 * 5 * 2 * 2);
  EXPECT_EQ(namings, (std::set<std::string>{"native", "torch", "llama"}));
  EXPECT_GE(training, 20);
}

}  // namespace
