// Packing and the fused forward (see fused_forward.hpp). The matrix products
// run in the per-ISA gemm kernels; the epilogues here are portable C++.
#include "ops/fused_forward.hpp"


#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/cpu/activation.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/norm_row.hpp"
#include "core/philox.hpp"
#include "core/thread_pool.hpp"

namespace ffn::nn {

namespace {
void pack_pooled(const float* src, int64_t K, int64_t N, bool n_major, PackedWeights::Panels& out) {
  out.resize(size_t(panels(N) * K * kPanel));  // pool pages: no faults once training runs
  pack_panels(src, K, N, n_major, out.data());
}
}  // namespace

std::shared_ptr<PackedWeights> PackedWeights::make(const Config& cfg, const Weights& w, const QuantizedWeights* q) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  auto p = std::make_shared<PackedWeights>();
  if (q && q->dtype != WeightDtype::fp32) {
    p->dtype = q->dtype;
    const bool gated = is_gated(cfg.activation);
    if (q->dtype == WeightDtype::int8) {
      p->d_model_ = d, p->d_ff_ = F;
      p->w1q_ = q->w1.q, p->wgq_ = q->wg.q, p->w2q_ = q->w2.q;
      p->q1 = pack_panels_s8(q->w1.q, d, F);
      p->s1 = q->w1.scale;
      if (gated) p->qg = pack_panels_s8(q->wg.q, d, F), p->sg = q->wg.scale;
      p->q2 = pack_panels_s8(q->w2.q, F, d);
      if (q->w2.groups() != (F + kQuantChunk - 1) / kQuantChunk)
        throw Error("int8: W2 needs one scale per output channel and " + std::to_string(kQuantChunk) +
                    "-column group");
      p->s2 = q->w2.scale;
      p->x32 = q->fp32_inputs, p->w1_32 = q->w1_fp32, p->wg_32 = q->wg_fp32;
    } else {
      const bool bf = q->dtype == WeightDtype::bf16;
      p->h1 = pack_panels_16(q->w1.h, d, F, bf);
      if (gated) p->hg = pack_panels_16(q->wg.h, d, F, bf);
      p->h2 = pack_panels_16(q->w2.h, F, d, bf);
    }
    return p;
  }
  // W1 is [F, d]: B(k = i, n = f) = W1[f, i] is n-major; W2 is [d, F]: B(k = f, n = o) = W2[o, f].
  pack_pooled(w.w1.data(), d, F, true, p->w1);
  if (is_gated(cfg.activation)) pack_pooled(w.wg.data(), d, F, true, p->wg);
  pack_pooled(w.w2.data(), F, d, true, p->w2);
  return p;
}

const PackedWeights::S8Quads& PackedWeights::quads() const {
  std::call_once(quads_once_, [&] {
    const int64_t d = d_model_, F = d_ff_;
    nn::S8Quads a = pack_panels_s8_quads(w1q_, d, F, d);
    quads_.q1 = std::move(a.b), quads_.c1 = std::move(a.colsum);
    if (!wgq_.empty()) {
      nn::S8Quads g = pack_panels_s8_quads(wgq_, d, F, d);
      quads_.qg = std::move(g.b), quads_.cg = std::move(g.colsum);
    }
    nn::S8Quads b = pack_panels_s8_quads(w2q_, F, d, kQuantChunk);
    quads_.q2 = std::move(b.b), quads_.c2 = std::move(b.colsum);
  });
  return quads_;
}

const PackedWeights::Backward& PackedWeights::backward(const Config& cfg, const Weights& w) const {
  std::call_once(backward_once_, [&] {
    const int64_t d = cfg.d_model, F = cfg.d_ff;
    pack_pooled(w.w2.data(), d, F, false, backward_.w2);  // B(k = o, n = f) = W2[o, f]
    pack_pooled(w.w1.data(), F, d, false, backward_.w1);  // B(k = f, n = i) = W1[f, i]
    if (is_gated(cfg.activation)) pack_pooled(w.wg.data(), F, d, false, backward_.wg);
  });
  return backward_;
}

const PackedWeights::Bf16Pairs& PackedWeights::bf16_pairs(const Config& cfg, const Weights& w) const {
  std::call_once(bf16_once_, [&] {
    const int64_t d = cfg.d_model, F = cfg.d_ff;
    bf16_.w1 = pack_panels_bf16(w.w1.data(), d, F);
    if (is_gated(cfg.activation)) bf16_.wg = pack_panels_bf16(w.wg.data(), d, F);
    bf16_.w2 = pack_panels_bf16(w.w2.data(), F, d);
  });
  return bf16_;
}

