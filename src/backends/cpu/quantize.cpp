// Weight conversion and the portable activation quantizer (see quantize.hpp).
#include "backends/cpu/quantize.hpp"

#include "backends/cpu/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ffn::nn {

QMatrix quantize_matrix(const std::vector<float>& w, int64_t rows, int64_t cols, WeightDtype dtype,
                        const std::string& name, int64_t group) {
  QMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.group = group;
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
      m.scale.resize(size_t(m.groups() * rows));
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = w.data() + r * cols;
        for (int64_t g = 0, gc = m.group_cols(); g < m.groups(); ++g) {
          const int64_t c0 = g * gc, c1 = std::min(cols, c0 + gc);
          float mx = 0.0f;
          for (int64_t c = c0; c < c1; ++c) {
            if (!std::isfinite(row[c]))
              throw Error("int8: weight " + where(size_t(r * cols + c)) + " is not finite");
            mx = std::max(mx, std::fabs(row[c]));
          }
          const float s = mx > 0.0f ? mx / 127.0f : 1.0f;
          m.scale[size_t(g * rows + r)] = s;
          for (int64_t c = c0; c < c1; ++c)
            m.q[size_t(r * cols + c)] = int8_t(std::clamp(std::nearbyint(row[c] / s), -127.0f, 127.0f));
        }
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
      case WeightDtype::int8:
        w[i] = float(m.q[i]) * m.scale_at(int64_t(i) / m.cols, int64_t(i) % m.cols);
        break;
      case WeightDtype::fp32: break;
    }
  }
  return w;
}

void regroup_scales(QMatrix& m, int64_t group) {
  if (m.groups() != 1) return;
  const std::vector<float> per_row = std::move(m.scale);
  m.group = group;
  m.scale.clear();
  for (int64_t g = 0; g < m.groups(); ++g) m.scale.insert(m.scale.end(), per_row.begin(), per_row.end());
}

void check_fp32_inputs(const std::vector<int64_t>& channels, int64_t d_model, const std::string& what) {
  for (size_t i = 0; i < channels.size(); ++i) {
    if (channels[i] < 0 || channels[i] >= d_model)
      throw Error(what + ": input channel " + std::to_string(channels[i]) + " is outside [0, d_model = " +
                  std::to_string(d_model) + ")");
    if (i > 0 && channels[i] <= channels[i - 1])
      throw Error(what + ": input channels must be ascending and distinct, got " + std::to_string(channels[i - 1]) +
                  " then " + std::to_string(channels[i]));
  }
}

void split_fp32_inputs(QuantizedWeights& q, std::vector<int64_t> channels, std::vector<float>& w1,
                       std::vector<float>* wg, int64_t d_model, int64_t d_ff, const std::string& what) {
  check_fp32_inputs(channels, d_model, what);
  const int64_t k = int64_t(channels.size());
  auto take = [&](std::vector<float>& w, std::vector<float>& cols) {
    cols.assign(size_t(k * d_ff), 0.0f);
    for (int64_t s = 0; s < k; ++s)
      for (int64_t f = 0; f < d_ff; ++f) {
        float& v = w[size_t(f * d_model + q.fp32_inputs[size_t(s)])];
        cols[size_t(s * d_ff + f)] = v;
        v = 0.0f;
      }
  };
  q.fp32_inputs = std::move(channels);
  take(w1, q.w1_fp32);
  if (wg) take(*wg, q.wg_fp32);
}

std::shared_ptr<QuantizedWeights> slice_hidden(const QuantizedWeights& q, int64_t d_model, int64_t d_ff, int64_t b,
                                               int64_t e) {
  const int64_t n = e - b, d = d_model;
  auto out = std::make_shared<QuantizedWeights>();
  out->dtype = q.dtype;
  auto rows = [&](const QMatrix& m) {  // [d_ff, d] with one scale per row
    QMatrix r;
    if (m.empty()) return r;
    r.rows = n, r.cols = d, r.group = m.group;
    r.q.assign(m.q.begin() + b * d, m.q.begin() + e * d);
    r.scale.assign(m.scale.begin() + b, m.scale.begin() + e);
    return r;
  };
  out->w1 = rows(q.w1);
  out->wg = rows(q.wg);
  QMatrix& w2 = out->w2;  // [d, d_ff], scales [groups, d]
  w2.rows = d, w2.cols = n, w2.group = kQuantChunk;
  w2.q.resize(size_t(d * n));
  for (int64_t o = 0; o < d; ++o)
    std::copy(q.w2.q.begin() + o * d_ff + b, q.w2.q.begin() + o * d_ff + e, w2.q.begin() + o * n);
  for (int64_t g = b / kQuantChunk; g < (e + kQuantChunk - 1) / kQuantChunk; ++g)
    w2.scale.insert(w2.scale.end(), q.w2.scale.begin() + g * d, q.w2.scale.begin() + (g + 1) * d);
  out->fp32_inputs = q.fp32_inputs;
  auto columns = [&](const std::vector<float>& t, std::vector<float>& dst) {  // [k, d_ff] → [k, n]
    for (size_t s = 0; s < q.fp32_inputs.size(); ++s)
      dst.insert(dst.end(), t.begin() + int64_t(s) * d_ff + b, t.begin() + int64_t(s) * d_ff + e);
  };
  columns(q.w1_fp32, out->w1_fp32);
  if (!q.wg_fp32.empty()) columns(q.wg_fp32, out->wg_fp32);
  return out;
}

