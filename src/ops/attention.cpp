#include "ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "core/philox.hpp"
#include "core/thread_pool.hpp"

namespace ffn::nn {
namespace {

constexpr int64_t kQueryTile = 96;  // query rows per tile
constexpr int64_t kKeyTile = 256;   // keys per tile (a multiple of kPanel)

// A sequence's queries (rows base .. base + len) and its keys and values
// (rows kbase .. kbase + klen of K and V).
struct Seq {
  int64_t base, len, kbase, klen;
};

// C[m, n] (+)= A[m, k] · B on this thread, B in 16-column panels:
// B(p, j) = b[(j/16)·psb + p·ldb + j%16] (packed: ldb = 16; a row-major
// matrix read in place: ldb its row stride, psb = 16).
void mm_panels(const KernelConfig& kc, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, int64_t psb, float* c, int64_t ldc, bool accumulate) {
  GemmArgs g;
  g.m = m; g.n = n; g.k = k;
  g.a = a; g.rsa = lda; g.csa = 1;
  g.b = b; g.ldb = ldb; g.psb = psb;
  g.c = c; g.ldc = ldc;
  g.accumulate = accumulate;
  gemm_packed(kc.f32, g);
}

// C[m, n] (+)= A[m, k] · B, B packed panels (ldb = 16).
void mm_packed(const KernelConfig& kc, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t psb, float* c, int64_t ldc, bool accumulate) {
  mm_panels(kc, m, n, k, a, lda, b, kPanel, psb, c, ldc, accumulate);
}

// C[m, n] (+)= A · B with any A strides and a row-major B (ldb), on this thread.
void mm(const KernelConfig& kc, int64_t m, int64_t n, int64_t k, const float* a, int64_t rsa, int64_t csa,
        const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  GemmArgs g;
  g.m = m; g.n = n; g.k = k;
  g.a = a; g.rsa = rsa; g.csa = csa;
  g.b = b; g.ldb = ldb; g.psb = kPanel;
  g.c = c; g.ldc = ldc;
  g.accumulate = accumulate;
  gemm(kc.f32, g, 1);
}

std::vector<Seq> sequences(const AttentionShape& a) {
  check_attention_shape(a);
  std::vector<Seq> s;
  for (size_t b = 0; b + 1 < a.off.size(); ++b) s.push_back({a.off[b], a.q_len(b), a.keys_base(b), a.keys_len(b)});
  return s;
}

// Keys a query at local position s may see: all of its sequence's, or (causal)
// those up to its position, the queries being the last q.len of q.klen.
int64_t visible(const AttentionShape& a, const Seq& q, int64_t s) {
  const int64_t p = q.klen - q.len + s;
  return a.causal ? std::min(q.klen, p + 1) : a.local > 0 ? std::min(q.klen, p + a.local + 1) : q.klen;
}

}  // namespace

void attention_forward(const Context& cx, const AttentionShape& a, const AttentionInput<float>& in, float* ctx,
                       float* lse) {
  const KernelConfig& kc = cx.kernels();
  const int threads = cx.threads();
  const int64_t d = a.d, H = a.heads, dh = d / H;
  const float scale = a.scale > 0 ? a.scale : float(1.0 / std::sqrt(double(dh)));
  // With a soft-cap the scores are scaled and capped before the softmax step, which then scales by 1.
  // So are they with a relative position bias: s·scale + bias.
  const float cap = a.softcap, step_scale = cap > 0 || a.rel_bias ? 1.0f : scale;
  const auto rule = DropoutRule::make(a.training ? a.dropout : 0.0f);
  const std::vector<Seq> seqs = sequences(a);
  // A key tile must lie in one page: pages of whole tiles, or sequences of one page.
  if (a.kv_pages && a.kv_page % kKeyTile != 0)
    for (const Seq& q : seqs)
      if (q.klen > a.kv_page || a.kv_page % kPanel != 0)
        throw Error("attention: a sequence of " + std::to_string(q.klen) + " keys in pages of " +
                    std::to_string(a.kv_page) + " positions; the fast path needs pages of a multiple of " +
                    std::to_string(kKeyTile) + " or sequences of one page (of a multiple of " + std::to_string(kPanel) +
                    ")");

  // Units: (sequence, head, query tile), in that order.
  struct Unit { int64_t b, h, s0; };
  std::vector<Unit> units;
  for (size_t b = 0; b < seqs.size(); ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s0 = 0; s0 < seqs[b].len; s0 += kQueryTile) units.push_back({int64_t(b), h, s0});
  if (units.empty()) return;

  // Each thread's scratch, made when the thread takes its first unit; it keeps
  // the K panels of the (sequence, head) it did last.
  struct Scratch {
    std::vector<float> kp, sbuf, o, mx, sum;
    int64_t packed_b = -1, packed_col = -1;
  };
  const int nt = int(std::min<int64_t>(threads, int64_t(units.size())));
  std::vector<Scratch> scratch(static_cast<size_t>(std::max(nt, 1)));
  const int64_t ldo = panels(dh) * kPanel;
  parallel_units(nt, int64_t(units.size()), [&](int64_t u, int slot) {
      Scratch& t = scratch[size_t(slot)];
      if (t.sbuf.empty()) {
        t.sbuf.resize(size_t(kQueryTile * kKeyTile));
        t.o.resize(size_t(kQueryTile * ldo));
        t.mx.resize(size_t(kQueryTile));
        t.sum.resize(size_t(kQueryTile));
      }
      std::vector<float>&kp = t.kp, &sbuf = t.sbuf, &o = t.o, &mx = t.mx, &sum = t.sum;
      int64_t &packed_b = t.packed_b, &packed_col = t.packed_col;
      const auto [b, h, s0] = units[size_t(u)];
      const Seq& sq = seqs[size_t(b)];
      const int64_t col = a.kv_column(h);  // its key/value head's columns (grouped-query: shared by heads)
      if (b != packed_b || col != packed_col) {  // this thread's copy of the head's K panels
        kp.resize(size_t(panels(sq.klen) * kPanel * dh));
        if (a.kv_pages) {  // page by page (a page is whole panels: the same panels)
          for (int64_t j0 = 0; j0 < sq.klen; j0 += a.kv_page)
            pack_rows_as_panels(in.k + a.key_row(size_t(b), j0) * in.ldkv + col, in.ldkv,
                                std::min(a.kv_page, sq.klen - j0), dh, kp.data() + j0 * dh);
        } else {
          pack_rows_as_panels(in.k + sq.kbase * in.ldkv + col, in.ldkv, sq.klen, dh, kp.data());
        }
        packed_b = b;
        packed_col = col;
      }
      // V is read in place: its rows are B's rows (ldb = the row stride, 16-column panels side by side);
      // a key tile's rows lie in one page.
      const size_t seq = size_t(b);  // (a structured binding: not captured by clang before C++20's P1091)
      const auto v_rows = [&](int64_t j0) { return in.v + a.key_row(seq, j0) * in.ldkv + col; };
      const int64_t rows = std::min(kQueryTile, sq.len - s0);
      const int64_t keys = visible(a, sq, s0 + rows - 1);  // keys any row of the tile sees
      // A sliding or local window: the tiles before the first row's first key are no row's (tiles still count from 0).
      const int64_t from = a.windowed() ? (a.first_visible(seq, s0) / kKeyTile) * kKeyTile : 0;
      const float* q = in.q + (sq.base + s0) * in.ldq + h * dh;
      std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(o.begin(), o.begin() + rows * ldo, 0.0f);
      for (int64_t j0 = from; j0 < keys; j0 += kKeyTile) {
        const int64_t kn = std::min(kKeyTile, keys - j0);
        mm_packed(kc, rows, kn, dh, q, in.ldq, kp.data() + (j0 / kPanel) * dh * kPanel, dh * kPanel, sbuf.data(),
                  kKeyTile, false);
        for (int64_t r = 0; r < rows; ++r) {
          float* srow = sbuf.data() + r * kKeyTile;
          const int64_t lim = std::clamp<int64_t>(visible(a, sq, s0 + r) - j0, 0, kn);
          // keys lo .. lim - 1 of the tile are the row's (lo > 0: before them, outside its window)
          const int64_t lo = a.windowed() ? std::clamp<int64_t>(a.first_visible(seq, s0 + r) - j0, 0, lim) : 0;
          if (a.rel_bias) {  // as transformers' MPNet: s·scale, then + bias
            const int64_t p = sq.klen - sq.len + s0 + r;
            for (int64_t j = lo; j < lim; ++j) srow[j] = srow[j] * scale + a.relative_bias(h, p, j0 + j);
            if (cap > 0)
              for (int64_t j = lo; j < lim; ++j) srow[j] = std::tanh(srow[j] / cap) * cap;
          } else if (cap > 0) {  // as transformers: (s·scale) / c, tanh, × c
            for (int64_t j = lo; j < lim; ++j) srow[j] = std::tanh(srow[j] * scale / cap) * cap;
          }
          const float alpha =
              lim > lo ? kc.softmax_step(srow + lo, lim - lo, step_scale, &mx[size_t(r)], &sum[size_t(r)]) : 1.0f;
          std::fill(srow, srow + lo, 0.0f);
          std::fill(srow + lim, srow + kn, 0.0f);
          if (rule.active()) {
            const uint64_t row = uint64_t(((sq.base + s0 + r) * H + h) * a.S + j0);
            for (int64_t j = 0; j < lim; ++j) srow[j] *= rule.factor(a.seed, Stream::attention, row + uint64_t(j));
          }
          if (alpha != 1.0f)
            for (int64_t c = 0; c < dh; ++c) o[size_t(r * ldo + c)] *= alpha;
        }
        mm_panels(kc, rows, dh, kn, sbuf.data(), kKeyTile, v_rows(j0), in.ldkv, kPanel, o.data(), ldo, true);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = sq.base + s0 + r;
        const float inv = 1.0f / sum[size_t(r)];
        for (int64_t c = 0; c < dh; ++c) ctx[i * d + h * dh + c] = o[size_t(r * ldo + c)] * inv;
        lse[i * H + h] = mx[size_t(r)] + std::log(sum[size_t(r)]);
      }
  });
}

// Per (sequence, head), key tiles outer and query tiles inner (FlashAttention-2's
// backward order): dK and dV of a key tile are finished before the next, dQ
// accumulates over key tiles in a [len, dh] buffer.
//   P = e^(S·scale − lse),  P̃ = P ∘ Z,  dV += P̃ᵀ dO,  dP = Z ∘ (dO Vᵀ),
//   dS = P ∘ (dP − D) · scale with D = rowsum(dO ∘ O),  dQ += dS K,  dK += dSᵀ Q.
void attention_backward(const Context& cx, const AttentionShape& a, const AttentionInput<float>& in, const float* ctx,
                        const float* lse, const float* dctx, const AttentionGrad<float>& g) {
  const KernelConfig& kc = cx.kernels();
  const int threads = cx.threads();
  const int64_t d = a.d, H = a.heads, dh = d / H, ldq = in.ldq, ldkv = in.ldkv;
  const float scale = float(1.0 / std::sqrt(double(dh)));
  if (a.kv_heads > 0 && a.kv_heads != a.heads) throw Error("attention backward: grouped-query attention is inference only");
  const auto rule = DropoutRule::make(a.training ? a.dropout : 0.0f);
  const std::vector<Seq> seqs = sequences(a);
  struct Unit { int64_t b, h; };
  std::vector<Unit> units;
  for (size_t b = 0; b < seqs.size(); ++b)
    for (int64_t h = 0; h < H; ++h)
      if (seqs[b].len > 0 || seqs[b].klen > 0) units.push_back({int64_t(b), h});
  if (units.empty()) return;

  struct Scratch {
    std::vector<float> kp, vp, dq, D, p, dp, dk, dv;
  };
  const int nt = int(std::min<int64_t>(threads, int64_t(units.size())));
  std::vector<Scratch> scratch(static_cast<size_t>(std::max(nt, 1)));
  parallel_units(nt, int64_t(units.size()), [&](int64_t u, int slot) {
      Scratch& t = scratch[size_t(slot)];
      if (t.p.empty()) {
        t.p.resize(size_t(kQueryTile * kKeyTile));
        t.dp.resize(size_t(kQueryTile * kKeyTile));
        t.dk.resize(size_t(kKeyTile * dh));
        t.dv.resize(size_t(kKeyTile * dh));
      }
      std::vector<float>&kp = t.kp, &vp = t.vp, &dq = t.dq, &D = t.D, &p = t.p, &dp = t.dp, &dk = t.dk, &dv = t.dv;
      const auto [b, h] = units[size_t(u)];
      const Seq& sq = seqs[size_t(b)];
      const float* Q = in.q + sq.base * ldq + h * dh;
      const float* K = in.k + sq.kbase * ldkv + h * dh;
      const float* V = in.v + sq.kbase * ldkv + h * dh;
      const float* dO = dctx + sq.base * d + h * dh;
      const int64_t shift = sq.klen - sq.len;  // causal: query s sees keys up to shift + s
      kp.resize(size_t(panels(sq.klen) * kPanel * dh));
      vp.resize(size_t(panels(sq.klen) * kPanel * dh));
      pack_rows_as_panels(K, ldkv, sq.klen, dh, kp.data());
      pack_rows_as_panels(V, ldkv, sq.klen, dh, vp.data());  // Vᵀ panels, for dO·Vᵀ
      dq.assign(size_t(sq.len * dh), 0.0f);
      D.resize(size_t(sq.len));
      for (int64_t s = 0; s < sq.len; ++s) {
        float acc = 0.0f;
        for (int64_t c = 0; c < dh; ++c) acc += dO[s * d + c] * ctx[(sq.base + s) * d + h * dh + c];
        D[size_t(s)] = acc;
      }
      for (int64_t j0 = 0; j0 < sq.klen; j0 += kKeyTile) {
        const int64_t kn = std::min(kKeyTile, sq.klen - j0);
        std::fill(dk.begin(), dk.end(), 0.0f);
        std::fill(dv.begin(), dv.end(), 0.0f);
        // Earlier queries see none of these keys.
        const int64_t first = a.causal ? std::max<int64_t>(0, j0 - shift) / kQueryTile * kQueryTile : 0;
        for (int64_t s0 = first; s0 < sq.len; s0 += kQueryTile) {
          const int64_t rows = std::min(kQueryTile, sq.len - s0);
          mm_packed(kc, rows, kn, dh, Q + s0 * ldq, ldq, kp.data() + (j0 / kPanel) * dh * kPanel, dh * kPanel,
                    p.data(), kKeyTile, false);
          mm_packed(kc, rows, kn, dh, dO + s0 * d, d, vp.data() + (j0 / kPanel) * dh * kPanel, dh * kPanel,
                    dp.data(), kKeyTile, false);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = sq.base + s0 + r;
            float* prow = p.data() + r * kKeyTile;
            float* dprow = dp.data() + r * kKeyTile;
            const int64_t lim = std::clamp<int64_t>(visible(a, sq, s0 + r) - j0, 0, kn);
            kc.exp_rows(prow, lim, scale, lse[i * H + h], prow);
            std::fill(prow + lim, prow + kn, 0.0f);
            const float Di = D[size_t(s0 + r)];
            if (rule.active()) {
              const uint64_t row = uint64_t((i * H + h) * a.S + j0);
              for (int64_t j = 0; j < lim; ++j) {
                const float z = rule.factor(a.seed, Stream::attention, row + uint64_t(j));
                const float pj = prow[j];
                dprow[j] = pj * (z * dprow[j] - Di) * scale;
                prow[j] = pj * z;  // P̃ for dV
              }
            } else {
              for (int64_t j = 0; j < lim; ++j) dprow[j] = prow[j] * (dprow[j] - Di) * scale;
            }
            std::fill(dprow + lim, dprow + kn, 0.0f);
          }
          // dV[kn, dh] += P̃ᵀ dO ; dK[kn, dh] += dSᵀ Q ; dQ[rows, dh] += dS K
          mm(kc, kn, dh, rows, p.data(), 1, kKeyTile, dO + s0 * d, d, dv.data(), dh, true);
          mm(kc, kn, dh, rows, dp.data(), 1, kKeyTile, Q + s0 * ldq, ldq, dk.data(), dh, true);
          mm(kc, rows, dh, kn, dp.data(), kKeyTile, 1, K + j0 * ldkv, ldkv, dq.data() + s0 * dh, dh, true);
        }
        for (int64_t j = 0; j < kn; ++j)
          for (int64_t c = 0; c < dh; ++c) {
            g.dk[(sq.kbase + j0 + j) * g.ldkv + h * dh + c] = dk[size_t(j * dh + c)];
            g.dv[(sq.kbase + j0 + j) * g.ldkv + h * dh + c] = dv[size_t(j * dh + c)];
          }
      }
      for (int64_t s = 0; s < sq.len; ++s)
        for (int64_t c = 0; c < dh; ++c) g.dq[(sq.base + s) * g.ldq + h * dh + c] = dq[size_t(s * dh + c)];
  });
}

}  // namespace ffn::nn

namespace ffn {

void self_attention_forward(const float* qkv, float* ctx, float* lse, int64_t d_model, int64_t heads, int64_t batch,
                            int64_t seq, bool causal, int threads, Isa isa) {
  nn::AttentionShape as;
  as.d = d_model;
  as.heads = heads;
  as.S = seq;
  as.causal = causal;
  as.off = {0};
  for (int64_t b = 0; b < batch; ++b) as.off.push_back(as.off.back() + seq);
  nn::attention_forward(nn::Context(isa, threads), as, qkv, ctx, lse);
}

}  // namespace ffn
