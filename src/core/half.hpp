// 16-bit floats: bf16 and IEEE binary16 (fp16) to and from float32, in
// integer arithmetic so that every compiler and ISA gives the same bits
// (round to nearest even; NaN stays NaN). Used by the weights' storage
// (src/backends/cpu/quantize.hpp), the quant types' blocks
// (src/core/quant_blocks.cpp) and the readers.
#pragma once

#include <cstdint>
#include <cstring>

namespace ffn::nn {

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// IEEE binary16, round to nearest even (overflow to ±Inf, subnormals kept),
// in integer arithmetic so that every compiler gives the same bits.
inline uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return uint16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));  // ≥ 2^16, Inf, NaN
  if (u < 0x38800000u) {  // below 2^-14: a subnormal (or zero) half; add 0.5 · 2^-14 · 2^... via float rounding
    const uint32_t magic_bits = 0x3f000000u;  // 0.5: its ulp is 2^-24, the half subnormal step
    float a, magic;
    std::memcpy(&a, &u, 4);
    std::memcpy(&magic, &magic_bits, 4);
    a += magic;  // rounds |f| to a multiple of 2^-24, to nearest even
    uint32_t r;
    std::memcpy(&r, &a, 4);
    return uint16_t(sign | (r - magic_bits));
  }
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000000u + 0x0fffu + odd;  // rebias the exponent (−112 << 23) and round the 13 dropped bits
  return uint16_t(sign | (u >> 13));
}
inline float fp16_to_float(uint16_t b) {
  const uint32_t sign = uint32_t(b & 0x8000u) << 16, exp = (b >> 10) & 0x1fu, mant = b & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else {
    const float v = float(mant) * (1.0f / 16777216.0f);  // mant · 2^-24, exact
    std::memcpy(&u, &v, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace ffn::nn
