#include "nn/fused_forward.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "nn/activation.hpp"
#include "nn/philox.hpp"

namespace ffn::nn {
namespace {

constexpr int64_t kTokenBlock = 16;   // tokens per block (rows of X_b, H_c, Y_b)
constexpr int64_t kChunk = 256;       // d_ff columns per chunk (width of H_c)

// out[d] = Norm(v[d]) with γ, β; writes xhat/mean/rstd when asked.
void normalize_row(NormType type, const float* v, int64_t d, float eps, const float* gamma, const float* beta,
                   float* out, float* xhat_out, float* mean_out, float* rstd_out) {
  float mean = 0.0f;
  if (type == NormType::layernorm) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; ++j) s += v[j];
    mean = s / float(d);
  }
  float var = 0.0f;
  for (int64_t j = 0; j < d; ++j) var += (v[j] - mean) * (v[j] - mean);
  var /= float(d);
  const float rstd = 1.0f / std::sqrt(var + eps);
  for (int64_t j = 0; j < d; ++j) {
    const float xh = (v[j] - mean) * rstd;
    if (xhat_out) xhat_out[j] = xh;
    out[j] = xh * gamma[j] + (beta ? beta[j] : 0.0f);
  }
  if (mean_out) *mean_out = mean;
  if (rstd_out) *rstd_out = rstd;
}

}  // namespace

PackedWeights PackedWeights::pack(const Config& cfg, const Weights& w) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  PackedWeights p;
  auto transpose = [](const std::vector<float>& src, int64_t rows, int64_t cols) {
    std::vector<float> t(src.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = src[r * cols + c];
    return t;
  };
  p.w1t = transpose(w.w1, F, d);
  if (is_gated(cfg.activation)) p.wgt = transpose(w.wg, F, d);
  p.w2t = transpose(w.w2, d, F);
  return p;
}

void fused_forward(const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x, int64_t n,
                   const int64_t* pos, bool training, uint64_t seed, int threads, float* y,
                   const FusedSaved* saved) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  const bool gated = is_gated(cfg.activation);
  const Unit unit = unit_of(cfg.activation);
  const DropoutRule hid_rule = DropoutRule::make(training ? cfg.dropout_hidden : 0.0f);
  const DropoutRule out_rule = DropoutRule::make(training ? cfg.dropout_output : 0.0f);
  const float* b1 = w.b1.empty() ? nullptr : w.b1.data();
  const float* bg = w.bg.empty() ? nullptr : w.bg.data();
  const float* b2 = w.b2.empty() ? nullptr : w.b2.data();
  const float* gamma = w.norm_weight.empty() ? nullptr : w.norm_weight.data();
  const float* beta = w.norm_bias.empty() ? nullptr : w.norm_bias.data();
  const int64_t blocks = (n + kTokenBlock - 1) / kTokenBlock;
  threads = int(std::max<int64_t>(1, std::min<int64_t>(threads, blocks)));

#pragma omp parallel num_threads(threads)
  {
    // Per-thread buffers: the FFN input block, the hidden chunk(s), the output block.
    std::vector<float> in(kTokenBlock * d), z1(kTokenBlock * kChunk), zg(gated ? kTokenBlock * kChunk : 0);
    std::vector<float> acc(kTokenBlock * d), row(d);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t t0 = blk * kTokenBlock;
      const int64_t m = std::min(kTokenBlock, n - t0);
      // 1. FFN input: x, or Norm(x) for pre-LN
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = x + (t0 + r) * d;
        if (cfg.norm == NormPlacement::pre) {
          normalize_row(cfg.norm_type, xr, d, cfg.eps, gamma, beta, in.data() + r * d, nullptr,
                        saved && saved->mean ? saved->mean + t0 + r : nullptr,
                        saved && saved->rstd ? saved->rstd + t0 + r : nullptr);
        } else {
          std::copy(xr, xr + d, in.data() + r * d);
        }
      }
      std::fill(acc.begin(), acc.begin() + m * d, 0.0f);
      // 2. Walk d_ff in chunks: H_c = act(in · W1[c]ᵀ + b1[c]); acc += H_c · W2[:, c]ᵀ
      for (int64_t c0 = 0; c0 < F; c0 += kChunk) {
        const int64_t fc = std::min(kChunk, F - c0);
        for (int64_t r = 0; r < m; ++r) {
          float* z = z1.data() + r * kChunk;
          float* g = gated ? zg.data() + r * kChunk : nullptr;
          const float* ir = in.data() + r * d;
          std::fill(z, z + fc, 0.0f);
          if (g) std::fill(g, g + fc, 0.0f);
          for (int64_t k = 0; k < d; ++k) {
            const float a = ir[k];
            const float* w1k = pw.w1t.data() + k * F + c0;
            for (int64_t j = 0; j < fc; ++j) z[j] += a * w1k[j];
            if (g) {
              const float* wgk = pw.wgt.data() + k * F + c0;
              for (int64_t j = 0; j < fc; ++j) g[j] += a * wgk[j];
            }
          }
          if (b1)
            for (int64_t j = 0; j < fc; ++j) z[j] += b1[c0 + j];
          if (g && bg)
            for (int64_t j = 0; j < fc; ++j) g[j] += bg[c0 + j];
          if (saved) {
            std::copy(z, z + fc, saved->z1 + (t0 + r) * F + c0);
            if (g) std::copy(g, g + fc, saved->zg + (t0 + r) * F + c0);
          }
          // Activation (and gate) in place into z, then the hidden dropout.
          for (int64_t j = 0; j < fc; ++j) z[j] = g ? act(unit, g[j]) * z[j] : act(unit, z[j]);
          if (hid_rule.active()) {
            const uint64_t base = uint64_t(pos[t0 + r] * F + c0);
            for (int64_t j = 0; j < fc; ++j) z[j] *= hid_rule.factor(seed, Stream::dropout_hidden, base + j);
          }
          // acc[r, :] += Σ_j h[j] · W2ᵀ[c0 + j, :]
          float* ar = acc.data() + r * d;
          for (int64_t j = 0; j < fc; ++j) {
            const float h = z[j];
            const float* w2j = pw.w2t.data() + (c0 + j) * d;
            for (int64_t c = 0; c < d; ++c) ar[c] += h * w2j[c];
          }
        }
      }
      // 3. Epilogue on finished rows: + b2, output dropout, residual, norm.
      for (int64_t r = 0; r < m; ++r) {
        const int64_t t = t0 + r;
        float* ar = acc.data() + r * d;
        if (b2)
          for (int64_t c = 0; c < d; ++c) ar[c] += b2[c];
        if (out_rule.active()) {
          const uint64_t base = uint64_t(pos[t] * d);
          for (int64_t c = 0; c < d; ++c) ar[c] *= out_rule.factor(seed, Stream::dropout_output, base + c);
        }
        const float* xr = x + t * d;
        float* yr = y + t * d;
        switch (cfg.norm) {
          case NormPlacement::none:
            std::copy(ar, ar + d, yr);
            break;
          case NormPlacement::pre:
            for (int64_t c = 0; c < d; ++c) yr[c] = xr[c] + ar[c];
            break;
          case NormPlacement::post:
            for (int64_t c = 0; c < d; ++c) row[c] = xr[c] + ar[c];
            normalize_row(cfg.norm_type, row.data(), d, cfg.eps, gamma, beta, yr,
                          saved && saved->xhat ? saved->xhat + t * d : nullptr, nullptr,
                          saved && saved->rstd ? saved->rstd + t : nullptr);
            break;
        }
      }
    }
  }
}

}  // namespace ffn::nn
