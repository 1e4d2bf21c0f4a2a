// Tolerances of the tests, in the scaled error of common/compare.hpp:
// |got − want| / (|want| + rms(want)). Justification in tests/README.md;
// test_compare.cpp checks that the comparison itself accepts and rejects
// what these numbers promise.
#pragma once

namespace ffn::test {

// Our float32 results against PyTorch's float32 results. Both round every
// product and sum to float32 (unit roundoff u = 6e-8); a dot product over
// K <= 301 terms is off by at most ~K·u relative to the sum of |terms|, and
// the sums here are O(rms), so 1e-5 leaves a margin of > 10x over the
// largest error measured (see tests/README.md) while any real mistake (a
// wrong sign, a missing term, a wrong mask) is an O(1e-2..1) error.
constexpr double kVsTorch = 1e-5;

// The fused float32 path against the reference path (double accumulation).
constexpr double kFusedVsReference = 1e-5;

// Finite differences in double, central, step h = 1e-6: truncation ~h² ≈ 1e-12
// and cancellation ~1e-16/h ≈ 1e-10, far below 1e-6.
constexpr double kFiniteDifference = 1e-6;

}  // namespace ffn::test