namespace {

constexpr int64_t kChunk = 256;      // hidden units per chunk (a multiple of kPanel)
static_assert(kChunk % kPanel == 0);
static_assert(kChunk == kQuantChunk);  // int8: one activation scale per hidden chunk
static_assert(kChunk % kBf16K == 0);   // bf16: every chunk but the last starts a whole k step
static_assert(kChunk == kDffShardChunk);

struct Forward {
  const Config& cfg;
  const Weights& w;
  const PackedWeights& pw;
  const KernelConfig& kc;  // of the resolved ISA
  const float* x;
  const int64_t* pos;
  uint64_t seed;
  const FusedSaved* saved;
  float* y;
  int64_t d, F, chunks;
  bool gated;
  Unit unit;
  DropoutRule hid_rule, out_rule;
  Compute compute;
  const PackedWeights::Bf16Pairs* pairs;  // compute bf16
  // This layer's shards of d_ff (DffShards): global shard first + g is local
  // group g; global hidden chunk c0 + c is local chunk c.
  DffShards sh;
  int64_t groups, global_chunks, c0, F_global;
  int64_t dk() const { return bf16_kpad(d); }  // bf16 input row stride (zero-padded)

  int64_t chunk_begin(int64_t g) const { return global_chunks * (sh.first + g) / sh.count - c0; }
  // The hidden dropout key of local unit f of the token at position p (global).
  uint64_t hidden_key(int64_t p, int64_t f) const { return uint64_t(p * F_global + c0 * kChunk + f); }

  // Per-thread buffers for blocks of up to `rows` tokens: the block's FFN
  // input, the hidden chunk(s), one row.
  struct Work {
    ScratchVector<float> in, z, zg, row;
    const float* a_rows = nullptr;  // the block's FFN input rows (stride d): in, or x's own rows
    // int8: quantized input (+ scales), int32 products, quantized hidden chunk (+ scales)
    ScratchVector<int16_t> xq, hq;
    ScratchVector<float> xs, hs;
    ScratchVector<int32_t> zi, oi;
    // int8 on u8 × s8 kernels: u8 levels and zero points of the input and hidden rows
    ScratchVector<uint8_t> xu, hu;
    ScratchVector<int32_t> xzp, hzp;
    // int8 with fp32 input channels: each row's values of them
    ScratchVector<float> x32;
    // bf16 compute: the input rows and the hidden chunk rounded to bf16 (zero-padded k)
    ScratchVector<uint16_t> xb, hb;
    Work(const Forward& f, int64_t rows)
        : in(size_t(rows * f.d)), z(size_t(rows * kChunk)), zg(f.gated ? size_t(rows * kChunk) : 0),
          row(size_t(f.d)) {
      if (f.compute == Compute::bf16) {
        xb.resize(size_t(bf16_a_size(*f.kc.bf16, rows, f.dk())));
        hb.resize(size_t(bf16_a_size(*f.kc.bf16, rows, kChunk)));
      } else if (f.pw.dtype == WeightDtype::int8 && f.kc.int8->igemm_u8) {
        xu.resize(size_t(rows * f.dpad4()));
        xzp.resize(size_t(rows));
        hu.resize(size_t(rows * kChunk));
        hzp.resize(size_t(rows));
        xs.resize(size_t(rows));
        hs.resize(size_t(rows));
        zi.resize(size_t(rows * kChunk));
        oi.resize(size_t(rows * panels(f.d) * kPanel));
      } else if (f.pw.dtype == WeightDtype::int8) {
        xq.resize(size_t(rows * f.dpad()));
        xs.resize(size_t(rows));
        zi.resize(size_t(rows * kChunk));
        hq.resize(size_t(rows * kChunk));
        hs.resize(size_t(rows));
        oi.resize(size_t(rows * panels(f.d) * kPanel));
      }
      if (f.pw.dtype == WeightDtype::int8) x32.resize(size_t(rows) * f.pw.x32.size());
    }
    void poison() {
      nn::poison(in), nn::poison(z), nn::poison(zg), nn::poison(row);
      nn::poison(xq), nn::poison(hq), nn::poison(xs), nn::poison(hs), nn::poison(zi), nn::poison(oi);
      nn::poison(xu), nn::poison(hu), nn::poison(xzp), nn::poison(hzp), nn::poison(x32), nn::poison(xb), nn::poison(hb);
    }
  };
  int64_t dpad() const { return (d + 1) / 2 * 2; }
  int64_t dpad4() const { return (d + 3) / 4 * 4; }

