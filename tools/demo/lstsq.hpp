// Linear least squares by Householder QR, in double: the closed-form fits
// the demonstrations compare against (and start from).
#pragma once

#include <cstdint>
#include <vector>

namespace ffn::train {

// Minimizes ||A X - B||² for A [m, n] (m >= n) and B [m, k], both row-major;
// returns X [n, k]. A column that is (numerically) a combination of the
// previous ones gets coefficient 0.
std::vector<double> least_squares(std::vector<double> a, int64_t m, int64_t n, std::vector<double> b, int64_t k);

// Coefficient of determination 1 - Σ(y - p)² / Σ(y - ȳ)².
double r_squared(const std::vector<double>& y, const std::vector<double>& p);

}  // namespace ffn::train
