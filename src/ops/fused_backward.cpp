// The fast backward (see fused_forward.hpp). The two products along the
// tokens (dH = dO · W2, dIn = dZ1 · W1) run fused per block of tokens, as the
// forward's: a shard's hidden units of dH, the activation's gradient and the
// shard's dIn while the block is in L2; the two weight gradients (sums over
// tokens) are nn::gemm calls whose large operands are written in the layouts
// the kernel reads (H and the input as B panels, dZ1 transposed), so only dO
// (A of dW2, [T, d_model]) is still transposed inside gemm. Everything else is row-wise (tokens split over
// threads) or a sum over tokens (in token order). No result depends on the
// thread count.
//
//   dO  = dropout_out'(dY or Norm'(dY))        db2 = Σ_t dO
//   dH  = dO · W2                              dW2 = dOᵀ · H
//   dZ1 = dH ⊙ mask ⊙ act'(Z1)  (gated: dZ1 = dH ⊙ mask ⊙ act(Zg), dZg = dH ⊙ mask ⊙ Z1 ⊙ act'(Zg))
//   db1 = Σ_t dZ1                              dW1 = dZ1ᵀ · In
//   dIn = dZ1 · W1 (+ dZg · Wg)                dX  = residual + (pre ? Norm'(dIn) : dIn)

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "backends/cpu/activation.hpp"
#include "core/buffer_pool.hpp"
#include "ops/fused_forward.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/norm_row.hpp"
#include "core/philox.hpp"
#include "core/thread_pool.hpp"

