#include "reference/linear_reference.hpp"

#include <cmath>
#include <vector>

#include "backends/cpu/quantize.hpp"
#include "core/half.hpp"

namespace ffn::reference {

void linear_forward(const float* x, int64_t n, int64_t k, const float* w, const float* b, int64_t m, float* y) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = b ? double(b[j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(x[i * k + p]) * double(w[j * k + p]);
      y[i * m + j] = float(s);
    }
}

void linear_forward_bf16(const float* x, int64_t n, int64_t k, const float* w, const float* b, int64_t m, float* y) {
  const auto round = [](const float* v, int64_t count) {
    std::vector<float> r(v, v + count);
    for (float& e : r) e = nn::bf16_to_float(nn::float_to_bf16(e));
    return r;
  };
  const std::vector<float> xr = round(x, n * k), wr = round(w, m * k);
  linear_forward(xr.data(), n, k, wr.data(), b, m, y);
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

void linear_forward_int8(const float* x, int64_t n, int64_t k, const int8_t* q, const float* scale,
                         const int64_t* fp32_inputs, int64_t n32, const float* w32, const float* b, int64_t m,
                         float* y) {
  std::vector<float> row(static_cast<size_t>(k));
  std::vector<int16_t> a(size_t(k + 1));
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * k;
    row.assign(xi, xi + k);
    for (int64_t s = 0; s < n32; ++s) row[size_t(fp32_inputs[s])] = 0.0f;
    const float s_a = nn::quantize_row_ref(row.data(), k, a.data());
    for (int64_t j = 0; j < m; ++j) {
      int64_t acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += int64_t(a[size_t(p)]) * int64_t(q[j * k + p]);
      float prev = b ? b[j] : 0.0f;
      for (int64_t c = 0; c < n32; ++c) prev = std::fma(xi[fp32_inputs[c]], w32[c * m + j], prev);
      y[i * m + j] = std::fma(float(acc), s_a * scale[j], prev);
    }
  }
}

}  // namespace ffn::reference
