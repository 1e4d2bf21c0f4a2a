// The built-in types' block functions (src/core/quant_types.hpp): ggml's
// block formats read to float32, and packed into the 16-row panels of
// native compute and back. (Their integer rule's references are in
// src/reference/qlinear_reference.cpp.)
//
// dequantize_*: ggml's dequantize_row_* (ggml-quants.c), element for
// element: the same float32 operations in the same order (this file is
// compiled without FMA contraction), so the results are bitwise those of
// ggml and gguf-py.
#include <cstring>

#include "core/half.hpp"
#include "core/quant_types.hpp"

namespace ffn::nn::blocks {
namespace {

float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_float(h);
}

}  // namespace

// ---- float types ----

void dequantize_f32(const uint8_t* src, int64_t n, float* dst) { std::memcpy(dst, src, size_t(n) * 4); }

void dequantize_f16(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16(src + 2 * i);
}

void dequantize_bf16(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = bf16_to_float(h);
  }
}

// ---- Q4_0, Q4_1, Q8_0: 32 weights per block ----

void dequantize_q8_0(const uint8_t* src, int64_t n, float* dst) {  // {f16 d; i8 q[32]}: d · q
  for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
    const float d = f16(src);
    for (int j = 0; j < 32; ++j) dst[j] = float(int8_t(src[2 + j])) * d;
  }
}

// {f16 d; u8 qs[16]}: element j low nibble, j + 16 high; (q − 8) · d
void dequantize_q4_0(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const float d = f16(src);
    for (int j = 0; j < 16; ++j) {
      dst[j] = float(int(src[2 + j] & 0x0F) - 8) * d;
      dst[j + 16] = float(int(src[2 + j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const uint8_t* src, int64_t n, float* dst) {  // {f16 d, m; u8 qs[16]}: q · d + m
  for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
    const float d = f16(src), m = f16(src + 2);
    for (int j = 0; j < 16; ++j) {
      dst[j] = float(src[4 + j] & 0x0F) * d + m;
      dst[j + 16] = float(src[4 + j] >> 4) * d + m;
    }
  }
}

// The panels (src/backends/cpu/qgemm.hpp): byte 4r + e of quant vector i
// holds row r's file byte qs[4i + e]; then d[16], then Q4_1's m[16].
namespace {

template <GgmlType kType>
void pack(const uint8_t* blk, int64_t r, uint8_t* out) {
  constexpr QuantType kT = *builtin_quant_type(kType);
  uint8_t* dout = out + kT.panels.quant_bytes;  // d[16], then m[16]
  std::memcpy(dout + 2 * r, blk, 2);           // d
  if constexpr (kType == GgmlType::q4_1) std::memcpy(dout + 32 + 2 * r, blk + 2, 2);  // m
  const uint8_t* qs = blk + (kType == GgmlType::q4_1 ? 4 : 2);
  for (int64_t i = 0; i < kT.panels.quant_bytes / 64; ++i)
    for (int64_t e = 0; e < 4; ++e) out[i * 64 + 4 * r + e] = qs[4 * i + e];
}

template <GgmlType kType>
void unpack(const uint8_t* blk, int64_t lane, float* o) {
  constexpr QuantType kT = *builtin_quant_type(kType);
  uint16_t dh, mh = 0;
  std::memcpy(&dh, blk + kT.panels.quant_bytes + 2 * lane, 2);
  if constexpr (kType == GgmlType::q4_1) std::memcpy(&mh, blk + kT.panels.quant_bytes + 32 + 2 * lane, 2);
  const float d = fp16_to_float(dh), m = fp16_to_float(mh);
  if constexpr (kType == GgmlType::q8_0) {
    for (int64_t j = 0; j < 8; ++j)
      for (int64_t e = 0; e < 4; ++e) o[4 * j + e] = d * float(int8_t(blk[j * 64 + 4 * lane + e]));
    return;
  }
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t e = 0; e < 4; ++e) {
      const uint8_t byte = blk[i * 64 + 4 * lane + e];
      const int lo = byte & 0x0f, hi = byte >> 4;
      if constexpr (kType == GgmlType::q4_0) {
        o[4 * i + e] = d * float(lo - 8);
        o[16 + 4 * i + e] = d * float(hi - 8);
      } else {  // ggml's Q4_1: x = d q + m
        o[4 * i + e] = float(lo) * d + m;
        o[16 + 4 * i + e] = float(hi) * d + m;
      }
    }
}

}  // namespace

void pack_q4_0(const uint8_t* b, int64_t r, uint8_t* o) { pack<GgmlType::q4_0>(b, r, o); }
void pack_q4_1(const uint8_t* b, int64_t r, uint8_t* o) { pack<GgmlType::q4_1>(b, r, o); }
void pack_q8_0(const uint8_t* b, int64_t r, uint8_t* o) { pack<GgmlType::q8_0>(b, r, o); }
void unpack_q4_0(const uint8_t* b, int64_t r, float* o) { unpack<GgmlType::q4_0>(b, r, o); }
void unpack_q4_1(const uint8_t* b, int64_t r, float* o) { unpack<GgmlType::q4_1>(b, r, o); }
void unpack_q8_0(const uint8_t* b, int64_t r, float* o) { unpack<GgmlType::q8_0>(b, r, o); }

// ---- K-quants: 256 weights per block (dequantized only) ----

// {f16 d, dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32, 6-bit scale and min each
void dequantize_q4_k(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 256; ++b, src += 144) {
    const float d = f16(src), dmin = f16(src + 2);
    const uint8_t* sc = src + 4;
    const uint8_t* q = src + 16;
    auto scale_min = [&](int j, uint8_t& s, uint8_t& m) {  // get_scale_min_k4
      if (j < 4) {
        s = sc[j] & 63;
        m = sc[j + 4] & 63;
      } else {
        s = uint8_t((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
        m = uint8_t((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
      }
    };
    for (int j = 0; j < 256; j += 64, q += 32) {
      uint8_t s, m;
      scale_min(j / 32, s, m);
      const float d1 = d * float(s), m1 = dmin * float(m);
      scale_min(j / 32 + 1, s, m);
      const float d2 = d * float(s), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

// {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 6-bit q − 32, 16 sub-blocks of 16
void dequantize_q6_k(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 256; ++b, src += 210) {
    const float d = f16(src + 208);
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
    for (int h = 0; h < 2; ++h, dst += 128, ql += 64, qh += 32, sc += 8)
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * float(sc[is + 0]) * float(q1);
        dst[l + 32] = d * float(sc[is + 2]) * float(q2);
        dst[l + 64] = d * float(sc[is + 4]) * float(q3);
        dst[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
  }
}

}  // namespace ffn::nn::blocks