  // FFN input rows of tokens [t0, t0 + m): x, or Norm(x) for pre-LN.
  void input_rows(int64_t t0, int64_t m, Work& wk, bool save_stats) const {
    wk.poison();  // FFN_POISON_SCRATCH only (core/aligned.hpp): each block starts from poison
    if (compute == Compute::bf16 && cfg.norm != NormPlacement::pre) {  // x's rows packed as they are
      pack_a_bf16(*kc.bf16, x + t0 * d, m, d, d, dk(), wk.xb.data());
      return;
    }
    const bool int8 = pw.dtype == WeightDtype::int8;
    if (!int8 && compute == Compute::fp32 && cfg.norm != NormPlacement::pre) {  // the products read x itself
      wk.a_rows = x + t0 * d;
      return;
    }
    wk.a_rows = wk.in.data();
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + (t0 + r) * d;
      float* in = wk.in.data() + r * d;
      const float* src = in;  // the FFN input row: int8 quantizes x's own row when nothing changes it
      if (cfg.norm == NormPlacement::pre) {
        const bool s = save_stats && saved;
        normalize_row<float>(cfg.norm_type, xr, d, cfg.eps, w.norm_weight.data(),
                      w.norm_bias.empty() ? nullptr : w.norm_bias.data(), in, nullptr,
                      s && saved->mean ? saved->mean + t0 + r : nullptr, s && saved->rstd ? saved->rstd + t0 + r : nullptr);
      } else if (!int8 || !pw.x32.empty()) {
        std::copy(xr, xr + d, in);
      } else {
        src = xr;
      }
      if (compute == Compute::bf16)
        continue;  // packed below, all rows at once
      if (int8)  // fp32 input channels: kept aside, left out of the quantized row
        for (size_t s = 0, k = pw.x32.size(); s < k; ++s) {
          float& v = in[pw.x32[s]];
          wk.x32[size_t(r) * k + s] = v;
          v = 0.0f;
        }
      if (int8 && kc.int8->igemm_u8)
        wk.xs[size_t(r)] = kc.int8->quantize_row_u8(src, d, wk.xu.data() + r * dpad4(), wk.xzp.data() + r);
      else if (int8)
        wk.xs[size_t(r)] = kc.int8->quantize_row(src, d, wk.xq.data() + r * dpad());
    }
    if (compute == Compute::bf16) pack_a_bf16(*kc.bf16, wk.in.data(), m, d, d, dk(), wk.xb.data());
  }

  // next_g: the group this thread computes next (-1: none); the fp32-math
  // products prefetch the start of its W1 while they finish this one.
  void group_partial(int64_t t0, int64_t m, int64_t g, Work& wk, float* acc, int64_t next_g = -1) const {
    if (chunk_begin(g) == chunk_begin(g + 1)) {  // an empty shard (fewer hidden chunks than shards)
      std::fill(acc, acc + m * d, 0.0f);
      return;
    }
    if (compute == Compute::bf16) {
      group_partial_bf16(t0, m, g, wk, acc);
      return;
    }
    switch (pw.dtype) {
      case WeightDtype::fp32:
        group_partial_f(t0, m, g, wk, acc, pw.w1.data(), pw.wg.data(), pw.w2.data(), next_g);
        break;
      case WeightDtype::bf16:
        group_partial_f(t0, m, g, wk, acc, reinterpret_cast<const bf16_t*>(pw.h1.data()),
                        reinterpret_cast<const bf16_t*>(pw.hg.data()), reinterpret_cast<const bf16_t*>(pw.h2.data()), next_g);
        break;
      case WeightDtype::fp16:
        group_partial_f(t0, m, g, wk, acc, reinterpret_cast<const fp16_t*>(pw.h1.data()),
                        reinterpret_cast<const fp16_t*>(pw.hg.data()), reinterpret_cast<const fp16_t*>(pw.h2.data()), next_g);
        break;
      case WeightDtype::int8:
        if (kc.int8->igemm_u8) group_partial_u8(m, g, wk, acc);
        else group_partial_int8(m, g, wk, acc);
        break;
    }
  }

