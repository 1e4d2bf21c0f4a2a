// The block-quantized product's reference (src/reference/qlinear_reference.hpp).
#include "reference/qlinear_reference.hpp"

#include <cmath>
#include <cstring>

#include "backends/cpu/quantize.hpp"

namespace ffn::reference {

void qlinear_forward(nn::QType type, const std::vector<const uint8_t*>& rows, int64_t k, const float* x, int64_t n,
                     float* y) {
  nn::QActs a;
  nn::quantize_acts(x, n, k, a);
  const int64_t m = int64_t(rows.size()), nb = k / nn::kQBlock, fb = nn::qfile_block_bytes(type);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < m; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = rows[size_t(r)] + b * fb;
        const int8_t* qh = a.hi.data() + t * k + b * nn::kQBlock;
        const int8_t* ql = a.lo.data() + t * k + b * nn::kQBlock;
        int32_t q[nn::kQBlock];  // the 16-bit activations
        for (int64_t i = 0; i < nn::kQBlock; ++i) q[i] = 255 * qh[i] + ql[i];
        uint16_t dh, mh = 0;
        std::memcpy(&dh, blk, 2);
        int32_t isum = 0;
        if (type == nn::QType::q8_0) {
          for (int64_t i = 0; i < nn::kQBlock; ++i) isum += int32_t(int8_t(blk[2 + i])) * q[i];
        } else {
          const uint8_t* qs = blk + (type == nn::QType::q4_1 ? 4 : 2);
          if (type == nn::QType::q4_1) std::memcpy(&mh, blk + 2, 2);
          for (int64_t i = 0; i < 16; ++i) {
            const int lo = qs[i] & 0x0f, hi = qs[i] >> 4;
            const int off = type == nn::QType::q4_0 ? 8 : 0;
            isum += (lo - off) * q[i] + (hi - off) * q[16 + i];
          }
        }
        const size_t at = size_t(t * nb + b);
        acc = std::fma(nn::fp16_to_float(dh) * a.d[at], float(isum), acc);
        if (type == nn::QType::q4_1) acc = std::fma(nn::fp16_to_float(mh), a.s[at], acc);
      }
      y[t * m + r] = acc;
    }
}

}  // namespace ffn::reference
