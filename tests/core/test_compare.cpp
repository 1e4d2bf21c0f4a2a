// The comparison every test relies on is itself tested: it must accept
// differences below the tolerance and reject those above it, NaN, Inf and a
// difference against an all-zero expectation.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ffn/diagnostics.hpp"
#include "tolerances.hpp"

using ffn::compare;

TEST(Compare, IdenticalIsZero) {
  std::vector<float> a = {1, -2, 3, 0};
  EXPECT_EQ(compare(a.data(), a.data(), a.size()).max_error, 0.0);
}

TEST(Compare, ScaledByValuePlusRms) {
  // want = [3, 4]: rms = sqrt(12.5) = 3.5355; an error of 1e-4 at element 1
  // has scaled error 1e-4 / (4 + 3.5355).
  std::vector<double> want = {3, 4}, got = {3, 4 + 1e-4};
  auto c = compare(got.data(), want.data(), 2);
  EXPECT_NEAR(c.max_error, 1e-4 / (4 + std::sqrt(12.5)), 1e-12);
  EXPECT_EQ(c.worst, 1u);
}

TEST(Compare, AcceptsJustBelowRejectsJustAbove) {
  const double tol = ffn::test::kVsTorchY;
  std::vector<double> want(100, 1.0), got = want;  // rms 1, |want| 1: denominator 2
  got[17] = 1.0 + 0.9 * tol * 2;
  EXPECT_TRUE(compare(got.data(), want.data(), 100).ok(tol));
  got[17] = 1.0 + 1.1 * tol * 2;
  EXPECT_FALSE(compare(got.data(), want.data(), 100).ok(tol));
}

TEST(Compare, NearZeroElementMeasuredAgainstRms) {
  // A value that cancels to ~0 is judged against the tensor's rms, not itself.
  std::vector<double> want = {1e-9, 10, -10}, got = {2e-9, 10, -10};
  EXPECT_TRUE(compare(got.data(), want.data(), 3).ok(1e-6));
  got[0] = 1e-3;  // but a real error there still fails
  EXPECT_FALSE(compare(got.data(), want.data(), 3).ok(1e-5));
}

TEST(Compare, RejectsNonFinite) {
  std::vector<float> want = {1, 2}, got = {1, NAN};
  EXPECT_FALSE(compare(got.data(), want.data(), 2).ok(1e30));
  got[1] = INFINITY;
  EXPECT_FALSE(compare(got.data(), want.data(), 2).ok(1e30));
  std::vector<float> want_nan = {1, NAN}, got_nan = {1, NAN};
  EXPECT_TRUE(compare(got_nan.data(), want_nan.data(), 2).ok(0)) << "NaN where NaN is expected matches";
  got_nan[1] = 2;
  EXPECT_FALSE(compare(got_nan.data(), want_nan.data(), 2).ok(1e30));
}

TEST(Compare, AllZeroExpectationRejectsAnyDifference) {
  std::vector<float> want = {0, 0}, got = {0, 1e-30f};
  EXPECT_FALSE(compare(got.data(), want.data(), 2).ok(1e30));
  got[1] = 0;
  EXPECT_TRUE(compare(got.data(), want.data(), 2).ok(0));
}

TEST(Compare, NonzeroFraction) {
  std::vector<float> v = {0, 1, 0, 2};
  EXPECT_DOUBLE_EQ(ffn::nonzero_fraction(v.data(), 4), 0.5);
}