namespace ffn::nn {
namespace {

// Rows [0, rows) in pieces that threads take as they come; fn(r0, r1) (each
// row's result its own).
template <typename Fn>
void parallel_rows(int64_t rows, int threads, int64_t row_cost, Fn fn) {
  const int64_t useful = std::max<int64_t>(1, rows * row_cost / 16384);
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>({threads, rows, useful})));
  if (nt == 1) {
    fn(int64_t(0), rows);
    return;
  }
  parallel_range(nt, rows, grain_for(rows, nt), [&](int64_t r0, int64_t r1, int) { fn(r0, r1); });
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

// RunOptions::interrupted as backward asks it: between its stages and
// between pieces of its two big ones (the fused row blocks and the weight
// gradients), on the calling thread, outside parallel regions.
struct Stop {
  const std::function<bool()>& interrupted;
  void ask() const {
    if (interrupted && interrupted()) throw Interrupted();
  }
  // Units (rows or columns) per piece of a stage of `total` units costing
  // `flops` each: about 2^31 flops per thread (20–40 ms on one AVX2 core),
  // a multiple of granule · threads; all of them in one piece when nothing
  // can ask. Not smaller: a weight gradient's pieces each pack their A
  // again (dW2's dOᵀ), which at 2^29 cost 10 % of backward (512 → 2048).
  int64_t piece(int64_t total, double flops, int threads, int64_t granule) const {
    if (!interrupted || total < 1) return std::max<int64_t>(total, 1);
    const int64_t unit = granule * std::max(threads, 1);
    const int64_t units = int64_t(std::ldexp(double(std::max(threads, 1)), 31) / std::max(flops, 1.0));
    return (std::max(units, unit) + unit - 1) / unit * unit;
  }
};

// The operands of a weight gradient C[m, n] = Σ_t A(i, t)·B(t, j) over the
// call's rows t: A(i, t) = a[i·rsa + t·csa] (a row-major [rows, m] matrix has
// rsa = 1, csa = m; a transposed one [m, ≥ rows] has rsa = its row stride,
// csa = 1), B as panels of all the rows (B(t, j) = b[(j / 16)·psb + t·16 + j % 16],
// psb ≥ rows·16).
struct Sum {
  const float* a;
  int64_t rsa, csa;
  const float* b;
  int64_t psb;
  // C rows [i0, i0 + mb) × columns [j0, j0 + nb) (j0 a multiple of 16) over
  // rows [r0, r0 + k).
  GemmArgs args(int64_t i0, int64_t mb, int64_t j0, int64_t nb, int64_t r0, int64_t k, float* c, int64_t ldc) const {
    GemmArgs p;
    p.m = mb; p.n = nb; p.k = k;
    p.a = a + i0 * rsa + r0 * csa; p.rsa = rsa; p.csa = csa;
    p.b = b + (j0 / kPanel) * psb + r0 * kPanel; p.ldb = kPanel; p.psb = psb;
    p.c = c; p.ldc = ldc;
    return p;
  }
};

// The strides of the [·, rows] buffers below: rows plus one cache line, so
// that a power-of-two token count does not put every row (or panel) of a
// buffer in the same cache set: writing 16-float lines to 128 panels 256 KiB
// apart, or a transposed block to rows 16 KiB apart, took 3–4× longer.
int64_t padded(int64_t rows) { return rows + kPanel; }

// Row t of a [rows, cols] matrix (v) into its B panels (zero-padded columns;
// panel stride psb).
void store_panel_row(const float* v, int64_t cols, int64_t t, int64_t psb, float* panels_out) {
  for (int64_t q = 0; q * kPanel < cols; ++q) {
    float* dst = panels_out + q * psb + t * kPanel;
    const int64_t w = std::min(kPanel, cols - q * kPanel);
    for (int64_t j = 0; j < w; ++j) dst[j] = v[q * kPanel + j];
    for (int64_t j = w; j < kPanel; ++j) dst[j] = 0.0f;
  }
}

// The token slices of the weight gradients (RunOptions::partition.token_slices): each
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

// out[count], a sum over tokens: sum(r0, len, dst) over each slice's rows,
// added over the slices' tree (one call over every row when none are given).
template <typename SumRows>
void per_slice(const Slices& sl, int64_t count, float* out, SumRows&& sum) {
  if (!sl.given()) return sum(int64_t(0), sl.rows, out);
  std::vector<float> temporaries(size_t(sl.depth() * count));
  sl.tree(
      out, temporaries.data(), size_t(count), [&](int64_t i, float* dst) { sum(sl.begin(i), sl.size(i), dst); },
      [&](float* dst, const float* src) { add_rows(dst, src, count); });
}

// out[j] = Σ_t a[t, j] (· b[t, j]) per slice, added over the slices' tree.
void column_sum(const float* a, const float* b, const Slices& sl, int64_t cols, float* out, int threads) {
  if (!out) return;
  per_slice(sl, cols, out, [&](int64_t r0, int64_t len, float* dst) {
    column_sum(a + r0 * cols, b ? b + r0 * cols : nullptr, len, cols, dst, threads);
  });
}

// out[i] = Σ_t a[i·lda + t] (a [count, rows]: a transposed activation, row i
// holding every token) per slice, added over the slices' tree; rows split
// over threads, tokens summed in order: the bits of column_sum over the same
// values untransposed.
void transposed_sum(const float* a, int64_t lda, int64_t count, const Slices& sl, float* out, int threads) {
  if (!out) return;
  per_slice(sl, count, out, [&](int64_t r0, int64_t len, float* dst) {
    parallel_rows(count, threads, len, [&](int64_t i0, int64_t i1) {
      row_sums(a + i0 * lda + r0, lda, i1 - i0, len, dst + i0);
    });
  });
}

// A weight gradient C[m, n] = Σ_t A(i, t)·B(t, j) (Sum). With slices, C is formed in tiles, each on one thread:
// every slice's product of the tile and the tree's additions stay in cache,
// and C is written once. Tiles change no bit (each C element is one chain
// per slice, gemm.hpp); their size trades the slices' extra stores (which
// dominate when slices are short) against the operands packed again per
// tile (when they are long): measured at 512 → 2048, 2 threads, fwd + bwd
// with 4 slices against one sum: +30 % at T = 64, +9 % at T = 256 and +2 %
// at T = 4096 (bench/results/2026-11-23-data-parallel.md).
// Without slices and with a Stop that can ask, C is formed in pieces along
// its longer side, asking before each: each piece reads its own part of the
// larger operand once (pieces of dW2's 64 rows at d_model 64 read H four
// times: 1.7× the time), and each C element is the same chain (the same bits).
void weight_gradient(const F32Gemm& kernel, int64_t m, int64_t n, const Sum& op, float* c, const Slices& sl,
                     int threads, const Stop& stop) {
  if (!c) return;
  if (!sl.given()) {
    const bool by_rows = m >= n;
    const int64_t total = by_rows ? m : n, across = by_rows ? n : m;
    const int64_t step = stop.piece(total, 2.0 * double(across) * double(sl.rows), threads, kPanel);
    for (int64_t u0 = 0; u0 < total; u0 += step) {
      stop.ask();
      const int64_t len = std::min(step, total - u0);
      if (by_rows)
        gemm(kernel, op.args(u0, len, 0, n, 0, sl.rows, c + u0 * n, n), threads);
      else  // u0 is a multiple of kPanel, as Sum::args needs
        gemm(kernel, op.args(0, m, u0, len, 0, sl.rows, c + u0, n), threads);
    }
    return;
  }
  stop.ask();
  int64_t shortest = sl.rows;
  for (int64_t i = 0; i < sl.count(); ++i) shortest = std::min(shortest, sl.size(i));
  const int64_t TM = shortest >= 256 ? 512 : 256, TN = shortest >= 1024 ? 1024 : shortest >= 256 ? 512 : 256;
  const int64_t tn = (n + TN - 1) / TN, tiles = (m + TM - 1) / TM * tn;
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>(threads, tiles)));
  // Each thread's temporaries from the buffer pool, taken at its first tile,
  // not zero-filled: every element read is written first.
  const size_t bytes = size_t(sl.depth() * TM * TN) * sizeof(float);
  std::vector<float*> temps(static_cast<size_t>(nt), nullptr);
  parallel_units(nt, tiles, [&](int64_t t, int slot) {
      float*& temporaries = temps[size_t(slot)];
      if (!temporaries) temporaries = static_cast<float*>(pool_take(bytes));
      const int64_t i0 = t / tn * TM, j0 = t % tn * TN;
      const int64_t mb = std::min(TM, m - i0), nb = std::min(TN, n - j0);
      float* tile = c + i0 * n + j0;
      sl.tree(
          tile, temporaries, size_t(TM * TN),
          [&](int64_t i, float* dst) {
            gemm(kernel, op.args(i0, mb, j0, nb, sl.begin(i), sl.size(i), dst, dst == tile ? n : nb), 1);
          },
          [&](float* dst, const float* src) {
            const int64_t ld = dst == tile ? n : nb;
            for (int64_t r = 0; r < mb; ++r) add_rows(dst + r * ld, src + r * nb, nb);
          });
  });
  for (float* t : temps)
    if (t) pool_give(t, bytes);
}

