// nn::gemm, the product every fast path is built on: each ISA's block kernel
// through the blocking/packing/threading driver, against a double-precision
// triple loop, on sizes around every blocking boundary (6-row tiles, 16-column
// panels, k blocks of 256, row blocks of 48, packed row blocks of 2048), for
// both A layouts, both B layouts, with and without accumulation; and the
// invariances the layer's bitwise guarantees rest on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ffn/ffn.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"

using namespace ffn;
using namespace ffn::nn;

namespace {

struct Problem {
  int64_t m, n, k;
  bool a_col_major;  // A(i, p) = a[p·m + i] instead of a[i·k + p]
  bool b_packed;     // B in 16-column panels instead of row-major [k, n]
  bool accumulate;
};

struct Data {
  std::vector<float> a, b_rows, b_panels, c0;
};

Data make(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Data d;
  d.a.resize(size_t(p.m * p.k));
  d.b_rows.resize(size_t(p.k * p.n));
  d.c0.resize(size_t(p.m * p.n));
  for (auto* v : {&d.a, &d.b_rows, &d.c0})
    for (float& e : *v) e = u(rng);
  d.b_panels = pack_panels(d.b_rows.data(), p.k, p.n, /*n_major=*/false);
  return d;
}

GemmArgs args(const Problem& p, const Data& d, float* c) {
  GemmArgs g;
  g.m = p.m; g.n = p.n; g.k = p.k;
  g.a = d.a.data();
  g.rsa = p.a_col_major ? 1 : p.k;
  g.csa = p.a_col_major ? p.m : 1;
  g.b = p.b_packed ? d.b_panels.data() : d.b_rows.data();
  g.ldb = p.b_packed ? kPanel : p.n;
  g.psb = p.b_packed ? p.k * kPanel : kPanel;
  g.c = c;
  g.ldc = p.n;
  g.accumulate = p.accumulate;
  return g;
}

std::vector<float> run(Isa isa, const Problem& p, const Data& d, int threads) {
  std::vector<float> c = d.c0;
  gemm(kernel_config(isa).f32, args(p, d, c.data()), threads);
  return c;
}

const Problem kProblems[] = {
    {1, 1, 1, false, true, false},       {1, 64, 512, false, true, false},  {2, 41, 7, true, false, true},
    {5, 17, 300, false, false, true},    {7, 15, 257, true, true, false},   {13, 48, 256, false, true, true},
    {49, 100, 513, true, false, false},  {97, 31, 40, false, true, true},   {300, 5, 300, true, false, true},
    {2100, 24, 9, true, false, false},   {6, 16, 0, false, true, false},    {6, 16, 0, false, true, true},
};

class GemmPerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << to_string(GetParam()) << " not supported here";
  }
};

}  // namespace

// Error bound: each element is a float sum of k products of terms ≤ 1 in
// magnitude (plus C when accumulating), so |err| ≤ (k+1)·u·Σ|terms| with
// u = 2^-24; we allow that bound (a wrong index or a missed term is off by
// O(1)).
TEST_P(GemmPerIsa, MatchesDoubleLoopOnOddSizes) {
  for (const Problem& p : kProblems) {
    const Data d = make(p, uint64_t(p.m * 1000 + p.n * 10 + p.k));
    const std::vector<float> c = run(GetParam(), p, d, 2);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double want = p.accumulate ? d.c0[size_t(i * p.n + j)] : 0.0, mag = std::abs(want);
        for (int64_t q = 0; q < p.k; ++q) {
          const double a = p.a_col_major ? d.a[size_t(q * p.m + i)] : d.a[size_t(i * p.k + q)];
          const double t = a * double(d.b_rows[size_t(q * p.n + j)]);
          want += t;
          mag += std::abs(t);
        }
        const double bound = double(p.k + 1) * std::ldexp(1.0, -24) * mag + 1e-30;
        ASSERT_LE(std::abs(double(c[size_t(i * p.n + j)]) - want), bound)
            << "m=" << p.m << " n=" << p.n << " k=" << p.k << " at (" << i << ", " << j << ")";
      }
  }
}

TEST_P(GemmPerIsa, BitwiseIdenticalForAnyThreadCountAndRowSubset) {
  for (const Problem& p : kProblems) {
    const Data d = make(p, 99);
    const std::vector<float> c1 = run(GetParam(), p, d, 1);
    for (int t : {2, 3, 5}) {
      const std::vector<float> ct = run(GetParam(), p, d, t);
      EXPECT_EQ(std::memcmp(c1.data(), ct.data(), c1.size() * 4), 0) << "threads " << t << " m=" << p.m;
    }
    if (p.a_col_major || p.m < 2) continue;
    // Row i alone (a 1-row call, other tile shapes) gives the same bits.
    for (int64_t i : {int64_t(0), p.m / 2, p.m - 1}) {
      Problem one = p;
      one.m = 1;
      Data d1 = d;
      d1.a.assign(d.a.begin() + i * p.k, d.a.begin() + (i + 1) * p.k);
      d1.c0.assign(d.c0.begin() + i * p.n, d.c0.begin() + (i + 1) * p.n);
      const std::vector<float> r = run(GetParam(), one, d1, 1);
      EXPECT_EQ(std::memcmp(r.data(), c1.data() + i * p.n, size_t(p.n) * 4), 0) << "row " << i << " m=" << p.m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, GemmPerIsa, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(to_string(info.param)); });
