// Block-quantized weights (src/backends/cpu/qgemm.hpp): repacking the file's
// rows into groups of 16, activation quantization, a row back to floats.
#include "backends/cpu/qgemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/quantize.hpp"
#include "ffn/types.hpp"

namespace ffn::nn {

QPanels repack_rows(QType type, const std::vector<const uint8_t*>& rows, int64_t k) {
  if (k % kQBlock != 0) throw Error("quantized weights: row length " + std::to_string(k) + " is not a multiple of 32");
  QPanels p;
  p.type = type;
  p.k = k;
  p.m = int64_t(rows.size());
  p.blocks = k / kQBlock;
  p.groups = (p.m + kQRows - 1) / kQRows;
  p.data.assign(size_t(p.groups * p.group_bytes()), 0);
  const int64_t fb = qfile_block_bytes(type);
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t b = 0; b < p.blocks; ++b) {
      uint8_t* out = p.data.data() + g * p.group_bytes() + b * qgroup_block_bytes(type);
      const int64_t qbytes = type == QType::q8_0 ? 512 : 256;
      uint8_t* dout = out + qbytes;  // d[16], then m[16]
      for (int64_t r = 0; r < kQRows; ++r) {
        const int64_t row = g * kQRows + r;
        if (row >= p.m) continue;  // padding rows: zero scales and weights
        const uint8_t* blk = rows[size_t(row)] + b * fb;
        std::memcpy(dout + 2 * r, blk, 2);                                      // d
        if (type == QType::q4_1) std::memcpy(dout + 32 + 2 * r, blk + 2, 2);   // m
        const uint8_t* qs = blk + (type == QType::q4_1 ? 4 : 2);
        const int64_t vecs = qbytes / 64;
        for (int64_t i = 0; i < vecs; ++i)
          for (int64_t e = 0; e < 4; ++e) out[i * 64 + 4 * r + e] = qs[4 * i + e];
      }
    }
  return p;
}

void dequantize_panel_row(const QPanels& w, int64_t r, float* out) {
  const int64_t g = r / kQRows, lane = r % kQRows;
  for (int64_t b = 0; b < w.blocks; ++b) {
    const uint8_t* blk = w.at(g, b);
    const int64_t qbytes = w.type == QType::q8_0 ? 512 : 256;
    uint16_t dh, mh = 0;
    std::memcpy(&dh, blk + qbytes + 2 * lane, 2);
    if (w.type == QType::q4_1) std::memcpy(&mh, blk + qbytes + 32 + 2 * lane, 2);
    const float d = fp16_to_float(dh), m = fp16_to_float(mh);
    float* o = out + b * kQBlock;
    if (w.type == QType::q8_0) {
      for (int64_t j = 0; j < 8; ++j)
        for (int64_t e = 0; e < 4; ++e) o[4 * j + e] = d * float(int8_t(blk[j * 64 + 4 * lane + e]));
      continue;
    }
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t e = 0; e < 4; ++e) {
        const uint8_t byte = blk[i * 64 + 4 * lane + e];
        const int lo = byte & 0x0f, hi = byte >> 4;
        if (w.type == QType::q4_0) {
          o[4 * i + e] = d * float(lo - 8);
          o[16 + 4 * i + e] = d * float(hi - 8);
        } else {  // ggml's Q4_1: x = d q + m
          o[4 * i + e] = float(lo) * d + m;
          o[16 + 4 * i + e] = float(hi) * d + m;
        }
      }
  }
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
}

void quantize_acts(const float* x, int64_t n, int64_t k, QActs& out) {
  size_acts(n, k, out);
  scalar::quantize_acts(x, 0, n, out);
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
