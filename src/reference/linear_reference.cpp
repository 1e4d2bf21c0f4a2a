#include "reference/linear_reference.hpp"

namespace ffn::reference {

void linear_forward(const float* x, int64_t n, int64_t k, const float* w, const float* b, int64_t m, float* y) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = b ? double(b[j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(x[i * k + p]) * double(w[j * k + p]);
      y[i * m + j] = float(s);
    }
}

void linear_backward(const float* x, int64_t n, int64_t k, const float* w, int64_t m, const float* dy, float* dx,
                     bool accumulate, float* dw) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) {
      double s = 0.0;
      for (int64_t j = 0; j < m; ++j) s += double(dy[i * m + j]) * double(w[j * k + p]);
      dx[i * k + p] = accumulate ? dx[i * k + p] + float(s) : float(s);
    }
  for (int64_t j = 0; j < m; ++j)
    for (int64_t p = 0; p < k; ++p) {
      double s = 0.0;
      for (int64_t i = 0; i < n; ++i) s += double(dy[i * m + j]) * double(x[i * k + p]);
      dw[j * k + p] = float(s);
    }
}

}  // namespace ffn::reference
