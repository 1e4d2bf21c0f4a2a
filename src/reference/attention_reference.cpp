#include "reference/attention_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/philox.hpp"
#include "ffn/types.hpp"

namespace ffn::reference {

namespace {

using Acc = double;

// Probabilities P[j] (softmax of the scaled scores over the allowed keys) and
// the dropout factors Z[j] of query row `i` (local position s in sequence b)
// in head h; returns the number of keys it attends to.
template <typename T>
int64_t probabilities(const AttentionShape& a, const AttentionInput<T>& in, int64_t b, int64_t s, int64_t h,
                      std::vector<Acc>& P, std::vector<Acc>& Z, Acc* lse = nullptr) {
  const int64_t dh = a.d / a.heads;
  const int64_t i = a.off[size_t(b)] + s;
  const int64_t keys = a.visible(size_t(b), s), first = a.first_visible(size_t(b), s);
  const Acc scale = a.scale > 0 ? Acc(a.scale) : 1.0 / std::sqrt(Acc(dh));
  P.assign(size_t(keys), 0.0);
  Z.assign(size_t(keys), 1.0);
  const T* q = in.q + i * in.ldq + h * dh;
  Acc mx = -std::numeric_limits<Acc>::infinity();
  for (int64_t j = first; j < keys; ++j) {
    const T* k = in.k + a.key_row(size_t(b), j) * in.ldkv + a.kv_column(h);
    Acc dot = 0;
    for (int64_t c = 0; c < dh; ++c) dot += Acc(q[c]) * Acc(k[c]);
    P[size_t(j)] = dot * scale;
    if (a.rel_bias) P[size_t(j)] += Acc(a.relative_bias(h, a.keys_len(size_t(b)) - a.q_len(size_t(b)) + s, j));
    if (a.softcap > 0) P[size_t(j)] = Acc(a.softcap) * std::tanh(P[size_t(j)] / Acc(a.softcap));
    mx = std::max(mx, P[size_t(j)]);
  }
  Acc sum = 0;
  for (int64_t j = first; j < keys; ++j) sum += (P[size_t(j)] = std::exp(P[size_t(j)] - mx));
  for (int64_t j = first; j < keys; ++j) P[size_t(j)] /= sum;
  if (lse) *lse = mx + std::log(sum);
  const auto rule = nn::DropoutRule::make(a.training ? a.dropout : 0.0f);
  if (rule.active())
    for (int64_t j = 0; j < keys; ++j)
      Z[size_t(j)] = rule.factor(a.seed, nn::Stream::attention, uint64_t((i * a.heads + h) * a.S + j));
  return keys;
}

}  // namespace

template <typename T>
void attention_forward(const AttentionShape& a, const AttentionInput<T>& in, T* ctx, float* lse) {
  check_attention_shape(a);
  const int64_t d = a.d, dh = d / a.heads;
  std::vector<Acc> P, Z, o(static_cast<size_t>(dh));
  for (size_t b = 0; b + 1 < a.off.size(); ++b) {
    const int64_t base = a.off[b], len = a.q_len(b);
    for (int64_t s = 0; s < len; ++s)
      for (int64_t h = 0; h < a.heads; ++h) {
        Acc l = 0;
        const int64_t keys = probabilities(a, in, int64_t(b), s, h, P, Z, &l);
        if (lse) lse[(base + s) * a.heads + h] = float(l);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          const T* v = in.v + a.key_row(b, j) * in.ldkv + a.kv_column(h);
          const Acc w = P[size_t(j)] * Z[size_t(j)];
          for (int64_t c = 0; c < dh; ++c) o[size_t(c)] += w * Acc(v[c]);
        }
        for (int64_t c = 0; c < dh; ++c) ctx[(base + s) * d + h * dh + c] = T(o[size_t(c)]);
      }
  }
}

