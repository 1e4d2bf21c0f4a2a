// Block-quantized product, portable (src/backends/cpu/qgemm.hpp): the rule's
// operations one row at a time, from the repacked groups.
#include <cmath>
#include <cstring>

#include "backends/cpu/qgemm.hpp"
#include "backends/cpu/quantize.hpp"

namespace ffn::nn::scalar {

template <GgmlType kType>
void qgemm(const QPanels& w, const QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y, int64_t ldy) {
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
            for (int64_t i = 0; i < 4; ++i)
              for (int64_t e = 0; e < 4; ++e) {
                const uint8_t byte = blk[i * 64 + 4 * lane + e];
                isum += int32_t(byte & 0x0f) * q[4 * i + e] + int32_t(byte >> 4) * q[16 + 4 * i + e];
              }
            if constexpr (kType == GgmlType::q4_0) isum -= 8 * x.sum[size_t(t * w.blocks + b)];
          }
          uint16_t dh;
          std::memcpy(&dh, blk + qbytes + 2 * lane, 2);
          const float p = fp16_to_float(dh) * x.d[size_t(t * w.blocks + b)];
          acc = std::fma(p, float(isum), acc);
          if constexpr (kType == GgmlType::q4_1) {
            uint16_t mh;
            std::memcpy(&mh, blk + qbytes + 32 + 2 * lane, 2);
            acc = std::fma(fp16_to_float(mh), x.s[size_t(t * w.blocks + b)], acc);
          }
        }
        y[t * ldy + g * kQRows + lane] = acc;
      }
}

template void qgemm<GgmlType::q4_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q4_1>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template void qgemm<GgmlType::q8_0>(const QPanels&, const QActs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

}  // namespace ffn::nn::scalar
