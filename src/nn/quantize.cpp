// Weight conversion and the portable activation quantizer (see quantize.hpp).
#include "nn/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ffn::nn {

QMatrix quantize_matrix(const std::vector<float>& w, int64_t rows, int64_t cols, WeightDtype dtype,
                        const std::string& name) {
  QMatrix m;
  m.rows = rows;
  m.cols = cols;
  const size_t n = size_t(rows * cols);
  auto where = [&](size_t i) {
    return name + "[" + std::to_string(int64_t(i) / cols) + ", " + std::to_string(int64_t(i) % cols) + "]";
  };
  switch (dtype) {
    case WeightDtype::fp32:
      break;
    case WeightDtype::bf16:
      m.h.resize(n);
      for (size_t i = 0; i < n; ++i) m.h[i] = float_to_bf16(w[i]);
      break;
    case WeightDtype::fp16:
      m.h.resize(n);
      for (size_t i = 0; i < n; ++i) {
        m.h[i] = float_to_fp16(w[i]);
        if (std::isfinite(w[i]) && !std::isfinite(fp16_to_float(m.h[i])))
          throw Error("fp16: weight " + where(i) + " = " + std::to_string(w[i]) +
                      " is beyond fp16's range (|w| <= 65504); use bf16");
      }
      break;
    case WeightDtype::int8:
      m.q.resize(n);
      m.scale.resize(size_t(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = w.data() + r * cols;
        float mx = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
          if (!std::isfinite(row[c]))
            throw Error("int8: weight " + where(size_t(r * cols + c)) + " is not finite");
          mx = std::max(mx, std::fabs(row[c]));
        }
        const float s = mx > 0.0f ? mx / 127.0f : 1.0f;
        m.scale[size_t(r)] = s;
        for (int64_t c = 0; c < cols; ++c)
          m.q[size_t(r * cols + c)] = int8_t(std::clamp(std::nearbyint(row[c] / s), -127.0f, 127.0f));
      }
      break;
  }
  return m;
}

std::vector<float> dequantize(const QMatrix& m, WeightDtype dtype) {
  const size_t n = size_t(m.rows * m.cols);
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case WeightDtype::bf16: w[i] = bf16_to_float(m.h[i]); break;
      case WeightDtype::fp16: w[i] = fp16_to_float(m.h[i]); break;
      case WeightDtype::int8: w[i] = float(m.q[i]) * m.scale[i / size_t(m.cols)]; break;
      case WeightDtype::fp32: break;
    }
  }
  return w;
}

float quantize_row_ref(const float* v, int64_t n, int16_t* a) {
  float lo = 0.0f, hi = 0.0f;
  bool finite = true;
  for (int64_t j = 0; j < n; ++j) {
    if (!std::isfinite(v[j])) finite = false;
    lo = std::min(lo, v[j]);
    hi = std::max(hi, v[j]);
  }
  if (n % 2) a[n] = 0;
  if (!finite) {
    std::fill(a, a + n, int16_t(0));
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float s = hi / 255.0f - lo / 255.0f;  // (hi − lo) / 255 without overflow
  if (!(s > 0.0f) || !std::isfinite(1.0f / s)) {  // all zero (or all below 1e-36)
    std::fill(a, a + n, int16_t(0));
    return 1.0f;
  }
  const float inv = 1.0f / s;
  const float zp = std::clamp(std::nearbyint(-lo * inv), 0.0f, 255.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float u = std::clamp(std::nearbyint(v[j] * inv) + zp, 0.0f, 255.0f);
    a[j] = int16_t(u - zp);
  }
  return s;
}

}  // namespace ffn::nn

namespace ffn::nn {

std::vector<uint16_t> pack_panels_16(const std::vector<uint16_t>& m, int64_t K, int64_t N, bool bf16) {
  const int64_t np = (N + 15) / 16;
  std::vector<uint16_t> out(size_t(np * K * 16), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / 16, j = n % 16, slot = bf16 ? (j < 8 ? 2 * j : 2 * (j - 8) + 1) : j;
    for (int64_t k = 0; k < K; ++k) out[size_t((q * K + k) * 16 + slot)] = m[size_t(n * K + k)];
  }
  return out;
}

std::vector<int8_t> pack_panels_s8(const std::vector<int8_t>& m, int64_t K, int64_t N) {
  const int64_t np = (N + 15) / 16, kp = (K + 1) / 2;
  std::vector<int8_t> out(size_t(np * kp * 32), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / 16, j = n % 16;
    for (int64_t k = 0; k < K; ++k) out[size_t(q * kp * 32 + (k / 2) * 32 + j * 2 + k % 2)] = m[size_t(n * K + k)];
  }
  return out;
}

}  // namespace ffn::nn
