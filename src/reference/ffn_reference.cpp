#include "reference/ffn_reference.hpp"

#include <cmath>
#include <vector>

#include "backends/cpu/activation.hpp"
#include "core/philox.hpp"

namespace ffn::reference {
namespace {

using Acc = double;

// Normalizes v[d] into xhat, returning mean and rstd (src/backends/cpu/norm_row.hpp, in double).
template <typename T>
void norm_stats(NormType type, const T* v, int64_t d, float eps, T* xhat, T& mean_out, T& rstd_out) {
  nn::normalize_row<Acc, T, T>(type, v, d, eps, nullptr, nullptr, nullptr, xhat, &mean_out, &rstd_out);
}

// dv[d] from dout[d] through out = γ·xhat + β (see norm_stats); accumulates
// dγ += dout·xhat, dβ += dout (in double).
template <typename T>
void norm_backward(NormType type, const T* dout, const T* xhat, T rstd, int64_t d, const T* gamma,
                   Acc* dgamma, Acc* dbeta, T* dv) {
  nn::norm_backward_row<Acc>(type, dout, xhat, rstd, d, gamma, dv, dgamma, dbeta);
}

template <typename T>
void norm_apply(const T* xhat, const T* gamma, const T* beta, int64_t d, T* out) {
  for (int64_t j = 0; j < d; ++j) out[j] = T(Acc(xhat[j]) * Acc(gamma[j]) + (beta ? Acc(beta[j]) : 0.0));
}

// out[rows] = W[rows, cols] · v[cols] (+ b)
template <typename T>
void matvec(const T* w, const T* b, const T* v, int64_t rows, int64_t cols, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    Acc s = 0;
    const T* wr = w + r * cols;
    for (int64_t c = 0; c < cols; ++c) s += Acc(wr[c]) * Acc(v[c]);
    if (b) s += Acc(b[r]);
    out[r] = T(s);
  }
}

// Hidden activation (after the hidden dropout) of one token from its pre-activations.
template <typename T>
void hidden_from_z(const Config& cfg, const T* z1, const T* zg, int64_t position,
                   const DropoutState& drop, T* h) {
  const nn::Unit u = nn::unit_of(cfg.activation);
  const bool gated = is_gated(cfg.activation);
  const auto rule = nn::DropoutRule::make(drop.training ? cfg.dropout_hidden : 0.0f);
  for (int64_t j = 0; j < cfg.d_ff; ++j) {
    T v = gated ? T(Acc(nn::act(u, zg[j])) * Acc(z1[j])) : nn::act(u, z1[j]);
    if (rule.active()) {
      v = T(Acc(v) * Acc(rule.factor(drop.seed, nn::Stream::dropout_hidden, uint64_t(position * cfg.d_ff + j))));
    }
    h[j] = v;
  }
}

}  // namespace

template <typename T>
void forward(const Config& cfg, const Params<T>& p, const T* x, int64_t n, const int64_t* pos,
             const DropoutState& drop, T* y, const Saved<T>* saved) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  const bool gated = is_gated(cfg.activation);
  const auto out_rule = nn::DropoutRule::make(drop.training ? cfg.dropout_output : 0.0f);
  std::vector<T> u(d), xhat(d), z1(F), zg(gated ? F : 0), h(F), o(d), s(d);
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * d;
    T* yi = y + i * d;
    T mean = 0, rstd = 0;
    // 1. input of the FFN: x, or Norm(x) for pre-LN
    const T* in = xi;
    if (cfg.norm == NormPlacement::pre) {
      norm_stats(cfg.norm_type, xi, d, cfg.eps, xhat.data(), mean, rstd);
      norm_apply(xhat.data(), p.gamma, p.beta, d, u.data());
      in = u.data();
    }
    // 2. z1 = W1·in + b1, zg = Wg·in + bg, h = dropout(act(...))
    matvec(p.w1, p.b1, in, F, d, z1.data());
    if (gated) matvec(p.wg, p.bg, in, F, d, zg.data());
    hidden_from_z(cfg, z1.data(), zg.data(), pos[i], drop, h.data());
    // 3. o = dropout(W2·h + b2)
    matvec(p.w2, p.b2, h.data(), d, F, o.data());
    if (out_rule.active()) {
      for (int64_t j = 0; j < d; ++j)
        o[j] = T(Acc(o[j]) * Acc(out_rule.factor(drop.seed, nn::Stream::dropout_output, uint64_t(pos[i] * d + j))));
    }
    // 4. residual and norm
    switch (cfg.norm) {
      case NormPlacement::none:
        for (int64_t j = 0; j < d; ++j) yi[j] = o[j];
        break;
      case NormPlacement::pre:
        for (int64_t j = 0; j < d; ++j) yi[j] = T(Acc(xi[j]) + Acc(o[j]));
        break;
      case NormPlacement::post:
        for (int64_t j = 0; j < d; ++j) s[j] = T(Acc(xi[j]) + Acc(o[j]));
        norm_stats(cfg.norm_type, s.data(), d, cfg.eps, xhat.data(), mean, rstd);
        norm_apply(xhat.data(), p.gamma, p.beta, d, yi);
        break;
    }
    if (saved) {
      for (int64_t j = 0; j < F; ++j) saved->z1[i * F + j] = z1[j];
      if (gated)
        for (int64_t j = 0; j < F; ++j) saved->zg[i * F + j] = zg[j];
      if (saved->mean) saved->mean[i] = mean;
      if (saved->rstd) saved->rstd[i] = rstd;
      if (cfg.norm == NormPlacement::post)
        for (int64_t j = 0; j < d; ++j) saved->xhat[i * d + j] = xhat[j];
    }
  }
}

