#include "reference/attention_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/philox.hpp"

namespace ffn::reference {
namespace {

using Acc = double;

// Probabilities P[j] (softmax of the scaled scores over the allowed keys) and
// the dropout factors Z[j] of query row `i` (local position s in sequence b)
// in head h; returns the number of keys it attends to.
template <typename T>
int64_t probabilities(const AttentionShape& a, const T* qkv, int64_t b, int64_t s, int64_t h,
                      std::vector<Acc>& P, std::vector<Acc>& Z, Acc* lse = nullptr) {
  const int64_t d = a.d, dh = d / a.heads, ld = 3 * d, base = a.off[size_t(b)];
  const int64_t len = a.off[size_t(b) + 1] - base, i = base + s;
  const int64_t keys = a.causal ? s + 1 : len;
  const Acc scale = 1.0 / std::sqrt(Acc(dh));
  P.assign(size_t(keys), 0.0);
  Z.assign(size_t(keys), 1.0);
  const T* q = qkv + i * ld + h * dh;
  Acc mx = -std::numeric_limits<Acc>::infinity();
  for (int64_t j = 0; j < keys; ++j) {
    const T* k = qkv + (base + j) * ld + d + h * dh;
    Acc dot = 0;
    for (int64_t c = 0; c < dh; ++c) dot += Acc(q[c]) * Acc(k[c]);
    P[size_t(j)] = dot * scale;
    mx = std::max(mx, P[size_t(j)]);
  }
  Acc sum = 0;
  for (int64_t j = 0; j < keys; ++j) sum += (P[size_t(j)] = std::exp(P[size_t(j)] - mx));
  for (int64_t j = 0; j < keys; ++j) P[size_t(j)] /= sum;
  if (lse) *lse = mx + std::log(sum);
  const auto rule = nn::DropoutRule::make(a.training ? a.dropout : 0.0f);
  if (rule.active())
    for (int64_t j = 0; j < keys; ++j)
      Z[size_t(j)] = rule.factor(a.seed, nn::Stream::attention, uint64_t((i * a.heads + h) * a.S + j));
  return keys;
}

}  // namespace

template <typename T>
void attention_forward(const AttentionShape& a, const T* qkv, T* ctx, float* lse) {
  const int64_t d = a.d, dh = d / a.heads, ld = 3 * d;
  std::vector<Acc> P, Z, o(static_cast<size_t>(dh));
  for (size_t b = 0; b + 1 < a.off.size(); ++b) {
    const int64_t base = a.off[b], len = a.off[b + 1] - base;
    for (int64_t s = 0; s < len; ++s)
      for (int64_t h = 0; h < a.heads; ++h) {
        Acc l = 0;
        const int64_t keys = probabilities(a, qkv, int64_t(b), s, h, P, Z, &l);
        if (lse) lse[(base + s) * a.heads + h] = float(l);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          const T* v = qkv + (base + j) * ld + 2 * d + h * dh;
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
template <typename T>
void attention_backward(const AttentionShape& a, const T* qkv, const T* dctx, T* dqkv) {
  const int64_t d = a.d, dh = d / a.heads, ld = 3 * d, n = a.rows();
  const Acc scale = 1.0 / std::sqrt(Acc(dh));
  std::vector<Acc> acc(size_t(n * ld), 0.0), P, Z, dP;
  for (size_t b = 0; b + 1 < a.off.size(); ++b) {
    const int64_t base = a.off[b], len = a.off[b + 1] - base;
    for (int64_t s = 0; s < len; ++s)
      for (int64_t h = 0; h < a.heads; ++h) {
        const int64_t i = base + s, keys = probabilities(a, qkv, int64_t(b), s, h, P, Z);
        const T* g = dctx + i * d + h * dh;
        dP.assign(size_t(keys), 0.0);
        Acc dot = 0;
        for (int64_t j = 0; j < keys; ++j) {
          const T* v = qkv + (base + j) * ld + 2 * d + h * dh;
          Acc gv = 0;
          for (int64_t c = 0; c < dh; ++c) gv += Acc(g[c]) * Acc(v[c]);
          dP[size_t(j)] = Z[size_t(j)] * gv;
          dot += P[size_t(j)] * dP[size_t(j)];
          Acc* dv = acc.data() + (base + j) * ld + 2 * d + h * dh;
          for (int64_t c = 0; c < dh; ++c) dv[c] += P[size_t(j)] * Z[size_t(j)] * Acc(g[c]);
        }
        const T* q = qkv + i * ld + h * dh;
        Acc* dq = acc.data() + i * ld + h * dh;
        for (int64_t j = 0; j < keys; ++j) {
          const Acc ds = P[size_t(j)] * (dP[size_t(j)] - dot) * scale;
          const T* k = qkv + (base + j) * ld + d + h * dh;
          Acc* dk = acc.data() + (base + j) * ld + d + h * dh;
          for (int64_t c = 0; c < dh; ++c) {
            dq[c] += ds * Acc(k[c]);
            dk[c] += ds * Acc(q[c]);
          }
        }
      }
  }
  for (int64_t e = 0; e < n * ld; ++e) dqkv[e] = T(acc[size_t(e)]);
}

template void attention_forward<float>(const AttentionShape&, const float*, float*, float*);
template void attention_forward<double>(const AttentionShape&, const double*, double*, float*);
template void attention_backward<float>(const AttentionShape&, const float*, const float*, float*);
template void attention_backward<double>(const AttentionShape&, const double*, const double*, double*);

}  // namespace ffn::reference
