// Cache blocking, threading and packing around the per-ISA block kernels.
#include "backends/cpu/gemm.hpp"

#include <algorithm>
#include <memory>

#if defined(__SSE2__)
#include <immintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "core/thread_pool.hpp"

namespace ffn::nn {

namespace {
constexpr int64_t kPackRows = 2048;  // rows of A packed at once (2 MiB at k = 256)

#if defined(__SSE__)
// dst[c·ldd + r] = a[r·lda + c] for r, c < 4.
inline void transpose4(const float* a, int64_t lda, float* dst, int64_t ldd) {
  __m128 v0 = _mm_loadu_ps(a), v1 = _mm_loadu_ps(a + lda), v2 = _mm_loadu_ps(a + 2 * lda), v3 = _mm_loadu_ps(a + 3 * lda);
  _MM_TRANSPOSE4_PS(v0, v1, v2, v3);
  _mm_storeu_ps(dst, v0);
  _mm_storeu_ps(dst + ldd, v1);
  _mm_storeu_ps(dst + 2 * ldd, v2);
  _mm_storeu_ps(dst + 3 * ldd, v3);
}
#endif
}  // namespace

void transpose_into(const float* a, int64_t lda, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  int64_t r4 = 0, c4 = 0;
#if defined(__SSE__)
  r4 = rows / 4 * 4;
  c4 = cols / 4 * 4;
  // 16 rows of a at a time where there are: each row of dst gets 16
  // consecutive floats (a whole cache line when aligned) before the next.
  int64_t r = 0;
  for (; r + 16 <= r4; r += 16)
    for (int64_t j = 0; j < c4; j += 4)
      for (int64_t i = r; i < r + 16; i += 4) transpose4(a + i * lda + j, lda, dst + j * ldd + i, ldd);
  for (; r < r4; r += 4)
    for (int64_t j = 0; j < c4; j += 4) transpose4(a + r * lda + j, lda, dst + j * ldd + r, ldd);
#endif
  // What the 4 × 4 blocks left: the last columns of the first r4 rows, then
  // the last rows (everything, without SSE).
  for (int64_t i = 0; i < r4; ++i)
    for (int64_t j = c4; j < cols; ++j) dst[j * ldd + i] = a[i * lda + j];
  for (int64_t i = r4; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * ldd + i] = a[i * lda + j];
}

void row_sums(const float* a, int64_t lda, int64_t rows, int64_t cols, float* out) {
  int64_t r = 0;
#if defined(__SSE__)
  // Four rows per vector lane set, four sets at once (independent chains);
  // 4 × 4 blocks transposed so that lane i adds row i's elements in order.
  auto sum4 = [&](int64_t r0, int sets) {
    __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    const int64_t c4 = cols / 4 * 4;
    for (int64_t j = 0; j < c4; j += 4)
      for (int s = 0; s < sets; ++s) {
        const float* b = a + (r0 + 4 * s) * lda + j;
        __m128 v0 = _mm_loadu_ps(b), v1 = _mm_loadu_ps(b + lda), v2 = _mm_loadu_ps(b + 2 * lda),
               v3 = _mm_loadu_ps(b + 3 * lda);
        _MM_TRANSPOSE4_PS(v0, v1, v2, v3);
        acc[s] = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(acc[s], v0), v1), v2), v3);
      }
    for (int s = 0; s < sets; ++s) {
      alignas(16) float lane[4];
      _mm_store_ps(lane, acc[s]);
      for (int i = 0; i < 4; ++i) {
        const float* row = a + (r0 + 4 * s + i) * lda;
        for (int64_t j = c4; j < cols; ++j) lane[i] += row[j];
        out[r0 + 4 * s + i] = lane[i];
      }
    }
  };
  for (; r + 16 <= rows; r += 16) sum4(r, 4);
  for (; r + 4 <= rows; r += 4) sum4(r, 1);
#endif
  for (; r < rows; ++r) {
    float s = 0.0f;
    for (int64_t j = 0; j < cols; ++j) s += a[r * lda + j];
    out[r] = s;
  }
}