  // Bias, save, activation (and gate) and hidden dropout of rows [0, m) of the
  // chunk at f0 (fc units) in wk.z / wk.zg.
  // With `hb` (bf16 compute) each finished row is also rounded into the
  // packed bf16 A of the second product (k = fk) while it is in L1.
  void chunk_epilogue(int64_t t0, int64_t m, int64_t f0, int64_t fc, Work& wk, uint16_t* hb = nullptr,
                      int64_t fk = 0) const {
    const float* b1 = w.b1.empty() ? nullptr : w.b1.data() + f0;
    const float* bg = gated && !w.bg.empty() ? w.bg.data() + f0 : nullptr;
    for (int64_t r = 0; r < m; ++r) {
      float* z = wk.z.data() + r * kChunk;
      float* zg = gated ? wk.zg.data() + r * kChunk : nullptr;
      if (saved) {  // the biased pre-activations are kept: add the biases first
        if (b1) add_rows(z, b1, fc);
        if (bg) add_rows(zg, bg, fc);
        std::copy(z, z + fc, saved->z1 + (t0 + r) * F + f0);
        if (zg) std::copy(zg, zg + fc, saved->zg + (t0 + r) * F + f0);
        kc.activate(unit, z, zg, fc, nullptr, nullptr);
      } else {
        kc.activate(unit, z, zg, fc, b1, bg);  // the biases added in the same pass
      }
      if (hid_rule.active()) {
        const uint64_t base = hidden_key(pos[t0 + r], f0);
        for (int64_t j = 0; j < fc; ++j) z[j] *= hid_rule.factor(seed, Stream::dropout_hidden, base + j);
      }
      if (hb) pack_a_bf16_row(*kc.bf16, z, fc, fk, r, hb);
    }
    if (hb)  // the rows past m, up to the kernel's row tile, are zero
      for (int64_t r = m; r < bf16_a_size(*kc.bf16, m, fk) / fk; ++r) pack_a_bf16_row(*kc.bf16, nullptr, 0, fk, r, hb);
  }

  // int8: rows [0, m) of the hidden chunk at f0 (fc units) from W1's (or
  // Wg's) int32 sums: out = fma(acc, s_x · s_w, prev), prev = the bias, plus
  // the fp32 input channels' products when there are any (src/backends/cpu/quantize.hpp).
  void dequant_hidden(int64_t m, int64_t f0, int64_t fc, const float* s_w, const std::vector<float>& bias,
                      const std::vector<float>& w32, Work& wk, float* out) const {
    const float* b = bias.empty() ? nullptr : bias.data() + f0;
    const int64_t k = int64_t(pw.x32.size());
    if (k > 0) kc.int8->fp32_part(wk.x32.data(), k, m, w32.data() + f0, F, b, fc, out, kChunk);
    for (int64_t r = 0; r < m; ++r) {
      float* o = out + r * kChunk;
      kc.int8->dequant(wk.zi.data() + r * kChunk, fc, wk.xs[size_t(r)], s_w + f0, k > 0 ? o : b, o);
    }
  }

