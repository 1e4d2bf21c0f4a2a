// How a result is compared with an expected one, everywhere in the project
// (tests against PyTorch and the reference, and `ffn bench`'s check).
//
// scaled error of element i = |got_i − want_i| / (|want_i| + rms(want))
//
// Elementwise relative error alone fails on values that cancel to near zero,
// whose absolute error is set by the size of the terms, not of the result;
// adding the tensor's RMS to the denominator measures such elements against
// the tensor's typical magnitude. A non-finite value counts as an infinite
// error unless the other side has the same one (NaN where NaN is expected); so does any difference where want is all zeros.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

namespace ffn {

struct Comparison {
  double max_error = 0;   // largest scaled error
  size_t worst = 0;       // index of that element
  double got = 0, want = 0;
  bool ok(double tol) const { return max_error <= tol; }
  std::string describe() const {
    return "max scaled error " + std::to_string(max_error) + " at [" + std::to_string(worst) +
           "]: got " + std::to_string(got) + ", want " + std::to_string(want);
  }
};

template <typename A, typename B>
Comparison compare(const A* got, const B* want, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(want[i]) * double(want[i]);
  const double rms = n ? std::sqrt(ss / double(n)) : 0.0;
  Comparison c;
  for (size_t i = 0; i < n; ++i) {
    const double g = double(got[i]), w = double(want[i]);
    double e;
    if (!std::isfinite(g) || !std::isfinite(w)) e = (g == w || (std::isnan(g) && std::isnan(w))) ? 0.0 : INFINITY;
    else if (g == w) e = 0.0;
    else {
      const double den = std::fabs(w) + rms;
      e = den > 0 ? std::fabs(g - w) / den : INFINITY;
    }
    if (i == 0 || e > c.max_error) {
      c.max_error = e;
      c.worst = i;
      c.got = g;
      c.want = w;
    }
  }
  return c;
}

// How far a low-precision result is from the full-precision one, as a whole:
// ‖got − want‖ / ‖want‖ and the cosine of the angle between them.
struct Agreement {
  double rel_rms = 0, cosine = 0;
};
template <typename A, typename B>
Agreement agreement(const A* got, const B* want, size_t n) {
  double e = 0, w = 0, g = 0, gw = 0;
  for (size_t i = 0; i < n; ++i) {
    const double a = double(got[i]), b = double(want[i]);
    e += (a - b) * (a - b);
    w += b * b;
    g += a * a;
    gw += a * b;
  }
  return {std::sqrt(e / w), gw / std::sqrt(g * w)};
}

// Fraction of elements that are not zero: a check whose expected values are
// mostly zeros proves little (oneDNN's benchdnn refuses such checks).
template <typename T>
double nonzero_fraction(const T* v, size_t n) {
  size_t nz = 0;
  for (size_t i = 0; i < n; ++i) nz += v[i] != T(0);
  return n ? double(nz) / double(n) : 0.0;
}

}  // namespace ffn
