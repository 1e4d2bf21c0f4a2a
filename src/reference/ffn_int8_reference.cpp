#include "reference/ffn_int8_reference.hpp"

#include <cmath>
#include <vector>

#include "backends/cpu/activation.hpp"
#include "backends/cpu/activation_simd.hpp"

namespace ffn::reference {

void igemm_int8(const int16_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, int32_t* c) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int32_t s = 0;
      for (int64_t p = 0; p < k; ++p) s += int32_t(a[i * k + p]) * int32_t(b[j * k + p]);
      c[i * n + j] = s;
    }
}

void forward_int8(const Config& cfg, const nn::QuantizedWeights& q, const Params<float>& p, const float* x,
                  int64_t n, float* y) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  const bool gated = is_gated(cfg.activation);
  const nn::Unit unit = nn::unit_of(cfg.activation);
  const size_t ud = static_cast<size_t>(d), uF = static_cast<size_t>(F);
  std::vector<float> in(ud), h(uF), o(ud), row(ud);
  const size_t k32 = q.fp32_inputs.size();
  std::vector<float> x32(k32);
  std::vector<int16_t> xa(ud + 1), ha(static_cast<size_t>(nn::kQuantChunk) + 1);
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * d;
    if (cfg.norm == NormPlacement::pre) norm_row(cfg, xt, p, in.data());
    else std::copy(xt, xt + d, in.begin());
    // fp32 input channels: their values kept aside and left out of the quantized row
    for (size_t s = 0; s < k32; ++s) {
      x32[s] = in[size_t(q.fp32_inputs[s])];
      in[size_t(q.fp32_inputs[s])] = 0.0f;
    }
    const float sx = nn::quantize_row_ref(in.data(), d, xa.data());
    // prev: the bias, plus the fp32 channels' products (float fmas in order)
    auto prev = [&](const std::vector<float>& w32, const float* b, int64_t f) {
      if (k32 == 0) return b ? b[f] : 0.0f;
      float v;
      nn::fp32_input_part(x32.data(), int64_t(k32), 1, w32.data() + f, F, b ? b + f : nullptr, 1, &v, 1);
      return v;
    };
    for (int64_t f = 0; f < F; ++f) {
      int32_t a1 = 0, ag = 0;
      for (int64_t k = 0; k < d; ++k) {
        a1 += int32_t(xa[size_t(k)]) * int32_t(q.w1.q[size_t(f * d + k)]);
        if (gated) ag += int32_t(xa[size_t(k)]) * int32_t(q.wg.q[size_t(f * d + k)]);
      }
      const float z = std::fma(float(a1), sx * q.w1.scale_at(f, 0), prev(q.w1_fp32, p.b1, f));
      if (gated) {
        const float zg = std::fma(float(ag), sx * q.wg.scale_at(f, 0), prev(q.wg_fp32, p.bg, f));
        h[size_t(f)] = nn::simd::act_approx(unit, zg) * z;
      } else {
        h[size_t(f)] = nn::simd::act_approx(unit, z);
      }
    }
    std::fill(o.begin(), o.end(), 0.0f);
    for (int64_t f0 = 0; f0 < F; f0 += nn::kQuantChunk) {
      const int64_t fc = std::min(nn::kQuantChunk, F - f0);
      const float sh = nn::quantize_row_ref(h.data() + f0, fc, ha.data());
      for (int64_t j = 0; j < d; ++j) {
        int32_t s = 0;
        for (int64_t f = 0; f < fc; ++f) s += int32_t(ha[size_t(f)]) * int32_t(q.w2.q[size_t(j * F + f0 + f)]);
        o[size_t(j)] = std::fma(float(s), sh * q.w2.scale_at(j, f0), o[size_t(j)]);
      }
    }
    float* yt = y + t * d;
    for (int64_t j = 0; j < d; ++j) o[size_t(j)] += p.b2 ? p.b2[j] : 0.0f;
    switch (cfg.norm) {
      case NormPlacement::none: std::copy(o.begin(), o.end(), yt); break;
      case NormPlacement::pre:
        for (int64_t j = 0; j < d; ++j) yt[j] = xt[j] + o[size_t(j)];
        break;
      case NormPlacement::post:
        for (int64_t j = 0; j < d; ++j) row[size_t(j)] = xt[j] + o[size_t(j)];
        norm_row(cfg, row.data(), p, yt);
        break;
    }
  }
}

}  // namespace ffn::reference
