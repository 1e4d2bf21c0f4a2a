#include "ops/linear.hpp"

#include <algorithm>

#include "backends/cpu/gemm.hpp"
#include "core/aligned.hpp"
#include "core/thread_pool.hpp"
#include "ops/qlinear.hpp"
#include "reference/linear_reference.hpp"

namespace ffn::nn {

namespace {
// y[i, j] += b[j] (b may be null), over the pool for a large y.
void add_bias(int threads, const float* b, int64_t n, int64_t m, float* y) {
  if (!b) return;
  const auto rows = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < m; ++j) y[i * m + j] += b[j];
  };
  if (n * m > 65536) parallel_range(threads, n, grain_for(n, threads), rows);
  else rows(0, n, 0);
}
}  // namespace

std::vector<float> pack_linear_weight(const float* w, int64_t k, int64_t m) { return pack_panels(w, k, m, true); }

void linear_forward(const Context& ctx, const float* x, int64_t n, int64_t k, const float* w,
                    const std::vector<float>& packed, const float* b, int64_t m, float* y) {
  const KernelConfig& kc = ctx.kernels();
  const bool reference = ctx.reference();
  const int threads = ctx.threads();
  if (n == 0) return;
  if (reference) {
    reference::linear_forward(x, n, k, w, b, m, y);
    return;
  }
  GemmArgs g;
  g.m = n; g.n = m; g.k = k;
  g.a = x; g.rsa = k; g.csa = 1;
  g.b = packed.data(); g.ldb = kPanel; g.psb = k * kPanel;
  g.c = y; g.ldc = m;
  gemm(kc.f32, g, threads);
  add_bias(threads, b, n, m, y);
}

template <typename TB>
void linear_forward_16(const Context& ctx, const float* x, int64_t n, int64_t k, const TB* packed, const float* b,
                       int64_t m, float* y) {
  const int threads = ctx.threads();
  if (n == 0) return;
  GemmArgsT<TB> g;
  g.m = n; g.n = m; g.k = k;
  g.a = x; g.rsa = k; g.csa = 1;
  g.b = packed; g.ldb = kPanel; g.psb = k * kPanel;
  g.c = y; g.ldc = m;
  gemm_packed(ctx.kernels().f32, g, threads);
  add_bias(threads, b, n, m, y);
}
template void linear_forward_16<bf16_t>(const Context&, const float*, int64_t, int64_t, const bf16_t*, const float*,
                                        int64_t, float*);
template void linear_forward_16<fp16_t>(const Context&, const float*, int64_t, int64_t, const fp16_t*, const float*,
                                        int64_t, float*);

// dx[n, k] = dy W (or += when accumulate), dW[m, k] = dyᵀ x, db[m] = Σ dy.
void linear_backward(const Context& ctx, const float* x, int64_t n, int64_t k, const float* w, int64_t m,
                     const float* dy, float* dx, bool accumulate, float* dw, float* db) {
  const KernelConfig& kc = ctx.kernels();
  const bool reference = ctx.reference();
  const int threads = ctx.threads();
  if (reference) {
    reference::linear_backward(x, n, k, w, m, dy, dx, accumulate, dw);
  } else {
    GemmArgs g;  // dx = dy · W
    g.m = n; g.n = k; g.k = m;
    g.a = dy; g.rsa = m; g.csa = 1;
    g.b = w; g.ldb = k; g.psb = kPanel;
    g.c = dx; g.ldc = k;
    g.accumulate = accumulate;
    if (n > 0) gemm(kc.f32, g, threads);
    GemmArgs h;  // dW = dyᵀ · x
    h.m = m; h.n = k; h.k = n;
    h.a = dy; h.rsa = 1; h.csa = m;
    h.b = x; h.ldb = k; h.psb = kPanel;
    h.c = dw; h.ldc = k;
    gemm(kc.f32, h, threads);
  }
  if (db) {
    std::vector<double> s(size_t(m), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) s[size_t(j)] += double(dy[i * m + j]);
    for (int64_t j = 0; j < m; ++j) db[j] = float(s[size_t(j)]);
  }
}

