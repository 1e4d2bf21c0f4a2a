#include "modules/attention_block.hpp"


#include <algorithm>
#include <cmath>

#include "core/buffer_pool.hpp"
#include "core/philox.hpp"
#include "core/thread_pool.hpp"
#include "ops/norm.hpp"
#include "reference/attention_reference.hpp"
#include "reference/linear_reference.hpp"

namespace ffn::nn {
namespace {

using Buffer = std::vector<float, PoolAllocator<float>>;

const float* ptr_or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
float* ptr_or_null(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }
const float* offset_or_null(const std::vector<float>& v, int64_t at) { return v.empty() ? nullptr : v.data() + at; }
float* offset_or_null(std::vector<float>& v, int64_t at) { return v.empty() ? nullptr : v.data() + at; }

reference::AttentionShape attention_shape(const AttentionBlockConfig& cfg, const std::vector<int64_t>& off, int64_t S,
                                          const KeysValues& kv, const BlockRun& run) {
  reference::AttentionShape a;
  a.d = cfg.qd();
  a.heads = cfg.heads;
  a.kv_heads = cfg.kv_heads;
  a.S = kv.kind == KeysValues::Kind::memory ? kv.memory_S : S;
  a.off = off;
  if (kv.kind == KeysValues::Kind::memory) {
    a.kv_base = kv.kv_base;
    a.kv_len = kv.kv_len;
  } else if (kv.kind == KeysValues::Kind::cache) {
    a.kv_len = kv.kv_len;
    a.kv_pages = &kv.cache->pages();
    a.kv_page = kv.cache->page();
  }
  a.causal = run.causal;
  if (kv.kind != KeysValues::Kind::memory) {  // self-attention's settings, not cross-attention's
    a.window = cfg.window;
    a.local = cfg.local;
    a.softcap = cfg.softcap;
    a.scale = cfg.query_scale;
    a.rel_bias = run.rel_bias;
    a.rel_span = run.rel_span;
  }
  a.dropout = cfg.dropout;
  a.training = run.training;
  a.seed = run.seed;
  return a;
}

}  // namespace

PackedAttention PackedAttention::self(const AttentionBlockWeights& w, int64_t d) {
  PackedAttention p;
  p.in = Linear(w.in_w.data(), d, 3 * d, ptr_or_null(w.in_b));
  p.out = Linear(w.out_w.data(), d, d, ptr_or_null(w.out_b));
  return p;
}

PackedAttention PackedAttention::cross(const AttentionBlockWeights& w, int64_t d) {
  PackedAttention p;
  p.q = Linear(w.in_w.data(), d, d, ptr_or_null(w.in_b));
  p.kv = Linear(w.in_w.data() + d * d, d, 2 * d, offset_or_null(w.in_b, d));
  p.out = Linear(w.out_w.data(), d, d, ptr_or_null(w.out_b));
  return p;
}

size_t AttentionSaved::bytes() const {
  return (x.size() + u.size() + r.size() + mean.size() + rstd.size() + qkv.size() + kv.size() + ctx.size() +
          lse.size()) * sizeof(float);
}

// Each of `heads` runs of dh values scaled to unit root mean square, times γ
// (transformers' RMSNorm in float32: the mean of squares, then 1/√(mean + eps)).
static void head_rms_norm(float* x, int64_t heads, int64_t dh, const float* g, float eps) {
  for (int64_t h = 0; h < heads; ++h, x += dh) {
    float ss = 0.0f;
    for (int64_t j = 0; j < dh; ++j) ss += x[j] * x[j];
    const float r = 1.0f / std::sqrt(ss / float(dh) + eps);
    for (int64_t j = 0; j < dh; ++j) x[j] = g[j] * (x[j] * r);
  }
}

void project_memory(const AttentionBlockConfig& cfg, const AttentionBlockWeights& w, const PackedAttention& pk,
                    const float* memory, int64_t m, float* kv, const BlockRun& run) {
  (void)cfg, (void)w;
  pk.kv.forward(*run.ctx, memory, m, kv, {.training = run.training, .bf16 = run.bf16});
}

void attention_block_forward(const AttentionBlockConfig& cfg, const AttentionBlockWeights& w, const PackedAttention& pk,
                             const float* x, float* out, const std::vector<int64_t>& off, int64_t S,
                             const KeysValues& kv, AttentionSaved& s, bool save, const BlockRun& run) {
  const int64_t n = off.empty() ? 0 : off.back(), d = cfg.d, H = cfg.heads;
  const int64_t qd = cfg.qd(), kvd = cfg.kvd(), width = qd + 2 * kvd;
  if ((qd != d || kvd != d || cfg.rope) && (kv.kind == KeysValues::Kind::memory || run.training))
    throw Error("attention block: head_dim, grouped-query heads and rotary positions are for inference's self-attention");
  const auto attn = attention_shape(cfg, off, S, kv, run);
  if (save) s.x.assign(x, x + n * d);
  s.mean.resize(size_t(n));
  s.rstd.resize(size_t(n));
  const float* ain = x;
  if (cfg.norm == NormPlacement::pre) {
    s.u.resize(size_t(n * d));
    norm_forward(*run.ctx, cfg.norm_type, cfg.eps, x, n, d, w.norm_w.data(), ptr_or_null(w.norm_b), s.u.data(), s.mean.data(),
                 s.rstd.data());
    ain = s.u.data();
  }
  s.ctx.resize(size_t(n * qd));
  s.lse.resize(size_t(n * H));
  if (run.observe) run.observe(ain, n);
  AttentionInput<float> in;
  if (kv.kind == KeysValues::Kind::memory) {
    // Q of the rows; K|V of the memory rows (projected here unless given).
    s.qkv.resize(size_t(n * d));
    pk.q.forward(*run.ctx, ain, n, s.qkv.data(), {.training = run.training, .bf16 = run.bf16});
    const float* kvp = kv.projected;
    if (!kvp) {
      const int64_t m = kv.memory_off.empty() ? 0 : kv.memory_off.back();
      s.kv.resize(size_t(m * 2 * d));
      project_memory(cfg, w, pk, kv.memory, m, s.kv.data(), run);
      kvp = s.kv.data();
    }
    in = {s.qkv.data(), kvp, kvp + d, d, 2 * d};
  } else {
    // Q|K|V [n, qd + 2·kvd] (3d without grouped-query heads), rotated to each row's position.
    s.qkv.resize(size_t(n * width));
    pk.in.forward(*run.ctx, ain, n, s.qkv.data(), {.training = run.training, .acts = run.acts, .bf16 = run.bf16});
    const int64_t dh = cfg.dh();
    if ((w.q_norm_w || w.k_norm_w) &&
        (!w.q_norm_w || !w.k_norm_w || int64_t(w.q_norm_w->size()) != dh || int64_t(w.k_norm_w->size()) != dh))
      throw Error("attention block: the q/k norms need γ of head_dim (" + std::to_string(dh) + ") values each, both");
    if (w.q_norm_w && run.training) throw Error("attention block: per-head q/k norms are inference's");
    // A longrope table: each sequence's rows rotate with the long factors
    // where its last position passes the original context.
    std::vector<uint8_t> long_rows;
    if (cfg.rope && !cfg.rope->long_cos.empty()) {
      long_rows.assign(size_t(n), 0);
      for (size_t b = 0; b + 1 < off.size(); ++b)
        if (off[b + 1] > off[b] && cfg.rope->long_for(kv.positions[size_t(off[b + 1] - 1)]))
          std::fill(long_rows.begin() + off[b], long_rows.begin() + off[b + 1], uint8_t(1));
    }
    if (cfg.rope || w.q_norm_w) {
      const auto rope_rows = [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
          float* row = s.qkv.data() + i * width;
          if (w.q_norm_w) {
            head_rms_norm(row, H, dh, w.q_norm_w->data(), cfg.eps);
            head_rms_norm(row + qd, kvd / dh, dh, w.k_norm_w->data(), cfg.eps);
          }
          if (!cfg.rope) continue;
          const bool lng = !long_rows.empty() && long_rows[size_t(i)];
          rope_apply(*cfg.rope, row, H, dh, kv.positions[size_t(i)], lng);
          rope_apply(*cfg.rope, row + qd, kvd / dh, dh, kv.positions[size_t(i)], lng);
        }
      };
      if (n > 16) run.ctx->parallel_range(n, grain_for(n, run.ctx->threads()), rope_rows);
      else rope_rows(0, n, 0);
    }
    in = {s.qkv.data(), s.qkv.data() + qd, s.qkv.data() + qd + kvd, width, width};
    if (kv.kind == KeysValues::Kind::cache) {
      float* K = kv.cache->k(kv.layer);
      float* V = kv.cache->v(kv.layer);
      for (int64_t i = 0; i < n; ++i) {
        const float* row = s.qkv.data() + i * width;
        std::copy(row + qd, row + qd + kvd, K + kv.write[size_t(i)] * kvd);
        std::copy(row + qd + kvd, row + width, V + kv.write[size_t(i)] * kvd);
      }
      in = {s.qkv.data(), K, V, width, kvd};
    }
  }
  if (n > 0) {
    if (run.ctx->reference())
      reference::attention_forward(attn, in, s.ctx.data(), s.lse.data());
    else
      attention_forward(*run.ctx, attn, in, s.ctx.data(), s.lse.data());
  }
  pk.out.forward(*run.ctx, s.ctx.data(), n, out, {.training = run.training, .acts = run.acts, .bf16 = run.bf16});
  if (w.post_norm_w) {
    if (cfg.norm != NormPlacement::pre || run.training)
      throw Error("attention block: a norm after the attention is pre-LN inference's");
    norm_forward(*run.ctx, cfg.norm_type, cfg.eps, out, n, d, w.post_norm_w->data(), nullptr, out, s.mean.data(),
                 s.rstd.data());
  }
  const auto rule = DropoutRule::make(run.training ? cfg.dropout : 0.0f);
  const auto residual_rows = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < d; ++j) {
        const float f = rule.factor(run.seed, Stream::attention_output, uint64_t(i * d + j));
        out[i * d + j] = x[i * d + j] + out[i * d + j] * f;
      }
  };
  if (n * d > 65536) run.ctx->parallel_range(n, grain_for(n, run.ctx->threads()), residual_rows);
  else residual_rows(0, n, 0);
  if (cfg.norm == NormPlacement::post) {
    if (save) s.r.assign(out, out + n * d);
    // In place: each row's statistics are taken before any of it is written.
    norm_forward(*run.ctx, cfg.norm_type, cfg.eps, out, n, d, w.norm_w.data(), ptr_or_null(w.norm_b), out, s.mean.data(),
                 s.rstd.data());
  }
}