  // int8 (inference): acc[m, d] as group_partial, with the integer products
  // and the hidden chunk re-quantized per token (src/backends/cpu/quantize.hpp).
  void group_partial_int8(int64_t m, int64_t g, Work& wk, float* acc) const {
    const Int8Kernels& ik = *kc.int8;
    const int64_t kpd = (d + 1) / 2, kpf = (F + 1) / 2, ldo = panels(d) * kPanel;
    const int64_t c_begin = chunk_begin(g), c_end = chunk_begin(g + 1);
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t f0 = c * kChunk, fc = std::min(kChunk, F - f0);
      IGemmArgs g1;
      g1.m = m; g1.n = fc; g1.kp = kpd;
      g1.a = wk.xq.data(); g1.lda = dpad();
      g1.psb = kpd * 32;
      g1.c = wk.zi.data(); g1.ldc = kChunk;
      g1.b = pw.q1.data() + (f0 / kPanel) * g1.psb;
      ik.igemm(g1);
      dequant_hidden(m, f0, fc, pw.s1.data(), w.b1, pw.w1_32, wk, wk.z.data());
      if (gated) {
        g1.b = pw.qg.data() + (f0 / kPanel) * g1.psb;
        ik.igemm(g1);
        dequant_hidden(m, f0, fc, pw.sg.data(), w.bg, pw.wg_32, wk, wk.zg.data());
      }
      for (int64_t r = 0; r < m; ++r) {
        float* z = wk.z.data() + r * kChunk;
        kc.activate(unit, z, gated ? wk.zg.data() + r * kChunk : nullptr, fc, nullptr, nullptr);
        wk.hs[size_t(r)] = ik.quantize_row(z, fc, wk.hq.data() + r * kChunk);
      }
      IGemmArgs g2;
      g2.m = m; g2.n = d; g2.kp = (fc + 1) / 2;
      g2.a = wk.hq.data(); g2.lda = kChunk;
      g2.b = pw.q2.data() + (f0 / 2) * 32; g2.psb = kpf * 32;
      g2.c = wk.oi.data(); g2.ldc = ldo;
      ik.igemm(g2);
      for (int64_t r = 0; r < m; ++r)
        ik.dequant(wk.oi.data() + r * ldo, d, wk.hs[size_t(r)], pw.s2.data() + c * d, c > c_begin ? acc + r * d : nullptr,
                   acc + r * d);
    }
  }

  // The same on u8 × s8 kernels (VNNI): the same quantized values and int32
  // sums, formed as Σ u·q − zp·Σq (src/backends/cpu/gemm.hpp, U8GemmArgs).
  void group_partial_u8(int64_t m, int64_t g, Work& wk, float* acc) const {
    const Int8Kernels& ik = *kc.int8;
    const PackedWeights::S8Quads& pq = pw.quads();
    const int64_t kqd = (d + 3) / 4, kqf = (F + 3) / 4, ldo = panels(d) * kPanel;
    const int64_t c_begin = chunk_begin(g), c_end = chunk_begin(g + 1);
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t f0 = c * kChunk, fc = std::min(kChunk, F - f0);
      U8GemmArgs g1;
      g1.m = m; g1.n = fc; g1.kq = kqd;
      g1.a = wk.xu.data(); g1.lda = dpad4(); g1.zp = wk.xzp.data();
      g1.psb = kqd * 64;
      g1.c = wk.zi.data(); g1.ldc = kChunk;
      g1.b = pq.q1.data() + (f0 / kPanel) * g1.psb;
      g1.colsum = pq.c1.data() + f0;
      ik.igemm_u8(g1);
      dequant_hidden(m, f0, fc, pw.s1.data(), w.b1, pw.w1_32, wk, wk.z.data());
      if (gated) {
        g1.b = pq.qg.data() + (f0 / kPanel) * g1.psb;
        g1.colsum = pq.cg.data() + f0;
        ik.igemm_u8(g1);
        dequant_hidden(m, f0, fc, pw.sg.data(), w.bg, pw.wg_32, wk, wk.zg.data());
      }
      for (int64_t r = 0; r < m; ++r) {
        float* z = wk.z.data() + r * kChunk;
        kc.activate(unit, z, gated ? wk.zg.data() + r * kChunk : nullptr, fc, nullptr, nullptr);
        wk.hs[size_t(r)] = ik.quantize_row_u8(z, fc, wk.hu.data() + r * kChunk, wk.hzp.data() + r);
      }
      U8GemmArgs g2;
      g2.m = m; g2.n = d; g2.kq = (fc + 3) / 4;
      g2.a = wk.hu.data(); g2.lda = kChunk; g2.zp = wk.hzp.data();
      g2.b = pq.q2.data() + (f0 / 4) * 64; g2.psb = kqf * 64;
      g2.colsum = pq.c2.data() + c * ldo;
      g2.c = wk.oi.data(); g2.ldc = ldo;
      ik.igemm_u8(g2);
      for (int64_t r = 0; r < m; ++r)
        ik.dequant(wk.oi.data() + r * ldo, d, wk.hs[size_t(r)], pw.s2.data() + c * d, c > c_begin ? acc + r * d : nullptr,
                   acc + r * d);
    }
  }

  // bf16 compute: acc[m, d] as group_partial_f, with the input rows, the
  // weights and each hidden chunk (after activation and dropout) rounded to
  // bf16 and the products summed in fp32 (src/backends/cpu/gemm.hpp, Bf16GemmArgs).
  void group_partial_bf16(int64_t t0, int64_t m, int64_t g, Work& wk, float* acc) const {
    const Bf16Kernels& bk = *kc.bf16;
    const int64_t c_end = chunk_begin(g + 1), Fk = bf16_kpad(F);
    for (int64_t c = chunk_begin(g); c < c_end; ++c) {
      const int64_t f0 = c * kChunk, fc = std::min(kChunk, F - f0), fk = bf16_kpad(fc);
      Bf16GemmArgs g1;
      g1.m = m; g1.n = fc; g1.kp = dk() / 2;
      g1.a = wk.xb.data();
      g1.psb = 16 * dk();
      g1.b = pairs->w1.data() + (f0 / kPanel) * g1.psb;
      g1.c = wk.z.data(); g1.ldc = kChunk;
      bk.gemm(g1);
      if (gated) {
        g1.b = pairs->wg.data() + (f0 / kPanel) * g1.psb;
        g1.c = wk.zg.data();
        bk.gemm(g1);
      }
      chunk_epilogue(t0, m, f0, fc, wk, wk.hb.data(), fk);  // packed to bf16, zero-padded to fk
      Bf16GemmArgs g2;
      g2.m = m; g2.n = d; g2.kp = fk / 2;
      g2.a = wk.hb.data();
      g2.b = pairs->w2.data() + (f0 / 2) * 32; g2.psb = 16 * Fk;
      g2.c = acc; g2.ldc = d;
      g2.accumulate = c > chunk_begin(g);
      bk.gemm(g2);
    }
  }

  // acc[m, d] = Σ over the chunks of group g of act(in · W1[c]ᵀ + b1[c]) · W2[:, c]ᵀ,
  // with float32 arithmetic on float32 or 16-bit (widened) weight panels.
  template <typename TB>
  void group_partial_f(int64_t t0, int64_t m, int64_t g, Work& wk, float* acc, const TB* p1, const TB* pg,
                       const TB* p2, int64_t next_g) const {
    const F32Gemm& kernel = kc.f32;
    const int64_t c_end = chunk_begin(g + 1);
    for (int64_t c = chunk_begin(g); c < c_end; ++c) {
      const int64_t f0 = c * kChunk, fc = std::min(kChunk, F - f0);
      GemmArgsT<TB> g1;
      g1.m = m; g1.n = fc; g1.k = d;
      g1.a = wk.a_rows; g1.rsa = d; g1.csa = 1;
      g1.b = p1 + (f0 / kPanel) * d * kPanel; g1.ldb = kPanel; g1.psb = d * kPanel;
      g1.c = wk.z.data(); g1.ldc = kChunk;
      // Each product prefetches the first panels of the one after it.
      const TB* w2c = p2 + f0 * kPanel;
      g1.next_b = gated ? pg + (f0 / kPanel) * d * kPanel : w2c;
      g1.next_psb = gated ? d * kPanel : F * kPanel;
      gemm_packed(kernel, g1);
      if (gated) {
        g1.b = pg + (f0 / kPanel) * d * kPanel;
        g1.c = wk.zg.data();
        g1.next_b = w2c, g1.next_psb = F * kPanel;
        gemm_packed(kernel, g1);
      }
      chunk_epilogue(t0, m, f0, fc, wk);
      GemmArgsT<TB> g2;
      g2.m = m; g2.n = d; g2.k = fc;
      g2.a = wk.z.data(); g2.rsa = kChunk; g2.csa = 1;
      g2.b = w2c; g2.ldb = kPanel; g2.psb = F * kPanel;
      g2.c = acc; g2.ldc = d;
      g2.accumulate = c > chunk_begin(g);
      const int64_t c_next = c + 1 < c_end ? c + 1 : next_g >= 0 ? chunk_begin(next_g) : chunks;
      if (c_next < chunks) g2.next_b = p1 + (c_next * kChunk / kPanel) * d * kPanel, g2.next_psb = d * kPanel;
      gemm_packed(kernel, g2);
    }
  }

  // The group partials (each [m, d]) are summed into parts[0] over the fixed
  // binary tree of the shards (DffShards): split [lo, hi) at its middle, sum
  // each half, add the halves. A rank's aligned block of shards is a
  // subtree, so ranks that add their sums the same way reproduce it.
  // The groups are a power of two (DffShards::validate), so that tree is a
  // binary counter: tree_after(g) makes the additions that group g
  // completes, the root's too unless keep_root. Called as each group
  // finishes, every addition reads a partial still in L2; called for every
  // g in turn (tree_sum), it is the whole tree.
  void tree_after(int64_t m, float* const* parts, int64_t g, bool keep_root) const {
    for (int64_t span = 2; span <= groups && (g + 1) % span == 0; span *= 2) {
      if (span == groups && keep_root) break;
      kc.sum_rows(parts[g + 1 - span], parts[g + 1 - span], parts[g + 1 - span / 2], nullptr, m * d);
    }
  }
  void tree_sum(int64_t m, float* const* parts, bool keep_root = false) const {
    for (int64_t g = 0; g < groups; ++g) tree_after(m, parts, g, keep_root);
  }

  // The tail fuses the tree's root addition when nothing follows b2: no
  // norm, no output dropout.
  bool fuses_root() const { return cfg.norm == NormPlacement::none && !out_rule.active() && groups >= 2; }

  // y rows of tokens [t0, t0 + m) from the shards' partials: their tree sum,
  // then finish_rows. With fuses_root the tree's last addition and b2 are
  // one pass, y = (left + right) + b2: the same two roundings, one trip over
  // the rows fewer. summed: the tree below the root (and the root too,
  // unless fuses_root) is already added.
  void sum_and_finish(int64_t t0, int64_t m, float* const* parts, Work& wk, bool summed) const {
    if (!summed) tree_sum(m, parts, fuses_root());
    if (!fuses_root()) return finish_rows(t0, m, parts[0], wk);
    const float* __restrict l = parts[0];
    const float* __restrict rt = parts[groups / 2];
    const float* __restrict b2 = w.b2.empty() ? nullptr : w.b2.data();
    if (!b2) return kc.sum_rows(y + t0 * d, l, rt, nullptr, m * d);
    for (int64_t r = 0; r < m; ++r) kc.sum_rows(y + (t0 + r) * d, l + r * d, rt + r * d, b2, d);
  }

  // y rows of tokens [t0, t0 + m) from the sum over every shard o [m, d]
  // (overwritten): b2, output dropout, residual and norm.
  void finish_rows(int64_t t0, int64_t m, float* o_rows, Work& wk) const {
    const float* b2 = w.b2.empty() ? nullptr : w.b2.data();
    const float* gamma = w.norm_weight.empty() ? nullptr : w.norm_weight.data();
    const float* beta = w.norm_bias.empty() ? nullptr : w.norm_bias.data();
    for (int64_t r = 0; r < m; ++r) {
      const int64_t t = t0 + r;
      float* o = o_rows + r * d;
      const float* xr = x + t * d;
      float* yr = y + t * d;
      if (cfg.norm == NormPlacement::none && !out_rule.active()) {  // one pass: y = o + b2
        if (b2) for (int64_t c = 0; c < d; ++c) yr[c] = o[c] + b2[c];
        else std::copy(o, o + d, yr);
        continue;
      }
      if (b2)
        for (int64_t c = 0; c < d; ++c) o[c] += b2[c];
      if (out_rule.active()) {
        const uint64_t base = uint64_t(pos[t] * d);
        for (int64_t c = 0; c < d; ++c) o[c] *= out_rule.factor(seed, Stream::dropout_output, base + c);
      }
      switch (cfg.norm) {
        case NormPlacement::none:
          std::copy(o, o + d, yr);
          break;
        case NormPlacement::pre:
          for (int64_t c = 0; c < d; ++c) yr[c] = xr[c] + o[c];
          break;
        case NormPlacement::post:
          for (int64_t c = 0; c < d; ++c) wk.row[c] = xr[c] + o[c];
          normalize_row<float>(cfg.norm_type, wk.row.data(), d, cfg.eps, gamma, beta, yr,
                        saved && saved->xhat ? saved->xhat + t * d : nullptr, nullptr,
                        saved && saved->rstd ? saved->rstd + t : nullptr);
          break;
      }
    }
  }
};

}  // namespace

