#include "demo/lstsq.hpp"

#include <cmath>
#include <string>

#include "ffn/ffn.hpp"

namespace ffn::train {

std::vector<double> least_squares(std::vector<double> a, int64_t m, int64_t n, std::vector<double> b, int64_t k) {
  if (m < n) throw Error("least squares: " + std::to_string(m) + " rows for " + std::to_string(n) + " unknowns");
  auto A = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * n + j)]; };
  auto B = [&](int64_t i, int64_t j) -> double& { return b[size_t(i * k + j)]; };
  double scale = 0.0;
  for (double v : a) scale = std::max(scale, std::abs(v));

  // Householder QR without column pivoting: each independent column gets the
  // next pivot row r (its reflector zeroes A[r+1.., j]), applied to the
  // remaining columns and to B. A column with nothing left below row r is
  // dependent on the previous ones: it gets no pivot row and coefficient 0.
  std::vector<int64_t> pivot_row(size_t(n), -1);
  int64_t r = 0;
  for (int64_t j = 0; j < n && r < m; ++j) {
    double norm = 0.0;
    for (int64_t i = r; i < m; ++i) norm += A(i, j) * A(i, j);
    norm = std::sqrt(norm);
    if (norm <= 1e-12 * scale * std::sqrt(double(m))) continue;
    const double alpha = A(r, j) > 0 ? -norm : norm;
    std::vector<double> v(size_t(m - r));
    for (int64_t i = r; i < m; ++i) v[size_t(i - r)] = A(i, j);
    v[0] -= alpha;
    double vv = 0.0;
    for (double x : v) vv += x * x;
    auto reflect = [&](auto&& at, int64_t col) {
      double dot = 0.0;
      for (int64_t i = r; i < m; ++i) dot += v[size_t(i - r)] * at(i, col);
      const double f = 2.0 * dot / vv;
      for (int64_t i = r; i < m; ++i) at(i, col) -= f * v[size_t(i - r)];
    };
    if (vv > 0.0) {
      for (int64_t c = j; c < n; ++c) reflect(A, c);
      for (int64_t c = 0; c < k; ++c) reflect(B, c);
    }
    pivot_row[size_t(j)] = r++;
  }
  // Back substitution over the independent columns: row pivot_row[j] of R X = (Qᵀ B).
  std::vector<double> x(size_t(n * k), 0.0);
  for (int64_t j = n - 1; j >= 0; --j) {
    const int64_t pr = pivot_row[size_t(j)];
    if (pr < 0) continue;
    for (int64_t c = 0; c < k; ++c) {
      double s = B(pr, c);
      for (int64_t l = j + 1; l < n; ++l) s -= A(pr, l) * x[size_t(l * k + c)];
      x[size_t(j * k + c)] = s / A(pr, j);
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
