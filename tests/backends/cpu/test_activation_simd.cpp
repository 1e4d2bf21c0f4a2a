// The fast paths' activation epilogue (src/backends/cpu/activation_simd.hpp), per ISA,
// against the definitions of src/backends/cpu/activation.hpp evaluated in long double
// (the truth, below; the float libm reference is itself off by up to ~2e-6 relative where
// 1 + tanh or 1 + erf cancels, and the test prints its error beside ours),
// over the whole float range: every 2039th bit pattern (2.1 million values, both
// signs, subnormals to the largest finite) plus ±0, ±Inf and NaN.
//
// Bound, per value: |fast − truth| ≤ kRel·|truth|·(1 + |a|) + kAbsPerZ·|z|,
// a the argument of exp (−z for silu, −2·√(2/π)(z + 0.044715 z³) for
// gelu_tanh, 0 otherwise).
//   kRel: exp's polynomial and the ~6 float roundings in a and around exp;
//   (1 + |a|): a float argument is itself rounded (relative 6e-8), and
//   e^a amplifies that by |a| — as in any float evaluation, libm's included.
//   The test prints the worst of |fast − truth| / (|truth|(1 + |a|)).
//   kAbsPerZ: gelu only — Φ from A&S 7.1.26 has |error| ≤ 1.5e-7 absolute,
//   times |z|; where Φ(z) is tiny (z ≪ 0) this is larger than the result, as
//   the float reference's own 1 + erf(z/√2) is there (it cancels).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ffn/ffn.hpp"
#include "backends/cpu/activation.hpp"
#include "backends/cpu/activation_simd.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/isa.hpp"

using namespace ffn;
using namespace ffn::nn;

namespace {

constexpr double kRel = 4e-6;
constexpr double kAbsPerZGelu = 2e-7;
// Results below 1e-36 in magnitude may come out as ±0 (exp overflows to Inf
// past 88.72, as float libm's does: silu(−88.74) is −0 there too).
constexpr double kTiny = 1e-36;

class ActivationPerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << to_string(GetParam()) << " not supported here";
  }
};

// The truth in long double, in forms without cancellation (the textbook
// 1 + tanh and 1 + erf lose all digits for z ≪ 0 even in double):
// (1 + tanh y)/2 = 1/(1 + e^(−2y)), (1 + erf x)/2 = erfc(−x)/2.
double truth(Unit u, float zf) {
  const long double z = zf;
  switch (u) {
    case Unit::relu: return double(z < 0 ? 0 : z);
    case Unit::gelu: return double(z * 0.5L * std::erfc(-z * 0.70710678118654752440L));
    case Unit::gelu_tanh: {
      const long double y = 0.79788456080286535588L * (z + 0.044715L * z * z * z);
      return double(z / (1 + std::exp(-2 * y)));
    }
    case Unit::silu: return double(z / (1 + std::exp(-z)));
  }
  return 0;
}

std::vector<float> all_floats() {
  std::vector<float> v;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 2039) {
    const float f = std::bit_cast<float>(uint32_t(b));
    if (!std::isnan(f)) v.push_back(f);
  }
  for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-3f, -1e-3f, 3.0f, -3.0f, 88.7f, -88.7f, 88.73f, -87.4f})
    v.push_back(f);
  return v;
}

}  // namespace

TEST_P(ActivationPerIsa, WithinStatedErrorOfLibmOverTheFloatRange) {
  const KernelConfig& kc = kernel_config(GetParam());
  const std::vector<float> z = all_floats();
  for (Unit u : {Unit::relu, Unit::gelu, Unit::gelu_tanh, Unit::silu}) {
    std::vector<float> got = z, scalar_out = z;
    kc.activate(u, got.data(), nullptr, int64_t(got.size()), nullptr, nullptr);
    kernel_config(Isa::scalar).activate(u, scalar_out.data(), nullptr, int64_t(z.size()), nullptr, nullptr);
    for (size_t i = 0; i < z.size(); ++i)  // every ISA's vector code gives the portable form's bits
      ASSERT_TRUE(std::isnan(got[i]) ? std::isnan(scalar_out[i])
                                     : std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(scalar_out[i]))
          << "unit " << int(u) << " z=" << z[i] << " got " << got[i] << " scalar kernel " << scalar_out[i];
    const double abs_per_z = u == Unit::gelu ? kAbsPerZGelu : 0.0;
    double worst_rel = 0, worst_rel_libm = 0;
    for (size_t i = 0; i < z.size(); ++i) {
      const float want = act(u, z[i]);  // the float reference path
      if (!std::isfinite(want) || !std::isfinite(z[i])) {  // NaN and ±Inf behave as in the reference
        ASSERT_TRUE(std::isnan(want) ? std::isnan(got[i]) : got[i] == want)
            << "unit " << int(u) << " z=" << z[i] << " got " << got[i] << " want " << want;
        continue;
      }
      const double want_true = truth(u, z[i]), zd = z[i];
      const double arg = u == Unit::silu        ? std::fabs(zd)
                         : u == Unit::gelu_tanh ? std::fabs(2 * 0.7978845608 * (zd + 0.044715 * zd * zd * zd))
                                                : 0.0;
      const double scale = std::fabs(want_true) * (1 + arg);
      const double err = std::fabs(double(got[i]) - want_true);
      ASSERT_LE(err, kRel * scale + abs_per_z * std::fabs(zd) + kTiny)
          << "unit " << int(u) << " z=" << z[i] << " got " << got[i] << " truth " << want_true;
      if (std::fabs(want_true) > 1e-30 && u != Unit::gelu) {
        worst_rel = std::max(worst_rel, err / scale);
        worst_rel_libm = std::max(worst_rel_libm, std::fabs(double(want) - want_true) / scale);
      }
    }
    std::printf("[ measured ] %s unit %d: worst scaled error %.2e (float libm reference: %.2e) over %zu values\n",
                std::string(to_string(GetParam())).c_str(), int(u), worst_rel, worst_rel_libm, z.size());
  }
}