// ---- int8 --------------------------------------------------------------------

Int8Linear quantize_linear(const float* w, int64_t k, int64_t m, const std::vector<int64_t>& fp32_inputs,
                           const std::string& name) {
  if (k < 1 || m < 1)
    throw Error(name + ": int8 weights of shape [" + std::to_string(m) + ", " + std::to_string(k) +
                "]; expected at least one row and one column");
  check_fp32_inputs(fp32_inputs, k, name + " fp32 input channels");
  Int8Linear q;
  q.k = k;
  q.m = m;
  q.fp32_inputs = fp32_inputs;
  std::vector<float> v(w, w + k * m);
  q.w32.resize(fp32_inputs.size() * size_t(m));
  for (size_t s = 0; s < fp32_inputs.size(); ++s)
    for (int64_t j = 0; j < m; ++j) {
      float& c = v[size_t(j * k + fp32_inputs[s])];
      q.w32[s * size_t(m) + size_t(j)] = c;
      c = 0.0f;
    }
  QMatrix qm = quantize_matrix(v, m, k, WeightDtype::int8, name);
  q.q = std::move(qm.q);
  q.scale = std::move(qm.scale);
  return q;
}

const AlignedVector<int8_t>& Int8Linear::pairs() const {
  std::call_once(packs->pairs_once, [&] { packs->pairs = pack_panels_s8(q, k, m); });
  return packs->pairs;
}

const S8Quads& Int8Linear::quads() const {
  std::call_once(packs->quads_once, [&] { packs->quads = pack_panels_s8_quads(q, k, m, k); });
  return packs->quads;
}