template <typename T>
void backward(const Config& cfg, const Params<T>& p, const T* x, int64_t n, const int64_t* pos,
              const DropoutState& drop, const Saved<T>& saved, const T* dy, T* dx,
              const Grads<T>& g) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  const bool gated = is_gated(cfg.activation);
  const bool has_norm = cfg.norm != NormPlacement::none;
  const nn::Unit unit = nn::unit_of(cfg.activation);
  const auto hid_rule = nn::DropoutRule::make(drop.training ? cfg.dropout_hidden : 0.0f);
  const auto out_rule = nn::DropoutRule::make(drop.training ? cfg.dropout_output : 0.0f);

  // Gradient sums over tokens, in double, rounded once at the end.
  std::vector<Acc> gw1(F * d, 0), gb1(F, 0), gwg(gated ? F * d : 0, 0), gbg(gated ? F : 0, 0);
  std::vector<Acc> gw2(d * F, 0), gb2(d, 0), ggamma(has_norm ? d : 0, 0), gbeta(has_norm ? d : 0, 0);
  std::vector<T> u(d), xhat(d), h(F), dout(d), dres(d), dh(F), dz1(F), dzg(gated ? F : 0), du(d), dnorm(d);

  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * d;
    const T* dyi = dy + i * d;
    T* dxi = dx + i * d;
    // 1. through the wrapper: dres = dL/dx via the residual, dout = dL/d(dropout(o))
    switch (cfg.norm) {
      case NormPlacement::none:
        for (int64_t j = 0; j < d; ++j) { dout[j] = dyi[j]; dres[j] = 0; }
        break;
      case NormPlacement::pre:
        for (int64_t j = 0; j < d; ++j) { dout[j] = dyi[j]; dres[j] = dyi[j]; }
        break;
      case NormPlacement::post:
        norm_backward(cfg.norm_type, dyi, saved.xhat + i * d, saved.rstd[i], d, p.gamma, ggamma.data(),
                      p.beta ? gbeta.data() : nullptr, dnorm.data());
        for (int64_t j = 0; j < d; ++j) { dout[j] = dnorm[j]; dres[j] = dnorm[j]; }
        break;
    }
    // 2. output dropout, then b2 and W2: dW2 += do ⊗ h, dh = W2ᵀ do
    if (out_rule.active()) {
      for (int64_t j = 0; j < d; ++j)
        dout[j] = T(Acc(dout[j]) * Acc(out_rule.factor(drop.seed, nn::Stream::dropout_output, uint64_t(pos[i] * d + j))));
    }
    const T* z1 = saved.z1 + i * F;
    const T* zg = gated ? saved.zg + i * F : nullptr;
    hidden_from_z(cfg, z1, zg, pos[i], drop, h.data());
    for (int64_t r = 0; r < d; ++r) {
      gb2[r] += Acc(dout[r]);
      for (int64_t c = 0; c < F; ++c) gw2[r * F + c] += Acc(dout[r]) * Acc(h[c]);
    }
    for (int64_t c = 0; c < F; ++c) {
      Acc s = 0;
      for (int64_t r = 0; r < d; ++r) s += Acc(p.w2[r * F + c]) * Acc(dout[r]);
      dh[c] = T(s);
    }
    // 3. hidden dropout and the activation
    for (int64_t j = 0; j < F; ++j) {
      Acc v = dh[j];
      if (hid_rule.active()) v *= Acc(hid_rule.factor(drop.seed, nn::Stream::dropout_hidden, uint64_t(pos[i] * F + j)));
      if (gated) {
        dz1[j] = T(v * Acc(nn::act(unit, zg[j])));
        dzg[j] = T(v * Acc(z1[j]) * Acc(nn::act_grad(unit, zg[j])));
      } else {
        dz1[j] = T(v * Acc(nn::act_grad(unit, z1[j])));
      }
    }
    // 4. the FFN input: in = x or Norm(x); dW1 += dz1 ⊗ in, du = W1ᵀ dz1 + Wgᵀ dzg
    const T* in = xi;
    if (cfg.norm == NormPlacement::pre) {
      // The normalized input again, from x and the saved statistics.
      for (int64_t j = 0; j < d; ++j) xhat[j] = T((Acc(xi[j]) - Acc(saved.mean[i])) * Acc(saved.rstd[i]));
      norm_apply(xhat.data(), p.gamma, p.beta, d, u.data());
      in = u.data();
    }
    for (int64_t r = 0; r < F; ++r) {
      gb1[r] += Acc(dz1[r]);
      for (int64_t c = 0; c < d; ++c) gw1[r * d + c] += Acc(dz1[r]) * Acc(in[c]);
      if (gated) {
        gbg[r] += Acc(dzg[r]);
        for (int64_t c = 0; c < d; ++c) gwg[r * d + c] += Acc(dzg[r]) * Acc(in[c]);
      }
    }
    for (int64_t c = 0; c < d; ++c) {
      Acc s = 0;
      for (int64_t r = 0; r < F; ++r) {
        s += Acc(p.w1[r * d + c]) * Acc(dz1[r]);
        if (gated) s += Acc(p.wg[r * d + c]) * Acc(dzg[r]);
      }
      du[c] = T(s);
    }
    // 5. dx = dres + (pre ? Norm'(du) : du)
    if (cfg.norm == NormPlacement::pre) {
      norm_backward(cfg.norm_type, du.data(), xhat.data(), saved.rstd[i], d, p.gamma, ggamma.data(),
                    p.beta ? gbeta.data() : nullptr, dnorm.data());
      for (int64_t j = 0; j < d; ++j) dxi[j] = T(Acc(dres[j]) + Acc(dnorm[j]));
    } else if (cfg.norm == NormPlacement::post) {
      for (int64_t j = 0; j < d; ++j) dxi[j] = T(Acc(dres[j]) + Acc(du[j]));
    } else {
      for (int64_t j = 0; j < d; ++j) dxi[j] = du[j];
    }
  }

  auto store = [](T* dst, const std::vector<Acc>& src) {
    if (dst)
      for (size_t k = 0; k < src.size(); ++k) dst[k] = T(src[k]);
  };
  store(g.w1, gw1);
  store(g.w2, gw2);
  store(g.b2, gb2);
  store(g.b1, gb1);
  store(g.wg, gwg);
  store(g.bg, gbg);
  store(g.gamma, ggamma);
  store(g.beta, gbeta);
}

template void forward<float>(const Config&, const Params<float>&, const float*, int64_t, const int64_t*,
                             const DropoutState&, float*, const Saved<float>*);
template void forward<double>(const Config&, const Params<double>&, const double*, int64_t, const int64_t*,
                              const DropoutState&, double*, const Saved<double>*);
template void backward<float>(const Config&, const Params<float>&, const float*, int64_t, const int64_t*,
                              const DropoutState&, const Saved<float>&, const float*, float*,
                              const Grads<float>&);
template void backward<double>(const Config&, const Params<double>&, const double*, int64_t, const int64_t*,
                               const DropoutState&, const Saved<double>&, const double*, double*,
                               const Grads<double>&);

}  // namespace ffn::reference
