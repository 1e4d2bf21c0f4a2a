#include "reference/ffn_bf16_reference.hpp"

#include <cmath>
#include <vector>

#include "backends/cpu/activation.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::reference {

namespace {

double bf16(float v) { return double(nn::bf16_to_float(nn::float_to_bf16(v))); }

}  // namespace

void forward_bf16(const Config& cfg, const Params<float>& p, const float* x, int64_t n, float* y) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  const bool gated = is_gated(cfg.activation);
  const nn::Unit unit = nn::unit_of(cfg.activation);
  const size_t ud = size_t(d), uF = size_t(F);
  // The weights as the products see them.
  std::vector<double> w1(uF * ud), wg(gated ? uF * ud : 0), w2(ud * uF);
  for (size_t i = 0; i < uF * ud; ++i) {
    w1[i] = bf16(p.w1[i]);
    if (gated) wg[i] = bf16(p.wg[i]);
  }
  for (size_t i = 0; i < ud * uF; ++i) w2[i] = bf16(p.w2[i]);
  std::vector<double> xt(ud), in(ud), h(uF), o(ud), row(ud);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < d; ++j) xt[size_t(j)] = x[t * d + j];
    if (cfg.norm == NormPlacement::pre) {
      norm_row(cfg, xt.data(), p, in.data());
      for (double& v : in) v = bf16(float(v));  // the fast path rounds its float normalized row
    } else {
      for (int64_t j = 0; j < d; ++j) in[size_t(j)] = bf16(x[t * d + j]);
    }
    for (int64_t f = 0; f < F; ++f) {
      double z = p.b1 ? double(p.b1[f]) : 0.0, zg = p.bg ? double(p.bg[f]) : 0.0;
      for (int64_t k = 0; k < d; ++k) {
        z += in[size_t(k)] * w1[size_t(f * d + k)];
        if (gated) zg += in[size_t(k)] * wg[size_t(f * d + k)];
      }
      const double a = gated ? nn::act(unit, zg) * z : nn::act(unit, z);
      h[size_t(f)] = bf16(float(a));
    }
    for (int64_t j = 0; j < d; ++j) {
      double s = p.b2 ? double(p.b2[j]) : 0.0;
      for (int64_t f = 0; f < F; ++f) s += h[size_t(f)] * w2[size_t(j * F + f)];
      o[size_t(j)] = s;
    }
    float* yt = y + t * d;
    switch (cfg.norm) {
      case NormPlacement::none:
        for (int64_t j = 0; j < d; ++j) yt[j] = float(o[size_t(j)]);
        break;
      case NormPlacement::pre:
        for (int64_t j = 0; j < d; ++j) yt[j] = float(xt[size_t(j)] + o[size_t(j)]);
        break;
      case NormPlacement::post:
        for (int64_t j = 0; j < d; ++j) row[size_t(j)] = xt[size_t(j)] + o[size_t(j)];
        norm_row(cfg, row.data(), p, o.data());
        for (int64_t j = 0; j < d; ++j) yt[j] = float(o[size_t(j)]);
        break;
    }
  }
}

}  // namespace ffn::reference