namespace {
// dst[i * k + p] = a[i * rsa + p * csa] for i < m, p < k: an A stored with
// long row strides copied into row-major rows. The usual case is a
// transposed operand (rsa = 1: column p of dst is row p of a), done in 4 × 4
// SSE transposes (transpose_into), so reads and writes both run along cache
// lines; an element-by-element copy costs a third of a weight-gradient product.
void pack_rows(const float* a, int64_t rsa, int64_t csa, int64_t m, int64_t k, float* dst) {
  if (rsa == 1) return transpose_into(a, csa, k, m, dst, k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) dst[i * k + p] = a[i * rsa + p * csa];
}

// C rows [m0, m1) × panels [p0, p1), all of k, on the calling thread.
// Operands the micro-kernel would read with long strides are copied first
// into the layouts it streams best (copying changes no arithmetic): a B given
// as a plain row-major matrix into 16-column panels, an A given column-major
// (csa ≠ 1) into row-major blocks.
void run_range(const F32Gemm& gk, const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const GemmBlockFn kernel = gk.f32;
  const int64_t kMc = gk.blocking.mc, kKc = gk.blocking.kc, kNc = gk.blocking.nc;
  const int64_t n0 = p0 * kPanel, n1 = std::min(g.n, p1 * kPanel);
  if (m0 >= m1 || n0 >= n1) return;
  if (g.k == 0) {
    if (!g.accumulate)
      for (int64_t i = m0; i < m1; ++i) std::fill(g.c + i * g.ldc + n0, g.c + i * g.ldc + n1, 0.0f);
    return;
  }
  const bool pack_b = g.ldb != kPanel, pack_a = g.csa != 1;
  if (!pack_a && !pack_b) {
    // Operands already in kernel layout: finish each C block over all of k
    // before moving on, so C is read and written once from L2, not once per
    // k block from memory.
    for (int64_t j0 = n0; j0 < n1; j0 += kNc)
      for (int64_t i0 = m0; i0 < m1; i0 += kMc)
        for (int64_t k0 = 0; k0 < g.k; k0 += kKc) {
          GemmArgs t = g;
          t.m = std::min(kMc, m1 - i0);
          t.n = std::min(kNc, n1 - j0);
          t.k = std::min(kKc, g.k - k0);
          t.a = g.a + i0 * g.rsa + k0 * g.csa;
          t.b = g.b + (j0 / kPanel) * g.psb + k0 * g.ldb;
          t.c = g.c + i0 * g.ldc + j0;
          t.accumulate = g.accumulate || k0 > 0;
          kernel(t);
        }
    return;
  }
  // Packing buffers sized to this call (a small product must not pay for a
  // large buffer), left uninitialized: every element read is written first.
  // Each k block's A rows are packed once and serve every column block; each
  // B block is packed once per row block of kPackRows. Packing changes no
  // arithmetic.
  const int64_t kmax = std::min(kKc, g.k);
  const int64_t nmax = std::min(kNc, panels(n1 - n0) * kPanel);
  const int64_t rows = std::min(kPackRows, m1 - m0);
  std::unique_ptr<float[]> bpack(pack_b ? new float[size_t(kmax * nmax)] : nullptr);
  std::unique_ptr<float[]> apack(pack_a ? new float[size_t(rows * kmax)] : nullptr);
  for (int64_t k0 = 0; k0 < g.k; k0 += kKc) {
    const int64_t kb = std::min(kKc, g.k - k0);
    for (int64_t r0 = m0; r0 < m1; r0 += kPackRows) {
      const int64_t r1 = std::min(m1, r0 + kPackRows);
      if (pack_a) pack_rows(g.a + r0 * g.rsa + k0 * g.csa, g.rsa, g.csa, r1 - r0, kb, apack.get());
      for (int64_t j0 = n0; j0 < n1; j0 += kNc) {
        const int64_t nb = std::min(kNc, n1 - j0);
        GemmArgs s = g;
        s.n = nb;
        s.k = kb;
        s.accumulate = g.accumulate || k0 > 0;
        s.b = g.b + (j0 / kPanel) * g.psb + k0 * g.ldb;
        if (pack_b) {
          for (int64_t q = 0; q < panels(nb); ++q) {
            const int64_t w = std::min(kPanel, nb - q * kPanel);
            float* dst = bpack.get() + q * kb * kPanel;
            const float* src = s.b + q * g.psb;
            for (int64_t p = 0; p < kb; ++p) {
              std::copy(src + p * g.ldb, src + p * g.ldb + w, dst + p * kPanel);
              std::fill(dst + p * kPanel + w, dst + (p + 1) * kPanel, 0.0f);
            }
          }
          s.b = bpack.get();
          s.ldb = kPanel;
          s.psb = kb * kPanel;
        }
        for (int64_t i0 = r0; i0 < r1; i0 += kMc) {
          GemmArgs t = s;
          t.m = std::min(kMc, r1 - i0);
          t.c = g.c + i0 * g.ldc + j0;
          if (pack_a) {
            t.a = apack.get() + (i0 - r0) * kb;
            t.rsa = kb;
            t.csa = 1;
          } else {
            t.a = g.a + i0 * g.rsa + k0 * g.csa;
          }
          kernel(t);
        }
      }
    }
  }
}
}  // namespace

