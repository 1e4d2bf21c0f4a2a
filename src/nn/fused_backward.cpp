// The fast backward (see fused_forward.hpp): the four products of backward
// are nn::gemm calls, everything else is row-wise (tokens split over threads)
// or a column sum over tokens (columns split over threads, tokens summed in
// order). No result depends on the thread count.
//
//   dO  = dropout_out'(dY or Norm'(dY))        db2 = Σ_t dO
//   dH  = dO · W2                              dW2 = dOᵀ · H
//   dZ1 = dH ⊙ mask ⊙ act'(Z1)  (gated: dZ1 = dH ⊙ mask ⊙ act(Zg), dZg = dH ⊙ mask ⊙ Z1 ⊙ act'(Zg))
//   db1 = Σ_t dZ1                              dW1 = dZ1ᵀ · In
//   dIn = dZ1 · W1 (+ dZg · Wg)                dX  = residual + (pre ? Norm'(dIn) : dIn)
#include <omp.h>

#include <algorithm>
#include <span>
#include <vector>

#include "nn/activation.hpp"
#include "nn/buffer_pool.hpp"
#include "nn/fused_forward.hpp"
#include "nn/isa.hpp"
#include "nn/kernel_config.hpp"
#include "nn/philox.hpp"

namespace ffn::nn {
namespace {

// Rows [0, rows) split over threads; fn(r0, r1).
template <typename Fn>
void parallel_rows(int64_t rows, int threads, int64_t row_cost, Fn fn) {
  const int64_t useful = std::max<int64_t>(1, rows * row_cost / 16384);
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>({threads, rows, useful})));
  if (nt == 1) {
    fn(int64_t(0), rows);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
    fn(rows * t / k, rows * (t + 1) / k);
  }
}

// out[j] = Σ_t a[t, j] (· b[t, j] when b is given), t in order.
void column_sum(const float* a, const float* b, int64_t rows, int64_t cols, float* out, int threads) {
  if (!out) return;
  parallel_rows(cols, threads, rows, [&](int64_t j0, int64_t j1) {
    std::fill(out + j0, out + j1, 0.0f);
    for (int64_t t = 0; t < rows; ++t) {
      const float* at = a + t * cols;
      if (b) {
        const float* bt = b + t * cols;
        for (int64_t j = j0; j < j1; ++j) out[j] += at[j] * bt[j];
      } else {
        for (int64_t j = j0; j < j1; ++j) out[j] += at[j];
      }
    }
  });
}

// C[m, n] (+)= Aᵀ·B for row-major A [k, m] and B [k, n] (a weight gradient:
// k = tokens, summed in token order).
GemmArgs at_b(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  GemmArgs p;
  p.m = m; p.n = n; p.k = k;
  p.a = a; p.rsa = 1; p.csa = m;
  p.b = b; p.ldb = n; p.psb = kPanel;
  p.c = c; p.ldc = n;
  return p;
}

// C[m, n] (+)= A·B for row-major A [m, k] and B packed as panels of [k, n].
GemmArgs a_bpacked(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, bool accumulate) {
  GemmArgs p;
  p.m = m; p.n = n; p.k = k;
  p.a = a; p.rsa = k; p.csa = 1;
  p.b = b; p.ldb = kPanel; p.psb = k * kPanel;
  p.c = c; p.ldc = n;
  p.accumulate = accumulate;
  return p;
}

