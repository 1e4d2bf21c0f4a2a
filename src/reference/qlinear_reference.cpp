// The block-quantized product's reference (src/reference/qlinear_reference.hpp).
#include "reference/qlinear_reference.hpp"

#include <cmath>
#include <cstring>

#include "backends/cpu/quantize.hpp"
#include "ffn/types.hpp"

namespace ffn::nn::blocks {
namespace {

// The rule from the file's own blocks (not the panels): per block,
// isum = Σ q_w,i · Q_i exactly (Q4_0's q_w = q − 8, Q5_0's q − 16), acc = fma(d · dx, isum, acc),
// Q4_1, Q5_1: acc = fma(m, sx, acc).
template <GgmlType kType>
float reference(const uint8_t* row, int64_t k, const QActs& a, int64_t t) {
  constexpr QuantType kT = *builtin_quant_type(kType);
  const int64_t nb = k / kQBlock;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kT.block_bytes;
    const int8_t* qh = a.hi.data() + t * k + b * kQBlock;
    const int8_t* ql = a.lo.data() + t * k + b * kQBlock;
    int32_t q[kQBlock];  // the 16-bit activations
    for (int64_t i = 0; i < kQBlock; ++i) q[i] = 255 * qh[i] + ql[i];
    uint16_t dh, mh = 0;
    std::memcpy(&dh, blk, 2);
    int32_t isum = 0;
    if constexpr (kType == GgmlType::q8_0) {
      for (int64_t i = 0; i < kQBlock; ++i) isum += int32_t(int8_t(blk[2 + i])) * q[i];
    } else if constexpr (kType == GgmlType::q5_0 || kType == GgmlType::q5_1) {  // q + 16 · bit, Q5_0's minus 16
      constexpr bool q51 = kType == GgmlType::q5_1;
      if constexpr (q51) std::memcpy(&mh, blk + 2, 2);
      uint32_t qh5;
      std::memcpy(&qh5, blk + (q51 ? 4 : 2), 4);
      const uint8_t* qs = blk + (q51 ? 8 : 6);
      const int off = q51 ? 0 : 16;
      for (int64_t i = 0; i < 16; ++i) {
        const int lo = (qs[i] & 0x0f) | int(((qh5 >> i) & 1) << 4), hi = (qs[i] >> 4) | int(((qh5 >> (16 + i)) & 1) << 4);
        isum += (lo - off) * q[i] + (hi - off) * q[16 + i];
      }
    } else {
      const uint8_t* qs = blk + (kType == GgmlType::q4_1 ? 4 : 2);
      if constexpr (kType == GgmlType::q4_1) std::memcpy(&mh, blk + 2, 2);
      for (int64_t i = 0; i < 16; ++i) {
        const int lo = qs[i] & 0x0f, hi = qs[i] >> 4;
        const int off = kType == GgmlType::q4_0 ? 8 : 0;
        isum += (lo - off) * q[i] + (hi - off) * q[16 + i];
      }
    }
    const size_t at = size_t(t * nb + b);
    acc = std::fma(fp16_to_float(dh) * a.d[at], float(isum), acc);
    if constexpr (kType == GgmlType::q4_1 || kType == GgmlType::q5_1) acc = std::fma(fp16_to_float(mh), a.s[at], acc);
  }
  return acc;
}

// The K-quants, per activation block of 32 (the rule in qgemm.hpp):
//   Q4_K, sub-block j (32 weights, q ∈ 0..15 (Q5_K: 0..31), 6-bit scale s and minimum m):
//     isum = Σ q · Q, acc = fma((d · s) · dx, isum, acc), acc = fma(−(dmin · m), sx, acc);
//   Q6_K, its two sub-blocks A, B of 16 (q ∈ −32..31, i8 scale s):
//     isum_A = Σ_A q · Q, acc = fma((d · s_A) · dx, isum_A, acc), then B's.
// d · s and dmin · m are exact in float32 (11 + 8 significant bits at most).
// Q5_K: Q4_K's rule on q + 16 · its fifth bit.
template <bool kFive>
float reference_k4(const uint8_t* row, int64_t k, const QActs& a, int64_t t) {
  const int64_t nb = k / kQBlock;
  float acc = 0.0f;
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const uint8_t* blk = row + sb * (kFive ? 176 : 144);
    uint16_t dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, blk + 2, 2);
    const float d = fp16_to_float(dh), dmin = fp16_to_float(mh);
    const uint8_t* sc = blk + 4;
    for (int j = 0; j < 8; ++j) {
      const int64_t b = sb * 8 + j;
      const int8_t* qh = a.hi.data() + t * k + b * kQBlock;
      const int8_t* ql = a.lo.data() + t * k + b * kQBlock;
      int32_t isum = 0;
      for (int64_t i = 0; i < kQBlock; ++i) {
        const uint8_t byte = blk[(kFive ? 48 : 16) + 32 * (j / 2) + i];
        const int32_t q5 = kFive ? ((blk[16 + i] >> j) & 1) << 4 : 0;
        isum += (int32_t(j % 2 ? byte >> 4 : byte & 0xF) | q5) * (255 * qh[i] + ql[i]);
      }
      uint8_t s, m;
      k4_scale_min(sc, j, s, m);
      const size_t at = size_t(t * nb + b);
      acc = std::fma(d * float(s) * a.d[at], float(isum), acc);
      acc = std::fma(-(dmin * float(m)), a.s[at], acc);
    }
  }
  return acc;
}