// The gated form is act(g)·z, and every ISA gives the same bits (no
// contraction), which the int8 path's bitwise agreement with its reference needs.
TEST_P(ActivationPerIsa, GatedFormAndSameBitsAsScalar) {
  const KernelConfig& kc = kernel_config(GetParam());
  std::vector<float> g(4099), z(4099);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = float(int(i) - 2049) * 0.0037f;
    z[i] = 1.0f + float(i % 7) * 0.25f;
  }
  for (Unit u : {Unit::relu, Unit::gelu, Unit::gelu_tanh, Unit::silu}) {
    std::vector<float> got = z, plain = g, scalar_out = g;
    kc.activate(u, got.data(), g.data(), int64_t(got.size()), nullptr, nullptr);
    kc.activate(u, plain.data(), nullptr, int64_t(plain.size()), nullptr, nullptr);
    kernel_config(Isa::scalar).activate(u, scalar_out.data(), nullptr, int64_t(scalar_out.size()), nullptr, nullptr);
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(got[i], plain[i] * z[i]) << "unit " << int(u) << " i=" << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(plain[i]), std::bit_cast<uint32_t>(scalar_out[i]))
          << "unit " << int(u) << " g=" << g[i];
    }
  }
}

// The biases given to activate are added in the same pass, with the bits of
// adding them in place first and activating after (the fused forward passes
// them when it keeps no pre-activations), for every gating and bias pattern.
TEST_P(ActivationPerIsa, BiasesInThePassSameBitsAsAddedFirst) {
  const KernelConfig& kc = kernel_config(GetParam());
  const int64_t n = 1029;  // not a multiple of any vector width
  std::vector<float> z(n), g(n), bz(n), bg(n);
  for (int64_t i = 0; i < n; ++i) {
    z[size_t(i)] = float(int(i) - 517) * 0.0113f;
    g[size_t(i)] = float(int(i * 7 % n) - 511) * 0.0091f;
    bz[size_t(i)] = 0.3f - float(i % 13) * 0.05f;
    bg[size_t(i)] = float(i % 5) * 0.07f - 0.1f;
  }
  for (Unit u : {Unit::relu, Unit::gelu, Unit::gelu_tanh, Unit::silu})
    for (int pattern = 0; pattern < 6; ++pattern) {
      const bool gated = pattern >= 2, with_bz = pattern % 2 == 1, with_bg = pattern >= 4;
      std::vector<float> fused = z, first = z, gfirst = g;
      if (with_bz) for (int64_t i = 0; i < n; ++i) first[size_t(i)] += bz[size_t(i)];
      if (with_bg) for (int64_t i = 0; i < n; ++i) gfirst[size_t(i)] += bg[size_t(i)];
      kc.activate(u, fused.data(), gated ? g.data() : nullptr, n, with_bz ? bz.data() : nullptr,
                  with_bg ? bg.data() : nullptr);
      kc.activate(u, first.data(), gated ? gfirst.data() : nullptr, n, nullptr, nullptr);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(fused[size_t(i)]), std::bit_cast<uint32_t>(first[size_t(i)]))
            << "unit " << int(u) << " pattern " << pattern << " i=" << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Isas, ActivationPerIsa, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The scalar approximations on NaN and ±Inf: NaN out for NaN in (the
// conversion of a NaN exponent to int, undefined behaviour that UBSan caught
// through the fuzzer, must not happen), the limits for ±Inf.
TEST(ActivationScalar, NonFiniteInputs) {
  EXPECT_TRUE(std::isnan(nn::simd::exp_approx(NAN)));
  EXPECT_TRUE(std::isnan(nn::simd::exp_approx(-NAN)));
  EXPECT_EQ(nn::simd::exp_approx(INFINITY), INFINITY);
  EXPECT_EQ(nn::simd::exp_approx(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(nn::simd::phi_approx(NAN)));
}