// Units of 48 rows × 256 output columns (the int32 sums stay in L1/L2), row
// block by row block: a thread quantizes a row block once for the column
// blocks it takes in a row. Each output is one unit's: the same bits for any
// thread count. Where the kernel set has the u8 × s8 product (VNNI, AMX) the
// rows are quantized to u8 levels and zero points instead of int16 values:
// the same levels and the same int32 sums (src/backends/cpu/gemm.hpp), a
// quarter of the instructions per product.
void linear_forward_int8(const Context& ctx, const Int8Linear& w, const float* x, int64_t n, const float* b,
                         float* y) {
  const KernelConfig& kc = ctx.kernels();
  const int threads = ctx.threads();
  constexpr int64_t kRows = 48, kCols = 256;
  if (n == 0) return;
  const Int8Kernels& ik = *kc.int8;
  const bool u8 = ik.igemm_u8 != nullptr;
  const int64_t k = w.k, m = w.m, n32 = int64_t(w.fp32_inputs.size());
  const int64_t kp = (k + 1) / 2, kq = (k + 3) / 4, lda = u8 ? 4 * kq : 2 * kp;
  const AlignedVector<int8_t>* pairs = u8 ? nullptr : &w.pairs();
  const S8Quads* quads = u8 ? &w.quads() : nullptr;
  const int64_t row_blocks = (n + kRows - 1) / kRows, col_blocks = (m + kCols - 1) / kCols;
  const int64_t units = row_blocks * col_blocks;
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>({threads, units, n * m * k / 65536 + 1})));
  // Each thread's scratch, made at its first unit; a / au hold the row block
  // it quantized last (units go row block by row block, so a thread taking
  // the next column block of the same rows reuses it).
  struct Scratch {
    ScratchVector<int16_t> a;
    ScratchVector<uint8_t> au;
    ScratchVector<int32_t> zp, acc;
    ScratchVector<float> sa, row, x32, prev;
    int64_t quantized = -1;  // the row block a / au hold
  };
  std::vector<Scratch> scratch(static_cast<size_t>(nt));
  parallel_units(nt, units, [&](int64_t u, int slot) {
      Scratch& t = scratch[size_t(slot)];
      if (t.acc.empty()) {
        if (u8) t.au.resize(static_cast<size_t>(kRows * lda)), t.zp.resize(static_cast<size_t>(kRows));
        else t.a.resize(static_cast<size_t>(kRows * lda));
        t.sa.resize(static_cast<size_t>(kRows));
        t.row.resize(static_cast<size_t>(k));
        t.x32.resize(static_cast<size_t>(kRows * n32));
        if (n32 > 0) t.prev.resize(static_cast<size_t>(kRows * kCols));
        t.acc.resize(static_cast<size_t>(kRows * kCols));
      }
      const int64_t r0 = u / col_blocks * kRows, c0 = u % col_blocks * kCols;
      const int64_t rows = std::min(kRows, n - r0), cols = std::min(kCols, m - c0);
      if (t.quantized != r0) {
        for (int64_t r = 0; r < rows; ++r) {
          const float* src = x + (r0 + r) * k;
          if (n32 > 0) {  // the fp32 channels: kept aside, zero in the quantized row
            std::copy(src, src + k, t.row.data());
            for (int64_t s = 0; s < n32; ++s) {
              t.x32[size_t(r * n32 + s)] = src[w.fp32_inputs[size_t(s)]];
              t.row[size_t(w.fp32_inputs[size_t(s)])] = 0.0f;
            }
            src = t.row.data();
          }
          t.sa[size_t(r)] = u8 ? ik.quantize_row_u8(src, k, t.au.data() + r * lda, t.zp.data() + r)
                               : ik.quantize_row(src, k, t.a.data() + r * lda);
        }
        t.quantized = r0;
      }
      if (u8) {
        U8GemmArgs g;
        g.m = rows; g.n = cols; g.kq = kq;
        g.a = t.au.data(); g.lda = lda; g.zp = t.zp.data();
        g.psb = kq * 64;
        g.b = quads->b.data() + (c0 / kPanel) * g.psb;
        g.colsum = quads->colsum.data() + c0;
        g.c = t.acc.data(); g.ldc = kCols;
        ik.igemm_u8(g);
      } else {
        IGemmArgs g;
        g.m = rows; g.n = cols; g.kp = kp;
        g.a = t.a.data(); g.lda = lda;
        g.psb = kp * 32;
        g.b = pairs->data() + (c0 / kPanel) * g.psb;
        g.c = t.acc.data(); g.ldc = kCols;
        ik.igemm(g);
      }
      if (n32 > 0) ik.fp32_part(t.x32.data(), n32, rows, w.w32.data() + c0, m, b ? b + c0 : nullptr, cols,
                                t.prev.data(), kCols);
      for (int64_t r = 0; r < rows; ++r) {
        const float* pv = n32 > 0 ? t.prev.data() + r * kCols : b ? b + c0 : nullptr;
        ik.dequant(t.acc.data() + r * kCols, cols, t.sa[size_t(r)], w.scale.data() + c0, pv, y + (r0 + r) * m + c0);
      }
  });
}

// Units of 64 rows × 256 output columns, row block by row block: a thread
// rounds a row block into the kernel set's A layout once for the column
// blocks it takes in a row, and adds the bias while the unit's C is in L1.
void linear_forward_bf16(const Context& ctx, const float* x, int64_t n, int64_t k, const uint16_t* pairs,
                         const float* b, int64_t m, float* y) {
  constexpr int64_t kRows = 64, kCols = 256;  // kRows: a multiple of every a_rows; kCols: of 2 panels
  if (n == 0) return;
  const Bf16Kernels& kern = ctx.kernels().bf16 ? *ctx.kernels().bf16 : scalar::bf16_kernels;
  const int64_t kk = bf16_kpad(k);
  const int64_t row_blocks = (n + kRows - 1) / kRows, col_blocks = (m + kCols - 1) / kCols;
  const int64_t units = row_blocks * col_blocks;
  const int nt = int(std::max<int64_t>(1, std::min<int64_t>({ctx.threads(), units, n * m * k / 65536 + 1})));
  struct Scratch {
    ScratchVector<uint16_t> a;
    int64_t packed = -1;  // the row block a holds
  };
  std::vector<Scratch> scratch(static_cast<size_t>(nt));
  parallel_units(nt, units, [&](int64_t u, int slot) {
    Scratch& t = scratch[size_t(slot)];
    if (t.a.empty()) t.a.resize(static_cast<size_t>(bf16_a_size(kern, kRows, kk)));
    const int64_t r0 = u / col_blocks * kRows, c0 = u % col_blocks * kCols;
    const int64_t rows = std::min(kRows, n - r0), cols = std::min(kCols, m - c0);
    if (t.packed != r0) {
      pack_a_bf16(kern, x + r0 * k, rows, k, k, kk, t.a.data());
      t.packed = r0;
    }
    Bf16GemmArgs g;
    g.m = rows; g.n = cols; g.kp = kk / 2;
    g.a = t.a.data();
    g.psb = kk * kPanel;
    g.b = pairs + (c0 / kPanel) * g.psb;
    g.c = y + r0 * m + c0; g.ldc = m;
    kern.gemm(g);
    if (b)
      for (int64_t r = 0; r < rows; ++r) {
        float* yr = y + (r0 + r) * m + c0;
        for (int64_t j = 0; j < cols; ++j) yr[j] += b[c0 + j];
      }
  });
}