float reference_k6(const uint8_t* row, int64_t k, const QActs& a, int64_t t) {
  const int64_t nb = k / kQBlock;
  float acc = 0.0f;
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const uint8_t* blk = row + sb * 210;
    uint16_t dh;
    std::memcpy(&dh, blk + 208, 2);
    const float d = fp16_to_float(dh);
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    for (int j = 0; j < 8; ++j) {
      const int64_t b = sb * 8 + j;
      const int8_t* qh = a.hi.data() + t * k + b * kQBlock;
      const int8_t* ql = a.lo.data() + t * k + b * kQBlock;
      const size_t at = size_t(t * nb + b);
      for (int half = 0; half < 2; ++half) {
        int32_t isum = 0;
        for (int i = 16 * half; i < 16 * half + 16; ++i) {
          // weight w = 32 j + i of the block: half h = w / 128, quarter c, position l (dequantize_q6_k)
          const int w = 32 * j + i, h = w / 128, c = (w % 128) / 32, l = w % 32;
          const uint8_t lq = blk[64 * h + l + 32 * (c % 2)];
          const int q = ((c < 2 ? lq & 0xF : lq >> 4) | (((blk[128 + 32 * h + l] >> (2 * c)) & 3) << 4)) - 32;
          isum += q * (255 * qh[i] + ql[i]);
        }
        acc = std::fma(d * float(sc[2 * j + half]) * a.d[at], float(isum), acc);
      }
    }
  }
  return acc;
}

}  // namespace

float reference_q4_0(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference<GgmlType::q4_0>(w, k, x, t); }
float reference_q4_1(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference<GgmlType::q4_1>(w, k, x, t); }
float reference_q8_0(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference<GgmlType::q8_0>(w, k, x, t); }
float reference_q5_0(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference<GgmlType::q5_0>(w, k, x, t); }
float reference_q5_1(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference<GgmlType::q5_1>(w, k, x, t); }
float reference_q4_k(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference_k4<false>(w, k, x, t); }
float reference_q5_k(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference_k4<true>(w, k, x, t); }
float reference_q6_k(const uint8_t* w, int64_t k, const QActs& x, int64_t t) { return reference_k6(w, k, x, t); }

}  // namespace ffn::nn::blocks

namespace ffn::reference {

void qlinear_forward(GgmlType type, const std::vector<const uint8_t*>& rows, int64_t k, const float* x, int64_t n,
                     float* y) {
  const nn::QuantType& qt = nn::quant_type(type);
  if (!qt.reference) throw Error(std::string("quantized product reference: type ") + qt.name + " has none");
  nn::QActs a;
  nn::quantize_acts(x, n, k, a);
  const int64_t m = int64_t(rows.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < m; ++r) y[t * m + r] = qt.reference(rows[size_t(r)], k, a, t);
}

}  // namespace ffn::reference
