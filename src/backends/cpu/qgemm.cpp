// Block-quantized weights (src/backends/cpu/qgemm.hpp): repacking the file's
// rows into groups of 16, activation quantization, a row back to floats.
#include "backends/cpu/qgemm.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/quantize.hpp"
#include "ffn/types.hpp"

namespace ffn::nn {

void advise_huge_pages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t(1) << 21;
  const uintptr_t begin = (uintptr_t(data) + kHuge - 1) & ~(kHuge - 1), end = (uintptr_t(data) + bytes) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), size_t(end - begin), MADV_HUGEPAGE);  // advice: errors ignored
}

QPanels repack_rows(GgmlType type, const std::vector<const uint8_t*>& rows, int64_t k) {
  const QuantType& qt = quant_type(type);
  if (!qt.native()) throw Error(std::string("quantized weights: type ") + qt.name + " has no native compute");
  if (k % qt.block != 0)
    throw Error("quantized weights: row length " + std::to_string(k) + " is not a multiple of " +
                std::to_string(qt.block));
  QPanels p;
  p.type = type;
  p.k = k;
  p.m = int64_t(rows.size());
  p.blocks = k / qt.block;
  p.groups = (p.m + kQRows - 1) / kQRows;
  p.block_bytes = qt.panels.bytes();
  // Huge pages where the kernel gives them (transparent huge pages in
  // madvise mode): generation streams every panel once per token, and with
  // 4 KiB pages that is a TLB miss every 4 KiB. Asked before the first touch.
  const size_t bytes = size_t(p.groups * p.group_bytes());
  p.data.reserve(bytes);
  advise_huge_pages(p.data.data(), bytes);
  p.data.assign(bytes, 0);  // padding rows: zero scales and weights
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t b = 0; b < p.blocks; ++b) {
      uint8_t* out = p.data.data() + g * p.group_bytes() + b * p.block_bytes;
      for (int64_t r = 0; r < kQRows && g * kQRows + r < p.m; ++r)
        qt.panels.pack(rows[size_t(g * kQRows + r)] + b * qt.block_bytes, r, out);
    }
  return p;
}

void dequantize_panel_row(const QPanels& w, int64_t r, float* out) {
  const QuantType& qt = quant_type(w.type);
  for (int64_t b = 0; b < w.blocks; ++b) qt.panels.unpack(w.at(r / kQRows, b), r % kQRows, out + b * qt.block);
}

void size_acts(int64_t n, int64_t k, QActs& out) {
  if (k % kQBlock != 0) throw Error("quantized product: k = " + std::to_string(k) + " is not a multiple of 32");
  out.n = n;
  out.blocks = k / kQBlock;
  out.hi.resize(size_t(n * k));
  out.lo.resize(size_t(n * k));
  out.d.resize(size_t(n * out.blocks));
  out.s.resize(out.d.size());
  out.sum.resize(out.d.size());
  out.sum16.resize(2 * out.d.size());
}

void half_sums(int64_t t0, int64_t t1, QActs& out) {
  const int64_t k = out.blocks * kQBlock;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t h = 0; h < 2 * out.blocks; ++h) {
      const int8_t* hi = out.hi.data() + t * k + h * 16;
      const int8_t* lo = out.lo.data() + t * k + h * 16;
      int32_t s = 0;
      for (int i = 0; i < 16; ++i) s += 255 * hi[i] + lo[i];
      out.sum16[size_t(t * 2 * out.blocks + h)] = s;
    }
}

void quantize_acts(const float* x, int64_t n, int64_t k, QActs& out) {
  size_acts(n, k, out);
  scalar::quantize_acts(x, 0, n, out);
  half_sums(0, n, out);
}

namespace scalar {

void quantize_acts(const float* x, int64_t t0, int64_t t1, QActs& out) {
  const int64_t k = out.blocks * kQBlock;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < out.blocks; ++b) {
      const float* v = x + t * k + b * kQBlock;
      float amax = 0.0f;
      bool finite = true;
      for (int64_t i = 0; i < kQBlock; ++i) {
        amax = std::max(amax, std::fabs(v[i]));
        finite = finite && std::isfinite(v[i]);
      }
      // A block holding NaN or Inf (from non-finite weights): Q = 0 and a NaN
      // scale, so the products come out NaN as float arithmetic would.
      // A block so small that 32512 / amax overflows (amax < 32512 / FLT_MAX, about 0.99 · 2^-113) counts as zero.
      float id = finite && amax > 0.0f ? float(kQActMax) / amax : 0.0f;
      if (!std::isfinite(id)) id = 0.0f, amax = 0.0f;
      const float d = finite ? amax / float(kQActMax) : std::numeric_limits<float>::quiet_NaN();
      int8_t* hi = out.hi.data() + t * k + b * kQBlock;
      int8_t* lo = out.lo.data() + t * k + b * kQBlock;
      int32_t sum = 0;
      for (int64_t i = 0; i < kQBlock; ++i) {
        int32_t q = finite ? int32_t(std::nearbyint(v[i] * id)) : 0;
        q = std::clamp(q, -kQActMax, kQActMax);  // |v · id| ≤ 32512 up to rounding
        const int32_t h = q >= 0 ? (q + 127) / 255 : -((127 - q) / 255);  // nearest; 255 is odd, no ties
        hi[i] = int8_t(h);
        lo[i] = int8_t(q - 255 * h);
        sum += q;
      }
      const size_t at = size_t(t * out.blocks + b);
      out.d[at] = d;
      out.sum[at] = sum;
      out.s[at] = d * float(sum);
    }
}

}  // namespace scalar
}  // namespace ffn::nn