template <typename TB>
void gemm_packed(const F32Gemm& gk, const GemmArgsT<TB>& g) {
  const GemmBlockFnT<TB> kernel = gk.block<TB>();
  const int64_t kMc = gk.blocking.mc, kKc = gk.blocking.kc, kNc = gk.blocking.nc;
  auto b_at = [&](int64_t j0, int64_t k0) { return g.b + (j0 / kPanel) * g.psb + k0 * g.ldb; };
  for (int64_t j0 = 0; j0 < g.n; j0 += kNc)
    for (int64_t i0 = 0; i0 < g.m; i0 += kMc)
      for (int64_t k0 = 0; k0 < g.k; k0 += kKc) {
        GemmArgsT<TB> t = g;
        t.m = std::min(kMc, g.m - i0);
        t.n = std::min(kNc, g.n - j0);
        t.k = std::min(kKc, g.k - k0);
        t.a = g.a + i0 * g.rsa + k0;
        t.b = b_at(j0, k0);
        t.c = g.c + i0 * g.ldc + j0;
        t.accumulate = g.accumulate || k0 > 0;
        // The B the next block reads first: the next k block, the next
        // column block, or the caller's next product.
        t.next_psb = g.psb;
        if (k0 + kKc < g.k) t.next_b = b_at(j0, k0 + kKc);
        else if (i0 + kMc < g.m) t.next_b = b_at(j0, 0);
        else if (j0 + kNc < g.n) t.next_b = b_at(j0 + kNc, 0);
        else t.next_b = g.next_b, t.next_psb = g.next_psb;
        kernel(t);
      }
}
template void gemm_packed<float>(const F32Gemm&, const GemmArgsT<float>&);
template void gemm_packed<bf16_t>(const F32Gemm&, const GemmArgsT<bf16_t>&);
template void gemm_packed<fp16_t>(const F32Gemm&, const GemmArgsT<fp16_t>&);

namespace {
// Splits C [m, n] over `threads`: the longer side (rows, or column panels),
// tiny products on one thread; range(by_rows, u0, u1) runs rows [u0, u1) or
// panels [u0, u1). Each output element's sum is the same in any range (the
// k blocks in order), so the ranges can be cut into pieces that threads take
// as they come: about 4 per thread, rows in multiples of 16.
template <typename Range>
void split_product(int64_t m, int64_t n, int64_t k, int threads, Range&& range) {
  const int64_t np = panels(n);
  const bool by_rows = m >= np * kPanel;
  const int64_t units = by_rows ? m : np;
  const int64_t work = m * n * std::max<int64_t>(k, 1);
  threads = int(std::max<int64_t>(1, std::min<int64_t>({threads, units, work / 65536 + 1})));
  if (threads == 1) {
    range(true, 0, m);
    return;
  }
  int64_t grain = grain_for(units, threads);
  if (by_rows) grain = (grain + 15) / 16 * 16;
  parallel_range(threads, units, grain, [&](int64_t u0, int64_t u1, int) { range(by_rows, u0, u1); });
}
}  // namespace

void gemm(const F32Gemm& kernel, const GemmArgs& g, int threads) {
  const int64_t np = panels(g.n);
  split_product(g.m, g.n, g.k, threads, [&](bool by_rows, int64_t u0, int64_t u1) {
    if (by_rows)
      run_range(kernel, g, u0, u1, 0, np);
    else
      run_range(kernel, g, 0, g.m, u0, u1);
  });
}

template <typename TB>
void gemm_packed(const F32Gemm& kernel, const GemmArgsT<TB>& g, int threads) {
  if (g.m == 0 || g.n == 0) return;
  split_product(g.m, g.n, g.k, threads, [&](bool by_rows, int64_t u0, int64_t u1) {
    GemmArgsT<TB> t = g;
    t.next_b = nullptr;
    if (by_rows) {
      t.m = u1 - u0;
      t.a = g.a + u0 * g.rsa;
      t.c = g.c + u0 * g.ldc;
    } else {
      t.n = std::min(g.n, u1 * kPanel) - u0 * kPanel;
      t.b = g.b + u0 * g.psb;
      t.c = g.c + u0 * kPanel;
    }
    gemm_packed(kernel, t);
  });
}
template void gemm_packed<float>(const F32Gemm&, const GemmArgsT<float>&, int);
template void gemm_packed<bf16_t>(const F32Gemm&, const GemmArgsT<bf16_t>&, int);
template void gemm_packed<fp16_t>(const F32Gemm&, const GemmArgsT<fp16_t>&, int);