// The token slices of the weight gradients (RunOptions::token_slices): each
// sum over tokens is formed per slice, in token order, and the slices' sums
// are added over their binary tree (split in the middle). A call given a
// subtree's slices so computes that subtree's sum bit for bit.
struct Slices {
  std::span<const int64_t> bounds;  // s_0 = 0 <= ... <= s_k = rows; empty: one slice
  int64_t rows = 0;
  bool given() const { return !bounds.empty(); }
  int64_t count() const { return given() ? int64_t(bounds.size()) - 1 : 1; }
  int64_t begin(int64_t i) const { return given() ? bounds[size_t(i)] : 0; }
  int64_t size(int64_t i) const { return given() ? bounds[size_t(i) + 1] - bounds[size_t(i)] : rows; }
  // Partial sums held at once below the root: the tree's depth.
  int depth() const {
    int l = 0;
    for (int64_t c = count(); c > 1; c = (c + 1) / 2) ++l;
    return l;
  }
  // leaf(i, dst) writes slice i's sum into dst; add(dst, src) adds two
  // partial sums. Visits the tree: left subtree into dst, right into a
  // temporary of its level, then dst += temporary.
  template <typename Leaf, typename Add>
  void tree(float* dst, float* temporaries, size_t stride, Leaf&& leaf, Add&& add) const {
    auto visit = [&](auto& self, int64_t lo, int64_t hi, float* out, int level) -> void {
      if (hi - lo == 1) return leaf(lo, out);
      const int64_t mid = (lo + hi) / 2;
      self(self, lo, mid, out, level);
      float* right = temporaries + size_t(level) * stride;
      self(self, mid, hi, right, level + 1);
      add(out, right);
    };
    visit(visit, 0, count(), dst, 0);
  }
};

// out[j] = Σ_t a[t, j] (· b[t, j]) per slice, added over the slices' tree.
void column_sum(const float* a, const float* b, const Slices& sl, int64_t cols, float* out, int threads) {
  if (!out) return;
  if (!sl.given()) return column_sum(a, b, sl.rows, cols, out, threads);
  std::vector<float> temporaries(size_t(sl.depth() * cols));
  sl.tree(
      out, temporaries.data(), size_t(cols),
      [&](int64_t i, float* dst) {
        const int64_t r0 = sl.begin(i);
        column_sum(a + r0 * cols, b ? b + r0 * cols : nullptr, sl.size(i), cols, dst, threads);
      },
      [&](float* dst, const float* src) { add_rows(dst, src, cols); });
}

// A weight gradient C[m, n] = Σ_t A[t, :]ᵀ · B[t, :] (A [rows, m], B [rows,
// n] row-major). With slices, C is formed in tiles, each on one thread:
// every slice's product of the tile and the tree's additions stay in cache,
// and C is written once. Tiles change no bit (each C element is one chain
// per slice, gemm.hpp); their size trades the slices' extra stores (which
// dominate when slices are short) against the operands packed again per
// tile (when they are long): measured at 512 → 2048, 2 threads, fwd + bwd
// with 4 slices against one sum: +30 % at T = 64, +9 % at T = 256 and +2 %
// at T = 4096 (bench/results/2026-11-23-data-parallel.md).
void weight_gradient(const F32Gemm& kernel, int64_t m, int64_t n, const float* a, const float* b, float* c,
                     const Slices& sl, int threads) {
  if (!c) return;
  if (!sl.given()) return gemm(kernel, at_b(m, n, sl.rows, a, b, c), threads);
  int64_t shortest = sl.rows;
  for (int64_t i = 0; i < sl.count(); ++i) shortest = std::min(shortest, sl.size(i));
  const int64_t TM = shortest >= 256 ? 512 : 256, TN = shortest >= 1024 ? 1024 : shortest >= 256 ? 512 : 256;
  const int64_t tn = (n + TN - 1) / TN, tiles = (m + TM - 1) / TM * tn;
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(threads, tiles)));
#pragma omp parallel num_threads(nt)
  {
    // From the buffer pool, not zero-filled: every element read is written first.
    const size_t bytes = size_t(sl.depth() * TM * TN) * sizeof(float);
    float* temporaries = static_cast<float*>(pool_take(bytes));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i0 = t / tn * TM, j0 = t % tn * TN;
      const int64_t mb = std::min(TM, m - i0), nb = std::min(TN, n - j0);
      float* tile = c + i0 * n + j0;
      sl.tree(
          tile, temporaries, size_t(TM * TN),
          [&](int64_t i, float* dst) {
            const int64_t r0 = sl.begin(i);
            GemmArgs p = at_b(mb, nb, sl.size(i), a + r0 * m + i0, b + r0 * n + j0, dst);
            p.csa = m, p.ldb = n, p.ldc = dst == tile ? n : nb;
            gemm(kernel, p, 1);
          },
          [&](float* dst, const float* src) {
            const int64_t ld = dst == tile ? n : nb;
            for (int64_t r = 0; r < mb; ++r) add_rows(dst + r * ld, src + r * nb, nb);
          });
    }
    pool_give(temporaries, bytes);
  }
}