// Scratch buffers of one backward call, never zero-filled (every element is
// written before it is read), taken from the process's buffer pool
// (core/buffer_pool.hpp) and given back when the call ends, also when an
// exception leaves: repeated calls (training steps) reuse the pages instead
// of faulting in fresh ones (at T = 4096 that was 8 % of fwd+bwd), and a
// process with many threads keeps the pool's bound, not a set per thread.
class Scratch {
 public:
  enum Slot { kDv, kDout, kH, kDz1, kDzg, kIn, kXhat, kDin, kDinShards, kSlots };
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

void fused_backward(const Context& ctx, const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x,
                    int64_t n, const int64_t* pos, bool training, uint64_t seed, const FusedSaved& saved,
                    const float* dy, float* dx, const FusedGrads& g, const FusedSplit& split,
                    std::span<const int64_t> token_slices) {
  const KernelConfig& kc = ctx.kernels();
  const int threads = ctx.threads();
  const std::function<bool()>& interrupted = ctx.interrupted();
  const F32Gemm& kernel = kc.f32;
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
  const int64_t ldt = padded(n), psb = padded(n * kPanel);  // transposed rows, B panels
  Scratch scratch;
  const Stop stop{interrupted};
  stop.ask();

  // dv = dL/d(x + o) through the post norm; In = Norm(x) again for pre-LN (xhat kept).
  auto post_dv = [&](float* dv) {
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        norm_backward_row<float>(cfg.norm_type, dy + t * d, saved.xhat + t * d, saved.rstd[t], d, gamma, dv + t * d);
    });
  };
  // xhat again, and In = Norm(x) as B panels when in_panels is given.
  auto pre_input = [&](float* in_panels, float* xhat) {
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      std::vector<float> row(size_t(in_panels ? d : 0));
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t j = 0; j < d; ++j) {
          const float xh = (x[t * d + j] - saved.mean[t]) * saved.rstd[t];
          xhat[t * d + j] = xh;
          if (in_panels) row[size_t(j)] = xh * gamma[j] + (beta ? beta[j] : 0.0f);
        }
        if (in_panels) store_panel_row(row.data(), d, t, psb, in_panels);
      }
    });
  };
  // dX (and the pre norm's γ, β) from dIn summed over every shard.
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
            norm_backward_row<float>(cfg.norm_type, dit, xhat + t * d, saved.rstd[t], d, gamma, dxt);
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

  // 1. Through the norm (post) and the output dropout: dv = dL/d(x + o), dO
  // (dY itself when neither changes it).
  float* dv = scratch.get(Scratch::kDv, cfg.norm == NormPlacement::post ? size_t(n * d) : 0);
  const float* dout = dy;
  if (cfg.norm == NormPlacement::post) {
    column_sum(dy, saved.xhat, sl, d, g.gamma, threads);
    column_sum(dy, nullptr, sl, d, g.beta, threads);
    post_dv(dv);
    dout = dv;
  }
  if (out_rule.active()) {
    float* o = scratch.get(Scratch::kDout, size_t(n * d));
    const float* src = dout;
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const uint64_t base = uint64_t(pos[t] * d);
        for (int64_t j = 0; j < d; ++j)
          o[t * d + j] = src[t * d + j] * out_rule.factor(seed, Stream::dropout_output, base + j);
      }
    });
    dout = o;
  }
  column_sum(dout, nullptr, sl, d, g.b2, threads);

  // 2. Per block of tokens and shard of d_ff (the layer's units [u0, u1)):
  //   dH = dO · W2[:, u0:u1], through the hidden dropout and the activation
  //   (dZ1, dZg), stored transposed for dW1; H (the hidden activation after
  //   dropout) again from the saved pre-activations, stored as B panels for
  //   dW2; and the shard's dIn = dZ1 · W1[u0:u1] (+ dZg · Wg[u0:u1]), added
  //   over the shards' tree, as the forward adds their W2 products.
  const int64_t groups = sh.last - sh.first, gchunks = (F_global + kDffShardChunk - 1) / kDffShardChunk;
  const int64_t c0 = gchunks * sh.first / sh.count;
  auto unit_begin = [&](int64_t grp) {
    return std::min(F, (gchunks * (sh.first + grp) / sh.count - c0) * kDffShardChunk);
  };
  int64_t widest = 0;
  for (int64_t grp = 0; grp < groups; ++grp) widest = std::max(widest, unit_begin(grp + 1) - unit_begin(grp));
  float* hp = g.w2 ? scratch.get(Scratch::kH, size_t(panels(F) * psb)) : nullptr;
  float* dz1t = scratch.get(Scratch::kDz1, size_t(F * ldt));  // [F, n], row stride ldt
  float* dzgt = scratch.get(Scratch::kDzg, gated ? size_t(F * ldt) : 0);
  // Per-thread buffers of a block: dZ1, dZg [rows, widest], one row of H and
  // of hidden dropout factors.
  struct Work {
    ScratchVector<float> dzb, dgb, hrow, keep;
    Work(int64_t rows, int64_t widest, bool gated, bool dropout)
        : dzb(size_t(rows * widest)), dgb(gated ? size_t(rows * widest) : 0), hrow(size_t(widest)),
          keep(dropout ? size_t(widest) : 0) {}
  };
  // Rows [t0, t0 + m) of shard grp; its dIn into out [m, d].
  auto shard_rows = [&](int64_t t0, int64_t m, int64_t grp, Work& wk, float* out) {
    float* dzb = wk.dzb.data();
    float* dgb = wk.dgb.data();
    const int64_t u0 = unit_begin(grp), u1 = unit_begin(grp + 1), units = u1 - u0;
    if (units == 0) {
      std::fill(out, out + m * d, 0.0f);
      return;
    }
    GemmArgs dh;  // dH = dO · W2[:, u0:u1]
    dh.m = m; dh.n = units; dh.k = d;
    dh.a = dout + t0 * d; dh.rsa = d; dh.csa = 1;
    dh.b = bw.w2.data() + (u0 / kPanel) * d * kPanel; dh.ldb = kPanel; dh.psb = d * kPanel;
    dh.c = dzb; dh.ldc = widest;
    gemm_packed(kernel, dh);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t t = t0 + r;
      const float* z1 = saved.z1 + t * F + u0;
      const float* zg = gated ? saved.zg + t * F + u0 : nullptr;
      float* a = dzb + r * widest;
      float* h = wk.hrow.data();
      float* keep = wk.keep.data();
      if (hid_rule.active()) {
        const uint64_t base = hidden_key(t) + uint64_t(u0);
        for (int64_t j = 0; j < units; ++j) {
          keep[j] = hid_rule.factor(seed, Stream::dropout_hidden, base + j);
          a[j] *= keep[j];
        }
      }
      if (gated) {
        float* b = dgb + r * widest;
        for (int64_t j = 0; j < units; ++j) {
          const float s = act(unit, zg[j]);
          h[j] = s * z1[j];
          b[j] = a[j] * z1[j] * act_grad(unit, zg[j]);
          a[j] = a[j] * s;
        }
      } else if (unit == Unit::relu) {
        for (int64_t j = 0; j < units; ++j) {
          h[j] = z1[j] < 0.0f ? 0.0f : z1[j];  // NaN stays NaN
          a[j] = z1[j] > 0.0f ? a[j] : 0.0f;
        }
      } else {
        for (int64_t j = 0; j < units; ++j) {
          h[j] = act(unit, z1[j]);
          a[j] *= act_grad(unit, z1[j]);
        }
      }
      if (!hp) continue;
      if (hid_rule.active())
        for (int64_t j = 0; j < units; ++j) h[j] *= keep[j];
      store_panel_row(h, units, t, psb, hp + (u0 / kPanel) * psb);
    }
    transpose_into(dzb, widest, m, units, dz1t + u0 * ldt + t0, ldt);
    if (gated) transpose_into(dgb, widest, m, units, dzgt + u0 * ldt + t0, ldt);
    GemmArgs p;  // dIn = dZ1 · W1[u0:u1] (+ dZg · Wg[u0:u1])
    p.m = m; p.n = d; p.k = units;
    p.a = dzb; p.rsa = widest; p.csa = 1;
    p.b = bw.w1.data() + u0 * kPanel; p.ldb = kPanel; p.psb = F * kPanel;
    p.c = out; p.ldc = d;
    gemm_packed(kernel, p);
    if (gated) {
      p.a = dgb, p.b = bw.wg.data() + u0 * kPanel, p.accumulate = true;
      gemm_packed(kernel, p);
    }
  };
  // The shards' dIn rows [m, d] (outs[grp]) summed into outs[0].
  auto tree = [&](auto& self, float* const* outs, int64_t m, int64_t lo, int64_t hi) -> void {  // global shard indices
    if (hi - lo < 2) return;
    const int64_t mid = (lo + hi) / 2;
    self(self, outs, m, lo, mid);
    self(self, outs, m, mid, hi);
    add_rows(outs[lo - sh.first], outs[mid - sh.first], m * d);
  };
  // The sum over the shards (dIn of the layer's shards): the caller's rows in
  // stage 1, else ours.
  float* din = split.partial ? split.partial : scratch.get(Scratch::kDin, size_t(n * d));
  if (n > 0) {
    // Tokens per block: the kernel's (as the forward's), fewer when the
    // block's dZ1 (and dZg) would pass 1 MiB; no bit depends on it.
    const int64_t per_row = (gated ? 2 : 1) * widest * int64_t(sizeof(float));
    const int64_t fit = (int64_t(1) << 20) / std::max<int64_t>(per_row, 1) / kc.mr * kc.mr;
    const int64_t block = std::clamp<int64_t>(fit, kc.mr, kc.token_block);
    const int nt = std::max(1, threads);
    float* others = nullptr;  // the few-blocks form's [groups - 1, n, d], taken when first needed
    // Rows [r0, r1): each row's dH, dZ1, H and dIn are its own, so the rows
    // may run in pieces (Stop) with the same bits.
    auto rows_of = [&](int64_t r0, int64_t r1) {
      const int64_t len = r1 - r0, blocks = (len + block - 1) / block;
      if (blocks >= nt || groups == 1) {
        // One unit per block, taken by whichever thread is free; each
        // thread's buffers hold one block: shard 0's rows in din, the
        // others' in the thread's own buffer (in cache for the tree).
        const int nb = int(std::min<int64_t>(nt, blocks));
        const int64_t rows = std::min(block, len);
        struct BlockScratch {
          std::optional<Work> wk;
          ScratchVector<float> others_rows;
          std::vector<float*> outs;
        };
        std::vector<BlockScratch> scratch_of(static_cast<size_t>(nb));
        parallel_units(nb, blocks, [&](int64_t b, int slot) {
          BlockScratch& bs = scratch_of[size_t(slot)];
          if (!bs.wk) {
            bs.wk.emplace(rows, widest, gated, hid_rule.active());
            bs.others_rows.resize(size_t((groups - 1) * rows * d));
            bs.outs.resize(static_cast<size_t>(groups));
            for (int64_t grp = 1; grp < groups; ++grp)
              bs.outs[size_t(grp)] = bs.others_rows.data() + (grp - 1) * rows * d;
          }
          const int64_t t0 = r0 + b * block, m = std::min(block, r1 - t0);
          bs.outs[0] = din + t0 * d;
          for (int64_t grp = 0; grp < groups; ++grp) shard_rows(t0, m, grp, *bs.wk, bs.outs[size_t(grp)]);
          tree(tree, bs.outs.data(), m, sh.first, sh.last);
        });
      } else {
        // Few blocks: one work item per (block, shard), then the sums; shard
        // 0's rows in din, the others' in [groups - 1, n, d].
        const int64_t items = blocks * groups, rows = std::min(block, len);
        if (!others) others = scratch.get(Scratch::kDinShards, size_t((groups - 1) * n * d));
        auto out = [&](int64_t grp, int64_t t0) { return (grp == 0 ? din : others + (grp - 1) * n * d) + t0 * d; };
        const int ni = int(std::min<int64_t>(nt, items));
        std::vector<std::optional<Work>> work(static_cast<size_t>(ni));
        parallel_units(ni, items, [&](int64_t it, int slot) {
          std::optional<Work>& wk = work[size_t(slot)];
          if (!wk) wk.emplace(rows, widest, gated, hid_rule.active());
          const int64_t t0 = r0 + it / groups * block, grp = it % groups;
          shard_rows(t0, std::min(block, r1 - t0), grp, *wk, out(grp, t0));
        });
        parallel_units(ni, blocks, [&](int64_t blk, int) {
          const int64_t t0 = r0 + blk * block;
          std::vector<float*> outs(static_cast<size_t>(groups));
          for (int64_t grp = 0; grp < groups; ++grp) outs[size_t(grp)] = out(grp, t0);
          tree(tree, outs.data(), std::min(block, r1 - t0), sh.first, sh.last);
        });
      }
    };
    // dH = dO · W2ᵀ-part and dIn = dZ1 · W1 (+ dZg · Wg): 2·d·F·(2 or 3) per row.
    const int64_t step = stop.piece(n, 2.0 * double(d) * double(F) * (gated ? 3 : 2), nt, block);
    for (int64_t r0 = 0; r0 < n; r0 += step) {
      stop.ask();
      rows_of(r0, std::min(n, r0 + step));
    }
  }
  // 3. dW2 = dOᵀ · H; db1 (and bg) = Σ_t dZ1.
  weight_gradient(kernel, d, F, Sum{dout, 1, d, hp, psb}, g.w2, sl, threads, stop);
  scratch.get(Scratch::kH, 0);  // its pages back to the pool
  transposed_sum(dz1t, ldt, F, sl, g.b1, threads);
  if (gated) transposed_sum(dzgt, ldt, F, sl, g.bg, threads);

  // 4. The FFN input (x, or Norm(x) again for pre-LN) as B panels; dW1 = dZ1ᵀ · In.
  float* xhat = cfg.norm == NormPlacement::pre ? scratch.get(Scratch::kXhat, size_t(n * d)) : nullptr;
  float* in_panels = g.w1 || g.wg ? scratch.get(Scratch::kIn, size_t(panels(d) * psb)) : nullptr;
  if (xhat) {
    pre_input(in_panels, xhat);
  } else if (in_panels) {
    parallel_rows(n, threads, d, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) store_panel_row(x + t * d, d, t, psb, in_panels);
    });
  }
  weight_gradient(kernel, F, d, Sum{dz1t, ldt, 1, in_panels, psb}, g.w1, sl, threads, stop);
  if (gated) weight_gradient(kernel, F, d, Sum{dzgt, ldt, 1, in_panels, psb}, g.wg, sl, threads, stop);

  // 5. dX from dIn.
  if (split.partial) return;  // stage 1: this layer's shards' dIn is in the caller's rows, for the sum across ranks
  stop.ask();
  finish(din, dv, xhat);
}

}  // namespace ffn::nn