// Whole groups of 4 rows × 4 columns move as SSE 4×4 transposes (x86-64's
// baseline), the rest one by one; a pure copy, no arithmetic.
void pack_rows_as_panels(const float* src, int64_t ld, int64_t len, int64_t dh, float* out) {
  for (int64_t q = 0; q < panels(len); ++q) {
    float* panel = out + q * dh * kPanel;
    const int64_t n = std::min(kPanel, len - q * kPanel);  // keys in this panel
    const float* s = src + q * kPanel * ld;
    if (n < kPanel) std::fill(panel, panel + dh * kPanel, 0.0f);  // the keys past len stay zero
    int64_t j = 0;
#if defined(__SSE2__)
    for (; j + 4 <= n; j += 4) {
      int64_t c = 0;
      for (; c + 4 <= dh; c += 4) {
        __m128 r0 = _mm_loadu_ps(s + (j + 0) * ld + c), r1 = _mm_loadu_ps(s + (j + 1) * ld + c);
        __m128 r2 = _mm_loadu_ps(s + (j + 2) * ld + c), r3 = _mm_loadu_ps(s + (j + 3) * ld + c);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(panel + (c + 0) * kPanel + j, r0);
        _mm_storeu_ps(panel + (c + 1) * kPanel + j, r1);
        _mm_storeu_ps(panel + (c + 2) * kPanel + j, r2);
        _mm_storeu_ps(panel + (c + 3) * kPanel + j, r3);
      }
      for (; c < dh; ++c)
        for (int64_t jj = j; jj < j + 4; ++jj) panel[c * kPanel + jj] = s[jj * ld + c];
    }
#endif
    for (; j < n; ++j)
      for (int64_t c = 0; c < dh; ++c) panel[c * kPanel + j] = s[j * ld + c];
  }
}

void pack_panels(const float* src, int64_t K, int64_t N, bool n_major, float* out) {
  const int64_t np = panels(N);
  for (int64_t q = 0; q < np; ++q) {
    float* dst = out + q * K * kPanel;
    const int64_t w = std::min(kPanel, N - q * kPanel);
    for (int64_t p = 0; p < K; ++p) {
      for (int64_t j = 0; j < w; ++j) {
        const int64_t col = q * kPanel + j;
        dst[p * kPanel + j] = n_major ? src[col * K + p] : src[p * N + col];
      }
      std::fill(dst + p * kPanel + w, dst + (p + 1) * kPanel, 0.0f);
    }
  }
}

std::vector<float> pack_panels(const float* src, int64_t K, int64_t N, bool n_major) {
  std::vector<float> out(size_t(panels(N) * K * kPanel));
  pack_panels(src, K, N, n_major, out.data());
  return out;
}

void pack_a_bf16_row(const Bf16Kernels& kern, const float* src, int64_t n, int64_t k, int64_t i, uint16_t* dst) {
  const int64_t R = kern.a_rows;
  // Row i's columns [p, p + 32) lie at block(i) + (p / 32)·32·R + (i % R)·32.
  uint16_t* row = dst + (i / R) * R * k + (i % R) * 32;
  if (R == 1) {  // contiguous: one call
    kern.to_bf16(src, n, row);
    std::fill(row + n, row + k, uint16_t(0));
    return;
  }
  for (int64_t p = 0; p < k; p += kBf16K) {
    uint16_t* seg = row + (p / kBf16K) * kBf16K * R;
    const int64_t v = std::clamp<int64_t>(n - p, 0, kBf16K);
    if (v > 0) kern.to_bf16(src + p, v, seg);
    std::fill(seg + v, seg + kBf16K, uint16_t(0));
  }
}

void pack_a_bf16(const Bf16Kernels& kern, const float* src, int64_t m, int64_t n, int64_t lds, int64_t k,
                 uint16_t* dst) {
  const int64_t R = kern.a_rows, mr = (m + R - 1) / R * R;
  for (int64_t i = 0; i < mr; ++i) pack_a_bf16_row(kern, src + (i < m ? i * lds : 0), i < m ? n : 0, k, i, dst);
}

}  // namespace ffn::nn
