#include "train/lstsq.hpp"

#include <cmath>
#include <stdexcept>

namespace ffn::train {

std::vector<double> least_squares(std::vector<double> a, int64_t m, int64_t n, std::vector<double> b, int64_t k) {
  if (m < n) throw std::invalid_argument("least_squares: fewer rows than columns");
  auto A = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * n + j)]; };
  auto B = [&](int64_t i, int64_t j) -> double& { return b[size_t(i * k + j)]; };
  double scale = 0.0;
  for (double v : a) scale = std::max(scale, std::abs(v));
  std::vector<bool> dependent(size_t(n), false);

  // Householder: column j's reflector zeroes A[j+1.., j]; applied to A's
  // remaining columns and to B.
  for (int64_t j = 0; j < n; ++j) {
    double norm = 0.0;
    for (int64_t i = j; i < m; ++i) norm += A(i, j) * A(i, j);
    norm = std::sqrt(norm);
    if (norm <= 1e-12 * scale * std::sqrt(double(m))) {
      dependent[size_t(j)] = true;
      continue;
    }
    const double alpha = A(j, j) > 0 ? -norm : norm;
    std::vector<double> v(size_t(m - j));
    for (int64_t i = j; i < m; ++i) v[size_t(i - j)] = A(i, j);
    v[0] -= alpha;
    double vv = 0.0;
    for (double x : v) vv += x * x;
    if (vv == 0.0) continue;
    auto reflect = [&](auto&& at, int64_t col) {
      double dot = 0.0;
      for (int64_t i = j; i < m; ++i) dot += v[size_t(i - j)] * at(i, col);
      const double f = 2.0 * dot / vv;
      for (int64_t i = j; i < m; ++i) at(i, col) -= f * v[size_t(i - j)];
    };
    for (int64_t c = j; c < n; ++c) reflect(A, c);
    for (int64_t c = 0; c < k; ++c) reflect(B, c);
  }
  // Back substitution R X = (Qᵀ B)[:n].
  std::vector<double> x(size_t(n * k), 0.0);
  for (int64_t j = n - 1; j >= 0; --j) {
    if (dependent[size_t(j)] || std::abs(A(j, j)) <= 1e-12 * scale) continue;
    for (int64_t c = 0; c < k; ++c) {
      double s = B(j, c);
      for (int64_t l = j + 1; l < n; ++l) s -= A(j, l) * x[size_t(l * k + c)];
      x[size_t(j * k + c)] = s / A(j, j);
    }
  }
  return x;
}

double r_squared(const std::vector<double>& y, const std::vector<double>& p) {
  double mean = 0.0;
  for (double v : y) mean += v;
  mean /= double(y.size());
  double ss_res = 0.0, ss_tot = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    ss_res += (y[i] - p[i]) * (y[i] - p[i]);
    ss_tot += (y[i] - mean) * (y[i] - mean);
  }
  return 1.0 - ss_res / ss_tot;
}

}  // namespace ffn::train