// ---- the linear layer -----------------------------------------------------

Linear::Linear(const float* w, int64_t k, int64_t m, const float* b)
    : k_(k), m_(m), packed_(pack_linear_weight(w, k, m)), bias_(b ? std::vector<float>(b, b + m) : std::vector<float>()) {}

Linear::Linear(const uint16_t* w, int64_t k, int64_t m, WeightDtype dtype, const float* b)
    : k_(k), m_(m), storage_(dtype), bias_(b ? std::vector<float>(b, b + m) : std::vector<float>()) {
  if (dtype != WeightDtype::bf16 && dtype != WeightDtype::fp16)
    throw Error("Linear: 16-bit weights must be bf16 or fp16, not " + std::string(to_string(dtype)));
  packed16_ = pack_panels_16(std::vector<uint16_t>(w, w + k * m), k, m, dtype == WeightDtype::bf16);
}

Linear Linear::rounded(const float* w, int64_t k, int64_t m, WeightDtype dtype, const float* b) {
  if (dtype == WeightDtype::fp32) return Linear(w, k, m, b);
  if (dtype != WeightDtype::bf16 && dtype != WeightDtype::fp16)
    throw Error("Linear: weights rounded to " + std::string(to_string(dtype)) +
                ": expected fp32, bf16 or fp16 (int8 is set beside fp32)");
  std::vector<uint16_t> h(size_t(k * m));
  for (size_t i = 0; i < h.size(); ++i) h[i] = dtype == WeightDtype::bf16 ? float_to_bf16(w[i]) : float_to_fp16(w[i]);
  return Linear(h.data(), k, m, dtype, b);
}

Linear::Linear(QPanels q, const float* b) : k_(q.k), m_(q.m), blocks_(true) {
  q_.push_back(std::move(q));
  if (b) bias_.assign(b, b + m_);
}

Linear::Linear(std::vector<QPanels> parts, const float* b) : blocks_(true), q_(std::move(parts)) {
  if (q_.empty()) throw Error("Linear: quantized weights with no parts");
  k_ = q_[0].k;
  for (const QPanels& p : q_) {
    if (p.k != k_)
      throw Error("Linear: quantized parts of k = " + std::to_string(k_) + " and " + std::to_string(p.k));
    m_ += p.m;
  }
  if (b) bias_.assign(b, b + m_);
}

void Linear::set_int8(std::shared_ptr<const Int8Linear> q) {
  if (q && (blocks_ || storage_ != WeightDtype::fp32 || q->k != k_ || q->m != m_))
    throw Error("Linear: int8 weights [" + std::to_string(q->m) + ", " + std::to_string(q->k) +
                "] set on a layer that is not fp32 [" + std::to_string(m_) + ", " + std::to_string(k_) + "]");
  int8_ = std::move(q);
}

