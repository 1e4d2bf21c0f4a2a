// Block-quantized product, portable (src/backends/cpu/qgemm.hpp): the rule's
// operations one row at a time, from the repacked groups.
#include <cmath>
#include <cstring>

#include "backends/cpu/qgemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::scalar {

namespace {

// The K-quants (256 weights per panel block, the layouts in
// src/core/quant_blocks.cpp): the rule per activation block of 32.
template <GgmlType kType>
void qgemm_k(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  const int64_t nb = w.k / kQBlock;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t lane = 0; lane < kQRows && g * kQRows + lane < w.m; ++lane)
      for (int64_t t = t0; t < t1; ++t) {
        float acc = 0.0f;
        for (int64_t sb = 0; sb < w.blocks; ++sb) {
          const uint8_t* blk = w.at(g, sb);
          for (int64_t j = 0; j < 8; ++j) {
            const int64_t b = sb * 8 + j, at = t * nb + b;
            const int8_t* qh = x.hi.data() + t * w.k + b * kQBlock;
            const int8_t* ql = x.lo.data() + t * w.k + b * kQBlock;
            int32_t isum[2] = {0, 0};  // Q6_K: the block's two sub-blocks of 16
            for (int64_t i = 0; i < 8; ++i)
              for (int64_t e = 0; e < 4; ++e) {
                const uint8_t nib = blk[kpanel::pair(kType, j / 2) + i * 64 + 4 * lane + e];
                int32_t q = j % 2 ? nib >> 4 : nib & 0x0f;
                if constexpr (kType == GgmlType::q5_k)
                  q |= ((blk[kpanel::plane(kType, 0) + i * 64 + 4 * lane + e] >> j) & 1) << 4;
                if constexpr (kType == GgmlType::q6_k)
                  q |= ((blk[kpanel::plane(kType, j / 4) + i * 64 + 4 * lane + e] >> (2 * (j % 4))) & 3) << 4;
                isum[i / 4] += q * (255 * qh[4 * i + e] + ql[4 * i + e]);
              }
            uint16_t dh;
            std::memcpy(&dh, blk + kpanel::d + 2 * lane, 2);
            if constexpr (kType != GgmlType::q6_k) {
              uint16_t mh;
              std::memcpy(&mh, blk + kpanel::dmin + 2 * lane, 2);
              const float sc = float(blk[kpanel::scale(kType, j) + lane]), mn = float(blk[kpanel::min(j) + lane]);
              acc = std::fma(fp16_to_float(dh) * sc * x.d[size_t(at)], float(isum[0] + isum[1]), acc);
              acc = std::fma(-(fp16_to_float(mh) * mn), x.s[size_t(at)], acc);
            } else {
              for (int h = 0; h < 2; ++h) {
                const float sc = float(int8_t(blk[kpanel::scale(kType, j) + 16 * h + lane]));
                const int32_t s = isum[h] - 32 * x.sum16[size_t(2 * at + h)];
                acc = std::fma(fp16_to_float(dh) * sc * x.d[size_t(at)], float(s), acc);
              }
            }
          }
        }
        y[t * ldy + g * kQRows + lane] = acc;
      }
}

// The 32-weight types.
template <GgmlType kType>
void qgemm_32(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  constexpr int64_t qbytes = builtin_quant_type(kType)->panels.quant_bytes;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t lane = 0; lane < kQRows && g * kQRows + lane < w.m; ++lane)
      for (int64_t t = t0; t < t1; ++t) {
        float acc = 0.0f;
        for (int64_t b = 0; b < w.blocks; ++b) {
          const uint8_t* blk = w.at(g, b);
          const int8_t* qh = x.hi.data() + t * w.k + b * kQBlock;
          const int8_t* ql = x.lo.data() + t * w.k + b * kQBlock;
          int32_t q[kQBlock];  // the 16-bit activations
          for (int64_t i = 0; i < kQBlock; ++i) q[i] = 255 * qh[i] + ql[i];
          int32_t isum = 0;
          if constexpr (kType == GgmlType::q8_0) {
            for (int64_t j = 0; j < 8; ++j)
              for (int64_t e = 0; e < 4; ++e) isum += int32_t(int8_t(blk[j * 64 + 4 * lane + e])) * q[4 * j + e];
          } else {
            constexpr bool q5 = kType == GgmlType::q5_0 || kType == GgmlType::q5_1;
            for (int64_t i = 0; i < 4; ++i)
              for (int64_t e = 0; e < 4; ++e) {
                const uint8_t byte = blk[i * 64 + 4 * lane + e], h = q5 ? blk[256 + 4 * lane + e] : 0;
                const int32_t lo = (byte & 0x0f) | (((h >> i) & 1) << 4), hi = (byte >> 4) | (((h >> (4 + i)) & 1) << 4);
                isum += lo * q[4 * i + e] + hi * q[16 + 4 * i + e];
              }
            if constexpr (kType == GgmlType::q4_0) isum -= 8 * x.sum[size_t(t * w.blocks + b)];
            if constexpr (kType == GgmlType::q5_0) isum -= 16 * x.sum[size_t(t * w.blocks + b)];
          }
          uint16_t dh;
          std::memcpy(&dh, blk + qbytes + 2 * lane, 2);
          const float p = fp16_to_float(dh) * x.d[size_t(t * w.blocks + b)];
          acc = std::fma(p, float(isum), acc);
          if constexpr (kType == GgmlType::q4_1 || kType == GgmlType::q5_1) {
            uint16_t mh;
            std::memcpy(&mh, blk + qbytes + 32 + 2 * lane, 2);
            acc = std::fma(fp16_to_float(mh), x.s[size_t(t * w.blocks + b)], acc);
          }
        }
        y[t * ldy + g * kQRows + lane] = acc;
      }
}

}  // namespace

template <GgmlType kType>
void qgemm(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  if constexpr (kType == GgmlType::q4_k || kType == GgmlType::q5_k || kType == GgmlType::q6_k)
    qgemm_k<kType>(w, x, g0, g1, t0, t1, y, ldy);
  else
    qgemm_32<kType>(w, x, g0, g1, t0, t1, y, ldy);
}

template void qgemm<GgmlType::q4_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q4_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q8_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q5_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q5_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q4_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q5_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q6_k>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

}  // namespace ffn::nn::scalar