void merge_fp32_inputs(const QuantizedWeights& q, std::vector<float>& w1, std::vector<float>* wg, int64_t d_model,
                       int64_t d_ff) {
  auto put = [&](std::vector<float>& w, const std::vector<float>& cols) {
    for (size_t s = 0; s < q.fp32_inputs.size(); ++s)
      for (int64_t f = 0; f < d_ff; ++f)
        w[size_t(f * d_model + q.fp32_inputs[s])] = cols[s * size_t(d_ff) + size_t(f)];
  };
  put(w1, q.w1_fp32);
  if (wg && !wg->empty()) put(*wg, q.wg_fp32);
}

float quantize_row_ref(const float* v, int64_t n, int16_t* a) {
  float lo = 0.0f, hi = 0.0f;
  bool finite = true;
  extend_range(v, n, lo, hi, finite);
  if (n % 2) a[n] = 0;
  const ActScale q = act_scale(lo, hi, finite);
  if (!q.levels) {
    std::fill(a, a + n, int16_t(0));
    return q.s;
  }
  for (int64_t j = 0; j < n; ++j) a[j] = int16_t(q.level(v[j]) - q.zp);
  return q.s;
}

float quantize_row_u8_ref(const float* v, int64_t n, uint8_t* u, int32_t* zp) {
  float lo = 0.0f, hi = 0.0f;
  bool finite = true;
  extend_range(v, n, lo, hi, finite);
  std::fill(u + n, u + (n + 3) / 4 * 4, uint8_t(0));
  const ActScale q = act_scale(lo, hi, finite);
  *zp = int32_t(q.zp);
  if (!q.levels) {
    std::fill(u, u + n, uint8_t(0));
    return q.s;
  }
  for (int64_t j = 0; j < n; ++j) u[j] = uint8_t(q.level(v[j]));
  return q.s;
}

}  // namespace ffn::nn

namespace ffn::nn {

AlignedVector<uint16_t> pack_panels_16(const std::vector<uint16_t>& m, int64_t K, int64_t N, bool bf16) {
  const int64_t np = (N + 15) / 16;
  AlignedVector<uint16_t> out(size_t(np * K * 16), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / 16, j = n % 16, slot = bf16 ? (j < 8 ? 2 * j : 2 * (j - 8) + 1) : j;
    for (int64_t k = 0; k < K; ++k) out[size_t((q * K + k) * 16 + slot)] = m[size_t(n * K + k)];
  }
  return out;
}

S8Quads pack_panels_s8_quads(const std::vector<int8_t>& m, int64_t K, int64_t N, int64_t k_group) {
  const int64_t np = (N + 15) / 16, kq = (K + 3) / 4, groups = (K + k_group - 1) / k_group;
  S8Quads out;
  out.b.assign(size_t(np * kq * 64), 0);
  out.colsum.assign(size_t(groups * np * 16), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / 16, j = n % 16;
    for (int64_t k = 0; k < K; ++k) {
      const int8_t w = m[size_t(n * K + k)];
      out.b[size_t(q * kq * 64 + (k / 4) * 64 + j * 4 + k % 4)] = w;
      out.colsum[size_t((k / k_group) * np * 16 + n)] += w;
    }
  }
  return out;
}

AlignedVector<int8_t> pack_panels_s8(const std::vector<int8_t>& m, int64_t K, int64_t N) {
  const int64_t np = (N + 15) / 16, kp = (K + 1) / 2;
  AlignedVector<int8_t> out(size_t(np * kp * 32), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / 16, j = n % 16;
    for (int64_t k = 0; k < K; ++k) out[size_t(q * kp * 32 + (k / 2) * 32 + j * 2 + k % 2)] = m[size_t(n * K + k)];
  }
  return out;
}

AlignedVector<uint16_t> pack_panels_bf16(const float* m, int64_t K, int64_t N) {
  const int64_t np = panels(N), kp = bf16_kpad(K) / 2;
  AlignedVector<uint16_t> out(size_t(np * kp * 32), 0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t q = n / kPanel, j = n % kPanel;
    for (int64_t k = 0; k < K; ++k)
      out[size_t(q * kp * 32 + (k / 2) * 32 + j * 2 + k % 2)] = float_to_bf16(m[n * K + k]);
  }
  return out;
}

}  // namespace ffn::nn