// dv[d] from dout[d] through out = γ·xhat + β:
//   g = dout·γ; LayerNorm: dv = rstd (g − mean(g) − xhat·mean(g·xhat)); RMSNorm: without mean(g).
void norm_backward_row(NormType type, const float* dout, const float* xhat, float rstd, int64_t d,
                       const float* gamma, float* dv) {
  float mean_g = 0.0f, mean_gx = 0.0f;
  for (int64_t j = 0; j < d; ++j) {
    const float g = dout[j] * gamma[j];
    mean_g += g;
    mean_gx += g * xhat[j];
  }
  mean_g = type == NormType::rmsnorm ? 0.0f : mean_g / float(d);
  mean_gx /= float(d);
  for (int64_t j = 0; j < d; ++j) dv[j] = rstd * (dout[j] * gamma[j] - mean_g - xhat[j] * mean_gx);
}

// Scratch buffers of one backward call, never zero-filled (every element is
// written before it is read), taken from the process's buffer pool
// (nn/buffer_pool.hpp) and given back when the call ends, also when an
// exception leaves: repeated calls (training steps) reuse the pages instead
// of faulting in fresh ones (at T = 4096 that was 8 % of fwd+bwd), and a
// process with many threads keeps the pool's bound, not a set per thread.
class Scratch {
 public:
  enum Slot { kDv, kDout, kH, kDz1, kDzg, kIn, kXhat, kDin, kSlots };
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    for (int i = 0; i < kSlots; ++i) pool_give(buf_[i], size_[i] * sizeof(float));
  }
  float* get(Slot s, size_t n) {
    pool_give(buf_[s], size_[s] * sizeof(float));
    buf_[s] = nullptr;
    size_[s] = 0;
    if (n == 0) return nullptr;
    buf_[s] = static_cast<float*>(pool_take(n * sizeof(float)));
    size_[s] = n;
    return buf_[s];
  }

 private:
  float* buf_[kSlots] = {};
  size_t size_[kSlots] = {};
};

}  // namespace

size_t backward_scratch_bytes() { return pool_bytes(); }