// With P the probabilities and Z the dropout factors of a query row,
//   ctx = Σ_j P_j Z_j v_j,   dP_j = Z_j (dctx · v_j),
//   dS_j = P_j (dP_j − Σ_l P_l dP_l)      (softmax backward),
//   dq = Σ_j dS_j k_j / √dh,  dk_j += dS_j q / √dh,  dv_j += P_j Z_j dctx.
// Each sequence's dK and dV are summed in double over its queries, then
// written; the key rows of a sequence are its own.
template <typename T>
void attention_backward(const AttentionShape& a, const AttentionInput<T>& in, const T* dctx, const AttentionGrad<T>& g) {
  check_attention_shape(a);
  if (a.kv_heads > 0 && a.kv_heads != a.heads) throw Error("attention backward: grouped-query attention is inference only");
  const int64_t d = a.d, dh = d / a.heads;
  const Acc scale = 1.0 / std::sqrt(Acc(dh));
  std::vector<Acc> dq(static_cast<size_t>(d)), dk, dv, P, Z, dP;
  for (size_t b = 0; b + 1 < a.off.size(); ++b) {
    const int64_t base = a.off[b], len = a.q_len(b), kb = a.keys_base(b), kl = a.keys_len(b);
    dk.assign(size_t(kl * d), 0.0);
    dv.assign(size_t(kl * d), 0.0);
    for (int64_t s = 0; s < len; ++s) {
      const int64_t i = base + s;
      std::fill(dq.begin(), dq.end(), 0.0);
      for (int64_t h = 0; h < a.heads; ++h) {
        const int64_t keys = probabilities(a, in, int64_t(b), s, h, P, Z);
        const T* gr = dctx + i * d + h * dh;
        dP.assign(size_t(keys), 0.0);
        Acc dot = 0;
        for (int64_t j = 0; j < keys; ++j) {
          const T* v = in.v + (kb + j) * in.ldkv + h * dh;
          Acc gv = 0;
          for (int64_t c = 0; c < dh; ++c) gv += Acc(gr[c]) * Acc(v[c]);
          dP[size_t(j)] = Z[size_t(j)] * gv;
          dot += P[size_t(j)] * dP[size_t(j)];
          Acc* dvj = dv.data() + j * d + h * dh;
          for (int64_t c = 0; c < dh; ++c) dvj[c] += P[size_t(j)] * Z[size_t(j)] * Acc(gr[c]);
        }
        const T* q = in.q + i * in.ldq + h * dh;
        for (int64_t j = 0; j < keys; ++j) {
          const Acc ds = P[size_t(j)] * (dP[size_t(j)] - dot) * scale;
          const T* k = in.k + (kb + j) * in.ldkv + h * dh;
          Acc* dkj = dk.data() + j * d + h * dh;
          for (int64_t c = 0; c < dh; ++c) {
            dq[size_t(h * dh + c)] += ds * Acc(k[c]);
            dkj[c] += ds * Acc(q[c]);
          }
        }
      }
      for (int64_t c = 0; c < d; ++c) g.dq[i * g.ldq + c] = T(dq[size_t(c)]);
    }
    for (int64_t j = 0; j < kl; ++j)
      for (int64_t c = 0; c < d; ++c) {
        g.dk[(kb + j) * g.ldkv + c] = T(dk[size_t(j * d + c)]);
        g.dv[(kb + j) * g.ldkv + c] = T(dv[size_t(j * d + c)]);
      }
  }
}

template void attention_forward<float>(const AttentionShape&, const AttentionInput<float>&, float*, float*);
template void attention_forward<double>(const AttentionShape&, const AttentionInput<double>&, double*, float*);
template void attention_backward<float>(const AttentionShape&, const AttentionInput<float>&, const float*,
                                        const AttentionGrad<float>&);
template void attention_backward<double>(const AttentionShape&, const AttentionInput<double>&, const double*,
                                         const AttentionGrad<double>&);

}  // namespace ffn::reference
