// The linear op (src/ops/linear.hpp), y = x Wᵀ + b and its backward, on
// every ISA against its reference (src/reference/linear_reference.hpp), on
// odd sizes around the GEMM's tiles (MR 1/6/12, 16-column panels), with and
// without bias and accumulation. Tolerance kFusedVsReference (1e-5 scaled):
// float sums of at most 70 products against double ones.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "ffn/diagnostics.hpp"
#include "ops/linear.hpp"
#include "tolerances.hpp"

using namespace ffn;

namespace {

std::vector<float> uniform(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

class LinearPerIsa : public ::testing::TestWithParam<Isa> {};

TEST_P(LinearPerIsa, FastMatchesReferenceOnOddSizes) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << ": not supported by this CPU";
  const nn::KernelConfig& kc = nn::kernel_config(isa);
  int checked = 0;
  for (int64_t n : {1, 5, 13, 37})
    for (int64_t k : {1, 7, 33, 70})
      for (int64_t m : {1, 17, 50})
        for (bool bias : {false, true}) {
          const std::string what = std::string(to_string(isa)) + " n=" + std::to_string(n) + " k=" +
                                   std::to_string(k) + " m=" + std::to_string(m) + (bias ? " bias" : "");
          const auto x = uniform(size_t(n * k), 1), w = uniform(size_t(m * k), 2), b = uniform(size_t(m), 3),
                     dy = uniform(size_t(n * m), 4), dx0 = uniform(size_t(n * k), 5);
          const std::vector<float> packed = nn::pack_linear_weight(w.data(), k, m);
          std::vector<float> y(size_t(n * m)), y_ref(y.size());
          nn::linear_forward(kc, false, x.data(), n, k, w.data(), packed, bias ? b.data() : nullptr, m, y.data(), 2);
          nn::linear_forward(kc, true, x.data(), n, k, w.data(), packed, bias ? b.data() : nullptr, m, y_ref.data(), 1);
          const Comparison cy = compare(y.data(), y_ref.data(), y.size());
          EXPECT_TRUE(cy.ok(test::kFusedVsReference)) << what << " y: " << cy.describe();
          EXPECT_GT(nonzero_fraction(y_ref.data(), y_ref.size()), 0.9) << what;
          for (bool accumulate : {false, true}) {
            std::vector<float> dx = dx0, dx_ref = dx0, dw(w.size()), dw_ref(w.size()), db(b.size()), db_ref(b.size());
            nn::linear_backward(kc, false, x.data(), n, k, w.data(), m, dy.data(), dx.data(), accumulate, dw.data(),
                                db.data(), 2);
            nn::linear_backward(kc, true, x.data(), n, k, w.data(), m, dy.data(), dx_ref.data(), accumulate,
                                dw_ref.data(), db_ref.data(), 1);
            const Comparison cx = compare(dx.data(), dx_ref.data(), dx.size());
            const Comparison cw = compare(dw.data(), dw_ref.data(), dw.size());
            EXPECT_TRUE(cx.ok(test::kFusedVsReference)) << what << " dx: " << cx.describe();
            EXPECT_TRUE(cw.ok(test::kFusedVsReference)) << what << " dw: " << cw.describe();
            EXPECT_EQ(db, db_ref) << what << " db (the same double sums on both paths)";
          }
          ++checked;
        }
  EXPECT_EQ(checked, 96);
}

INSTANTIATE_TEST_SUITE_P(Isas, LinearPerIsa, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The tolerance can fail: a bias left out is seen.
TEST(Linear, AMissingBiasIsSeen) {
  const nn::KernelConfig& kc = nn::kernel_config(Isa::scalar);
  const auto x = uniform(35, 1), w = uniform(7 * 5, 2), b = uniform(5, 3);
  const std::vector<float> packed = nn::pack_linear_weight(w.data(), 7, 5);
  std::vector<float> y(25), y_ref(25);
  nn::linear_forward(kc, false, x.data(), 5, 7, w.data(), packed, nullptr, 5, y.data(), 1);
  nn::linear_forward(kc, true, x.data(), 5, 7, w.data(), packed, b.data(), 5, y_ref.data(), 1);
  EXPECT_FALSE(compare(y.data(), y_ref.data(), y.size()).ok(test::kFusedVsReference));
}

}  // namespace
