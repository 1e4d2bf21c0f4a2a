// The norm of one row, the one definition every path uses (the fused FFN
// forward and backward, the norm op of the encoder, the references):
//   LayerNorm: mean = Σv/d, var = Σ(v − mean)²/d (biased, as PyTorch), rstd = 1/√(var + eps)
//   RMSNorm:   mean = 0,    var = Σv²/d,                          rstd = 1/√(var + eps)
//   out = x̂·γ + β with x̂ = (v − mean)·rstd
// and its backward from x̂ and rstd:
//   g = dout·γ;  LayerNorm: dv = rstd (g − mean(g) − x̂·mean(g·x̂));  RMSNorm: without mean(g).
// S is the type the statistics and every intermediate are computed in: float
// in the fused FFN (its float-statistics path), double in the encoder's norm
// op and in the references. The values are those of the code each path had
// before, bit for bit (scripts/same_bits.sh).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ffn/types.hpp"

namespace ffn::nn {

// out[d] = Norm(v[d]) (skipped when gamma is null); x̂[d], mean and rstd when
// asked (non-null). out may be v.
template <typename S, typename T, typename G>
inline void normalize_row(NormType type, const T* v, int64_t d, float eps, const G* gamma, const G* beta,
                          std::type_identity_t<T>* out, std::type_identity_t<T>* xhat, std::type_identity_t<T>* mean_out,
                          std::type_identity_t<T>* rstd_out) {
  S mean = 0;
  if (type == NormType::layernorm) {
    S s = 0;
    for (int64_t j = 0; j < d; ++j) s += S(v[j]);
    mean = s / S(d);
  }
  S var = 0;
  for (int64_t j = 0; j < d; ++j) var += (S(v[j]) - mean) * (S(v[j]) - mean);
  var /= S(d);
  const S rstd = S(1) / std::sqrt(var + S(eps));
  for (int64_t j = 0; j < d; ++j) {
    const S xh = (S(v[j]) - mean) * rstd;
    if (xhat) xhat[j] = T(xh);
    if (gamma) out[j] = T(xh * S(gamma[j]) + (beta ? S(beta[j]) : S(0)));
  }
  if (mean_out) *mean_out = T(mean);
  if (rstd_out) *rstd_out = T(rstd);
}

// dv[d] from dout[d] through out = γ·x̂ + β; with dgamma/dbeta (non-null)
// also dγ += dout·x̂ and dβ += dout, in S.
template <typename S, typename T, typename G>
inline void norm_backward_row(NormType type, const T* dout, const T* xhat, std::type_identity_t<T> rstd, int64_t d,
                              const G* gamma, std::type_identity_t<T>* dv, S* dgamma = nullptr, S* dbeta = nullptr) {
  S mean_g = 0, mean_gx = 0;
  for (int64_t j = 0; j < d; ++j) {
    const S g = S(dout[j]) * S(gamma[j]);
    mean_g += g;
    mean_gx += g * S(xhat[j]);
    if (dgamma) dgamma[j] += S(dout[j]) * S(xhat[j]);
    if (dbeta) dbeta[j] += S(dout[j]);
  }
  mean_g = type == NormType::rmsnorm ? S(0) : mean_g / S(d);
  mean_gx /= S(d);
  for (int64_t j = 0; j < d; ++j) dv[j] = T(S(rstd) * (S(dout[j]) * S(gamma[j]) - mean_g - S(xhat[j]) * mean_gx));
}

}  // namespace ffn::nn