void fused_forward(const Context& ctx, const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x,
                   int64_t n, const int64_t* pos, bool training, uint64_t seed, float* y, const FusedSaved* saved,
                   Compute compute, const FusedSplit& split) {
  int threads = ctx.threads();
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  const int64_t chunks = (F + kChunk - 1) / kChunk;
  const DffShards sh = split.shards;
  const int64_t F_global = sh.d_ff > 0 ? sh.d_ff : F, global_chunks = (F_global + kChunk - 1) / kChunk;
  const Forward f{cfg, w, pw, ctx.kernels(), x, pos, seed, saved, y, d, F, chunks,
                  is_gated(cfg.activation), unit_of(cfg.activation),
                  DropoutRule::make(training ? cfg.dropout_hidden : 0.0f),
                  DropoutRule::make(training ? cfg.dropout_output : 0.0f), compute,
                  compute == Compute::bf16 && !split.sum ? &pw.bf16_pairs(cfg, w) : nullptr,
                  sh, sh.last - sh.first, global_chunks, global_chunks * sh.first / sh.count, F_global};
  const int64_t kTokenBlock = f.kc.token_block;  // tokens per block
  const int64_t blocks = (n + kTokenBlock - 1) / kTokenBlock;
  threads = std::max(1, threads);

  // The rows' sum over the layer's shards: the tail (whole layer), or the
  // caller's partial (split.partial, the seam where ranks add theirs).
  // summed: tree_after has already run for every group (keep_root as below).
  auto done = [&](int64_t t0, int64_t m, float* const* parts, Forward::Work& wk, bool summed) {
    if (!split.partial) return f.sum_and_finish(t0, m, parts, wk, summed);
    if (!summed) f.tree_sum(m, parts);
    if (parts[0] != split.partial + t0 * d) std::copy(parts[0], parts[0] + m * d, split.partial + t0 * d);
  };
  if (split.sum) {  // the tail alone, from the sum over every shard
    threads = int(std::min<int64_t>(threads, std::max<int64_t>(blocks, 1)));
    struct Scratch {
      std::optional<Forward::Work> wk;
      ScratchVector<float> o;
    };
    std::vector<Scratch> scratch(static_cast<size_t>(threads));
    parallel_units(threads, blocks, [&](int64_t blk, int slot) {
      Scratch& sc = scratch[size_t(slot)];
      if (!sc.wk) {
        sc.wk.emplace(f, 0);
        sc.o.resize(size_t(kTokenBlock * d));
      }
      const int64_t t0 = blk * kTokenBlock, m = std::min(kTokenBlock, n - t0);
      std::copy(split.sum + t0 * d, split.sum + (t0 + m) * d, sc.o.data());
      f.finish_rows(t0, m, sc.o.data(), *sc.wk);
    });
    return;
  }
  if (blocks >= threads || f.groups == 1) {
    // One unit per token block, taken by whichever thread is free; each
    // thread's buffers hold one block.
    threads = int(std::min<int64_t>(threads, blocks));
    const int64_t rows = std::min(kTokenBlock, n);
    struct Scratch {
      std::optional<Forward::Work> wk;
      ScratchVector<float> acc;
      std::vector<float*> parts;
    };
    std::vector<Scratch> scratch(static_cast<size_t>(threads));
    parallel_units(threads, blocks, [&](int64_t blk, int slot) {
      Scratch& sc = scratch[size_t(slot)];
      if (!sc.wk) {
        sc.wk.emplace(f, rows);
        sc.acc.resize(size_t(f.groups * rows * d));
        sc.parts.resize(static_cast<size_t>(f.groups));
        for (int64_t g = 0; g < f.groups; ++g) sc.parts[size_t(g)] = sc.acc.data() + g * rows * d;
      }
      Forward::Work& wk = *sc.wk;
      const int64_t t0 = blk * kTokenBlock, m = std::min(kTokenBlock, n - t0);
      poison(sc.acc);
      f.input_rows(t0, m, wk, true);
      const bool keep_root = !split.partial && f.fuses_root();
      for (int64_t g = 0; g < f.groups; ++g) {
        // The next group's W1 is prefetched: this block's next group, else the
        // first group of the next block (likely this thread's next unit).
        f.group_partial(t0, m, g, wk, sc.parts[size_t(g)], g + 1 < f.groups ? g + 1 : t0 + m < n ? 0 : -1);
        f.tree_after(m, sc.parts.data(), g, keep_root);
      }
      done(t0, m, sc.parts.data(), wk, true);
    });
    return;
  }
  // Few blocks: one work item per (block, shard), then the sums.
  const int64_t items = blocks * f.groups;
  const int64_t rows = std::min(kTokenBlock, n);
  ScratchVector<float> acc(size_t(items * rows * d));
  auto part = [&](int64_t blk, int64_t g) { return acc.data() + (blk * f.groups + g) * rows * d; };
  threads = int(std::min<int64_t>(threads, items));
  std::vector<std::optional<Forward::Work>> work(static_cast<size_t>(threads));
  auto work_of = [&](int slot) -> Forward::Work& {
    std::optional<Forward::Work>& wk = work[size_t(slot)];
    if (!wk) wk.emplace(f, rows);
    return *wk;
  };
  parallel_units(threads, items, [&](int64_t it, int slot) {
    Forward::Work& wk = work_of(slot);
    const int64_t blk = it / f.groups, g = it % f.groups;
    const int64_t t0 = blk * kTokenBlock, m = std::min(kTokenBlock, n - t0);
    f.input_rows(t0, m, wk, g == 0);
    f.group_partial(t0, m, g, wk, part(blk, g), it + 1 < items ? (it + 1) % f.groups : -1);
  });
  // The sums and the tail, each block's rows cut into one slice per thread
  // (elementwise per row: the same bits however they are cut); a few rows
  // (generation's one token) on this thread, which costs less than a job.
  const int64_t slices = n * d * f.groups >= 65536 ? threads : 1;
  parallel_units(slices > 1 ? threads : 1, blocks * slices, [&](int64_t it, int slot) {
    Forward::Work& wk = work_of(slot);
    const int64_t blk = it / slices, s = it % slices;
    const int64_t t0 = blk * kTokenBlock, m = std::min(kTokenBlock, n - t0);
    const int64_t r0 = m * s / slices, r1 = m * (s + 1) / slices;
    if (r0 == r1) return;
    std::vector<float*> parts(static_cast<size_t>(f.groups));
    for (int64_t g = 0; g < f.groups; ++g) parts[size_t(g)] = part(blk, g) + r0 * d;
    done(t0 + r0, r1 - r0, parts.data(), wk, false);
  });
}

}  // namespace ffn::nn