void Linear::row(int64_t r, float* out) const {
  if (r < 0 || r >= m_)
    throw Error("Linear: row " + std::to_string(r) + " of a layer of " + std::to_string(m_) + " rows");
  if (blocks_) {
    for (const QPanels& p : q_) {
      if (r < p.m) return dequantize_panel_row(p, r, out);
      r -= p.m;
    }
    return;
  }
  if (storage_ != WeightDtype::fp32) {  // 16-bit panels: bf16 lanes interleaved (gemm.hpp)
    const bool bf16 = storage_ == WeightDtype::bf16;
    const uint16_t* panel = packed16_.data() + (r / kPanel) * k_ * kPanel + (bf16 ? bf16_slot(r % kPanel) : r % kPanel);
    for (int64_t p = 0; p < k_; ++p) out[p] = bf16 ? bf16_to_float(panel[p * kPanel]) : fp16_to_float(panel[p * kPanel]);
    return;
  }
  // Column r of the panels B(p, j) = W[j, p] (gemm.hpp): panel r / 16, lane r % 16.
  const float* panel = packed_.data() + (r / kPanel) * k_ * kPanel + r % kPanel;
  for (int64_t p = 0; p < k_; ++p) out[p] = panel[p * kPanel];
}

const AlignedVector<uint16_t>& Linear::bf16_pairs() const {
  std::call_once(bf16_->once, [&] {
    std::vector<float> w(size_t(m_ * k_));
    for (int64_t r = 0; r < m_; ++r) row(r, w.data() + r * k_);
    bf16_->pairs = pack_panels_bf16(w.data(), k_, m_);
  });
  return bf16_->pairs;
}

void Linear::forward(const Context& ctx, const float* x, int64_t n, float* y, const Run& run) const {
  const float* b = bias_.empty() ? nullptr : bias_.data();
  if (run.bf16 && !run.training && !blocks_ && !int8_) {
    if (ctx.reference()) {
      std::vector<float> w(size_t(m_ * k_));
      for (int64_t r = 0; r < m_; ++r) row(r, w.data() + r * k_);
      reference::linear_forward_bf16(x, n, k_, w.data(), b, m_, y);
    } else {
      linear_forward_bf16(ctx, x, n, k_, bf16_pairs().data(), b, m_, y);
    }
    return;
  }
  if (blocks_) {
    QActs local;
    qlinear_forward(ctx, q_, x, n, y, run.acts ? *run.acts : local);
    if (b)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m_; ++j) y[i * m_ + j] += b[j];
    return;
  }
  if (int8_ && !run.training && (ctx.reference() || int8_linear_supported(ctx.kernels()))) {
    const Int8Linear& q = *int8_;
    if (ctx.reference())
      reference::linear_forward_int8(x, n, k_, q.q.data(), q.scale.data(), q.fp32_inputs.data(),
                                     int64_t(q.fp32_inputs.size()), q.w32.data(), b, m_, y);
    else
      linear_forward_int8(ctx, q, x, n, b, y);
    return;
  }
  if (ctx.reference()) {  // the reference reads W's rows (widened): back from the panels
    std::vector<float> w(size_t(m_ * k_));
    for (int64_t r = 0; r < m_; ++r) row(r, w.data() + r * k_);
    linear_forward(ctx, x, n, k_, w.data(), packed_, b, m_, y);
    return;
  }
  if (storage_ == WeightDtype::bf16)
    linear_forward_16(ctx, x, n, k_, reinterpret_cast<const bf16_t*>(packed16_.data()), b, m_, y);
  else if (storage_ == WeightDtype::fp16)
    linear_forward_16(ctx, x, n, k_, reinterpret_cast<const fp16_t*>(packed16_.data()), b, m_, y);
  else
    linear_forward(ctx, x, n, k_, nullptr, packed_, b, m_, y);
}

size_t Linear::bytes() const {
  size_t qb = 0;
  for (const QPanels& p : q_) qb += p.bytes();
  return (blocks_ ? qb : packed_.size() * sizeof(float)) + packed16_.size() * sizeof(uint16_t) +
         bias_.size() * sizeof(float);
}

}  // namespace ffn::nn