void fused_backward(const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x, int64_t n,
                    const int64_t* pos, bool training, uint64_t seed, const FusedSaved& saved, const float* dy,
                    float* dx, const FusedGrads& g, int threads, Isa isa, const FusedSplit& split,
                    std::span<const int64_t> token_slices) {
  const F32Gemm& kernel = kernel_config(resolve_isa(isa)).f32;
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  const bool gated = is_gated(cfg.activation);
  const Unit unit = unit_of(cfg.activation);
  const DropoutRule hid_rule = DropoutRule::make(training ? cfg.dropout_hidden : 0.0f);
  const DropoutRule out_rule = DropoutRule::make(training ? cfg.dropout_output : 0.0f);
  const float* gamma = w.norm_weight.empty() ? nullptr : w.norm_weight.data();
  const float* beta = w.norm_bias.empty() ? nullptr : w.norm_bias.data();
  // This layer's shards of d_ff: hidden dropout keys from the global index;
  // dIn summed per shard over the shards' tree (as the forward's W2 products).
  const DffShards& sh = split.shards;
  const int64_t F_global = sh.d_ff > 0 ? sh.d_ff : F;
  const int64_t offset = DffShards::units(F_global, sh.count, sh.first, sh.last).first;
  auto hidden_key = [&](int64_t t) { return uint64_t(pos[t] * F_global + offset); };
  const Slices sl{token_slices, n};
  Scratch scratch;

  // dv = dL/d(x + o) through the post norm; In = Norm(x) again for pre-LN (xhat kept).
  auto post_dv = [&](float* dv) {
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        norm_backward_row(cfg.norm_type, dy + t * d, saved.xhat + t * d, saved.rstd[t], d, gamma, dv + t * d);
    });
  };
  auto pre_input = [&](float* in_buf, float* xhat) {
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t j = 0; j < d; ++j) {
          const float xh = (x[t * d + j] - saved.mean[t]) * saved.rstd[t];
          xhat[t * d + j] = xh;
          if (in_buf) in_buf[t * d + j] = xh * gamma[j] + (beta ? beta[j] : 0.0f);
        }
    });
  };
  // 7. dX (and the pre norm's γ, β) from dIn summed over every shard.
  auto finish = [&](const float* din, const float* dv, const float* xhat) {
    if (cfg.norm == NormPlacement::pre) {
      column_sum(din, xhat, sl, d, g.gamma, threads);
      column_sum(din, nullptr, sl, d, g.beta, threads);
    }
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* dxt = dx + t * d;
        const float* dit = din + t * d;
        switch (cfg.norm) {
          case NormPlacement::none:
            std::copy(dit, dit + d, dxt);
            break;
          case NormPlacement::post:
            for (int64_t j = 0; j < d; ++j) dxt[j] = dv[t * d + j] + dit[j];
            break;
          case NormPlacement::pre:
            norm_backward_row(cfg.norm_type, dit, xhat + t * d, saved.rstd[t], d, gamma, dxt);
            for (int64_t j = 0; j < d; ++j) dxt[j] += dy[t * d + j];
            break;
        }
      }
    });
  };
  if (split.sum) {  // stage 2 alone: dIn summed over every shard (across ranks) is given
    float* dv = cfg.norm == NormPlacement::post ? scratch.get(Scratch::kDv, size_t(n * d)) : nullptr;
    float* xhat = cfg.norm == NormPlacement::pre ? scratch.get(Scratch::kXhat, size_t(n * d)) : nullptr;
    if (dv) post_dv(dv);
    if (xhat) pre_input(nullptr, xhat);
    finish(split.sum, dv, xhat);
    return;
  }
  const PackedWeights::Backward& bw = pw.backward(cfg, w);

  // 1. Through the norm (post) and the output dropout: dv = dL/d(x + o), dO.
  float* dv = scratch.get(Scratch::kDv, cfg.norm == NormPlacement::post ? size_t(n * d) : 0);
  float* dout = scratch.get(Scratch::kDout, size_t(n * d));
  if (cfg.norm == NormPlacement::post) {
    column_sum(dy, saved.xhat, sl, d, g.gamma, threads);
    column_sum(dy, nullptr, sl, d, g.beta, threads);
    post_dv(dv);
  }
  parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* src = cfg.norm == NormPlacement::post ? dv + t * d : dy + t * d;
      float* o = dout + t * d;
      if (out_rule.active()) {
        const uint64_t base = uint64_t(pos[t] * d);
        for (int64_t j = 0; j < d; ++j) o[j] = src[j] * out_rule.factor(seed, Stream::dropout_output, base + j);
      } else {
        std::copy(src, src + d, o);
      }
    }
  });
  column_sum(dout, nullptr, sl, d, g.b2, threads);

  // 2. H (the hidden activation after dropout) again from the saved pre-activations.
  float* h = scratch.get(Scratch::kH, size_t(n * F));
  float* dz1 = scratch.get(Scratch::kDz1, size_t(n * F));
  float* dzg = scratch.get(Scratch::kDzg, gated ? size_t(n * F) : 0);
  parallel_rows(n, threads, F, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* z1 = saved.z1 + t * F;
      const float* zg = gated ? saved.zg + t * F : nullptr;
      float* ht = h + t * F;
      if (gated)
        for (int64_t j = 0; j < F; ++j) ht[j] = act(unit, zg[j]) * z1[j];
      else if (unit == Unit::relu)
        for (int64_t j = 0; j < F; ++j) ht[j] = z1[j] < 0.0f ? 0.0f : z1[j];  // NaN stays NaN
      else
        for (int64_t j = 0; j < F; ++j) ht[j] = act(unit, z1[j]);
      if (hid_rule.active()) {
        const uint64_t base = hidden_key(t);
        for (int64_t j = 0; j < F; ++j) ht[j] *= hid_rule.factor(seed, Stream::dropout_hidden, base + j);
      }
    }
  });
  // 3. dW2 = dOᵀ · H;  dH = dO · W2 (into dz1).
  weight_gradient(kernel, d, F, dout, h, g.w2, sl, threads);
  gemm(kernel, a_bpacked(n, F, d, dout, bw.w2.data(), dz1, false), threads);

  // 4. Through the hidden dropout and the activation.
  parallel_rows(n, threads, F, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* z1 = saved.z1 + t * F;
      const float* zg = gated ? saved.zg + t * F : nullptr;
      float* a = dz1 + t * F;
      if (hid_rule.active()) {
        const uint64_t base = hidden_key(t);
        for (int64_t j = 0; j < F; ++j) a[j] *= hid_rule.factor(seed, Stream::dropout_hidden, base + j);
      }
      if (gated) {
        float* b = dzg + t * F;
        for (int64_t j = 0; j < F; ++j) {
          b[j] = a[j] * z1[j] * act_grad(unit, zg[j]);
          a[j] = a[j] * act(unit, zg[j]);
        }
      } else if (unit == Unit::relu) {
        for (int64_t j = 0; j < F; ++j) a[j] = z1[j] > 0.0f ? a[j] : 0.0f;
      } else {
        for (int64_t j = 0; j < F; ++j) a[j] *= act_grad(unit, z1[j]);
      }
    }
  });
  column_sum(dz1, nullptr, sl, F, g.b1, threads);
  if (gated) column_sum(dzg, nullptr, sl, F, g.bg, threads);

  // 5. The FFN input (x, or Norm(x) again for pre-LN); dW1 = dZ1ᵀ · In.
  float* in_buf = nullptr;
  float* xhat = nullptr;
  const float* in = x;
  if (cfg.norm == NormPlacement::pre) {
    in_buf = scratch.get(Scratch::kIn, size_t(n * d));
    xhat = scratch.get(Scratch::kXhat, size_t(n * d));
    pre_input(in_buf, xhat);
    in = in_buf;
  }
  weight_gradient(kernel, F, d, dz1, in, g.w1, sl, threads);
  if (gated) weight_gradient(kernel, F, d, dzg, in, g.wg, sl, threads);

  // 6. dIn = Σ over the layer's shards of dZ1[:, s] · W1[s, :] (+ dZg · Wg),
  // added over the shards' tree, as the forward adds their W2 products.
  const int64_t groups = sh.last - sh.first, gchunks = (F_global + kDffShardChunk - 1) / kDffShardChunk;
  const int64_t c0 = gchunks * sh.first / sh.count;
  auto unit_begin = [&](int64_t grp) {
    return std::min(F, (gchunks * (sh.first + grp) / sh.count - c0) * kDffShardChunk);
  };
  // Group 0 (the tree's result) straight into the caller's rows in stage 1.
  float* parts = scratch.get(Scratch::kDin, size_t((split.partial ? groups - 1 : groups) * n * d));
  auto part = [&](int64_t grp) {
    if (split.partial) return grp == 0 ? split.partial : parts + (grp - 1) * n * d;
    return parts + grp * n * d;
  };
  for (int64_t grp = 0; grp < groups; ++grp) {
    const int64_t u0 = unit_begin(grp), u1 = unit_begin(grp + 1);
    if (u0 == u1) {
      std::fill(part(grp), part(grp) + n * d, 0.0f);
      continue;
    }
    GemmArgs p = a_bpacked(n, d, u1 - u0, dz1 + u0, bw.w1.data() + u0 * kPanel, part(grp), false);
    p.rsa = F, p.psb = F * kPanel;
    gemm(kernel, p, threads);
    if (gated) {
      p.a = dzg + u0, p.b = bw.wg.data() + u0 * kPanel, p.accumulate = true;
      gemm(kernel, p, threads);
    }
  }
  auto tree = [&](auto& self, int64_t lo, int64_t hi) -> void {  // global shard indices
    if (hi - lo < 2) return;
    const int64_t mid = (lo + hi) / 2;
    self(self, lo, mid);
    self(self, mid, hi);
    float* a = part(lo - sh.first);
    const float* b = part(mid - sh.first);
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      add_rows(a + t0 * d, b + t0 * d, (t1 - t0) * d);
    });
  };
  tree(tree, sh.first, sh.last);
  if (split.partial) return;  // stage 1: this layer's shards' dIn is in the caller's rows, for the sum across ranks
  finish(part(0), dv, xhat);
}

}  // namespace ffn::nn