void attention_block_backward(const AttentionBlockConfig& cfg, const AttentionBlockWeights& w,
                              const std::vector<int64_t>& off, int64_t S, const KeysValues& kv,
                              const AttentionSaved& s, const float* dout, float* dx, float* dmemory,
                              AttentionBlockGrads& g, const BlockRun& run) {
  if (kv.kind == KeysValues::Kind::cache) throw Error("backward: incremental decoding (a key/value cache) is inference only");
  const Context& ctx = *run.ctx;
  const int64_t n = off.empty() ? 0 : off.back(), d = cfg.d;
  const int threads = ctx.threads();
  const auto attn = attention_shape(cfg, off, S, kv, run);
  const bool post = cfg.norm == NormPlacement::post, cross = kv.kind == KeysValues::Kind::memory;
  // dr: the gradient of the residual sum x + Drop(a).
  Buffer dr(size_t(n * d));
  if (post)
    norm_backward(ctx, cfg.norm_type, s.r.data(), s.mean.data(), s.rstd.data(), n, d, w.norm_w.data(), dout, dr.data(),
                  false, g.norm_w.data(), ptr_or_null(g.norm_b));
  else
    std::copy(dout, dout + n * d, dr.begin());
  std::copy(dr.begin(), dr.end(), dx);  // the residual path
  const auto rule = DropoutRule::make(run.training ? cfg.dropout : 0.0f);
  if (rule.active())
  {
    const auto dropout_rows = [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < d; ++j)
          dr[size_t(i * d + j)] *= rule.factor(run.seed, Stream::attention_output, uint64_t(i * d + j));
    };
    if (n * d > 65536) parallel_range(threads, n, grain_for(n, threads), dropout_rows);
    else dropout_rows(0, n, 0);
  }
  Buffer dctx(size_t(n * d));
  linear_backward(ctx, s.ctx.data(), n, d, w.out_w.data(), d, dr.data(), dctx.data(), false, g.out_w.data(),
                  ptr_or_null(g.out_b));
  const float* ain = post ? s.x.data() : s.u.data();
  // dq [n, d] (cross) or dqkv [n, 3d] (self); dkv [m, 2d] (cross).
  const int64_t m = cross ? (kv.memory_off.empty() ? 0 : kv.memory_off.back()) : 0;
  Buffer dq(size_t(n * (cross ? d : 3 * d))), dkv(size_t(m * 2 * d));
  const float* kvp = cross ? (kv.projected ? kv.projected : s.kv.data()) : nullptr;
  const AttentionInput<float> in = cross ? AttentionInput<float>{s.qkv.data(), kvp, kvp + d, d, 2 * d}
                                         : AttentionInput<float>::packed(s.qkv.data(), d);
  const AttentionGrad<float> ga = cross ? AttentionGrad<float>{dq.data(), dkv.data(), dkv.data() + d, d, 2 * d}
                                        : AttentionGrad<float>::packed(dq.data(), d);
  if (cross) std::fill(dkv.begin(), dkv.end(), 0.0f);  // memory rows no query sees
  if (n > 0) {
    if (ctx.reference())
      reference::attention_backward(attn, in, dctx.data(), ga);
    else
      attention_backward(ctx, attn, in, s.ctx.data(), s.lse.data(), dctx.data(), ga);
  }
  const int64_t qm = cross ? d : 3 * d;  // the outputs of the rows' projection
  Buffer du(post ? 0 : size_t(n * d));
  float* da = post ? dx : du.data();
  linear_backward(ctx, ain, n, d, w.in_w.data(), qm, dq.data(), da, post, g.in_w.data(),
                  ptr_or_null(g.in_b));
  if (!post)
    norm_backward(ctx, cfg.norm_type, s.x.data(), s.mean.data(), s.rstd.data(), n, d, w.norm_w.data(), du.data(), dx, true,
                  g.norm_w.data(), ptr_or_null(g.norm_b));
  if (cross)
    linear_backward(ctx, kv.memory, m, d, w.in_w.data() + d * d, 2 * d, dkv.data(), dmemory, true,
                    g.in_w.data() + d * d, offset_or_null(g.in_b, d));
}

}  // namespace ffn::nn
