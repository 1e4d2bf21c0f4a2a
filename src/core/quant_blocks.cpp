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

void k4_scale_min(const uint8_t* sc, int j, uint8_t& s, uint8_t& m) {  // ggml's get_scale_min_k4
  if (j < 4) {
    s = sc[j] & 63;
    m = sc[j + 4] & 63;
  } else {
    s = uint8_t((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
    m = uint8_t((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
  }
}

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

// ---- Q4_0, Q4_1, Q8_0 (and Q5_0, Q5_1 below): 32 weights per block ----

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

// Q5_0, Q5_1: Q4's nibble vectors (the file's qs bytes), then a vector of
// the fifth bits (byte 4r + e: bit i is weight 4i + e's, bit 4 + i weight
// 16 + 4i + e's), then d[16], then Q5_1's m[16].
template <GgmlType kType>
void pack5(const uint8_t* blk, int64_t r, uint8_t* out) {
  constexpr bool q51 = kType == GgmlType::q5_1;
  std::memcpy(out + 320 + 2 * r, blk, 2);                 // d
  if constexpr (q51) std::memcpy(out + 352 + 2 * r, blk + 2, 2);  // m
  uint32_t qh;
  std::memcpy(&qh, blk + (q51 ? 4 : 2), 4);
  const uint8_t* qs = blk + (q51 ? 8 : 6);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t e = 0; e < 4; ++e) {
      out[i * 64 + 4 * r + e] = qs[4 * i + e];
      uint8_t& h = out[256 + 4 * r + e];
      h = uint8_t(h | (((qh >> (4 * i + e)) & 1) << i) | (((qh >> (16 + 4 * i + e)) & 1) << (4 + i)));
    }
}

template <GgmlType kType>
void unpack5(const uint8_t* blk, int64_t lane, float* o) {  // as dequantize_q5_0 / _q5_1
  uint16_t dh, mh = 0;
  std::memcpy(&dh, blk + 320 + 2 * lane, 2);
  if constexpr (kType == GgmlType::q5_1) std::memcpy(&mh, blk + 352 + 2 * lane, 2);
  const float d = fp16_to_float(dh), m = fp16_to_float(mh);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t e = 0; e < 4; ++e) {
      const uint8_t byte = blk[i * 64 + 4 * lane + e], h = blk[256 + 4 * lane + e];
      const int q0 = (byte & 0x0f) | (((h >> i) & 1) << 4), q1 = (byte >> 4) | (((h >> (4 + i)) & 1) << 4);
      if constexpr (kType == GgmlType::q5_0) {
        o[4 * i + e] = d * float(q0 - 16);
        o[16 + 4 * i + e] = d * float(q1 - 16);
      } else {
        o[4 * i + e] = d * float(q0) + m;
        o[16 + 4 * i + e] = d * float(q1) + m;
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
void pack_q5_0(const uint8_t* b, int64_t r, uint8_t* o) { pack5<GgmlType::q5_0>(b, r, o); }
void pack_q5_1(const uint8_t* b, int64_t r, uint8_t* o) { pack5<GgmlType::q5_1>(b, r, o); }
void unpack_q5_0(const uint8_t* b, int64_t r, float* o) { unpack5<GgmlType::q5_0>(b, r, o); }
void unpack_q5_1(const uint8_t* b, int64_t r, float* o) { unpack5<GgmlType::q5_1>(b, r, o); }

// ---- K-quants: 256 weights per block (dequantized only) ----

// {f16 d, dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32, 6-bit scale and min each
void dequantize_q4_k(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 256; ++b, src += 144) {
    const float d = f16(src), dmin = f16(src + 2);
    const uint8_t* sc = src + 4;
    const uint8_t* q = src + 16;
    for (int j = 0; j < 256; j += 64, q += 32) {
      uint8_t s, m;
      k4_scale_min(sc, j / 32, s, m);
      const float d1 = d * float(s), m1 = dmin * float(m);
      k4_scale_min(sc, j / 32 + 1, s, m);
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

// The K-quants' panels (src/backends/cpu/qgemm.hpp), per (group of 16 rows,
// block of 256): the 256 weights as 8 activation blocks of 32, in pairs
// (2p, 2p + 1) of 8 vectors of 64 bytes whose byte 4r + e holds row r's
// weight 4i + e of block 2p in its low nibble and of block 2p + 1 in its
// high nibble (vector i of the pair), and the type's scales. The byte
// offsets are kpanel's (src/core/quant_types.hpp): the scales first, then
// the vectors in the order the kernels read them.
//   Q4_K: nibbles are the file's qs bytes as they are (qs[32p + 4i + e]);
//         scales d[16], dmin[16] (f16), sc[8][16], mn[8][16] (6-bit, u8).
//   Q5_K: as Q4_K's, and the file's qh (the fifth bits: bit j of byte
//         4r + e of vector i is weight 4i + e of block j's) as 8 vectors.
//   Q6_K: nibbles are the 6-bit q's low 4 bits; 2 × 8 vectors of the high
//         2 bits (vector i of plane s, byte 4r + e: bits 2c, 2c + 1 hold
//         weight 4i + e of block 4s + c); d[16] (f16), sc[16][16] (i8, one
//         per 16 weights).
namespace {

// Q6_K's weight w (0..255) of a file block, unsigned (0..63; the value is q − 32).
int k6_quant(const uint8_t* blk, int w) {
  const int h = w / 128, c = (w % 128) / 32, l = w % 32;
  const uint8_t* ql = blk + 64 * h;
  const uint8_t* qh = blk + 128 + 32 * h;
  // c = 0: ql[l] low; 1: ql[l + 32] low; 2: ql[l] high; 3: ql[l + 32] high
  const int lo4 = c == 0 ? ql[l] & 0xF : c == 1 ? ql[l + 32] & 0xF : c == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
  return lo4 | (((qh[l] >> (2 * c)) & 3) << 4);
}

// Q4_K and Q5_K (kFive): nibbles, the fifth bits, scales.
template <bool kFive>
void pack_k45(const uint8_t* blk, int64_t r, uint8_t* out) {
  constexpr GgmlType t = kFive ? GgmlType::q5_k : GgmlType::q4_k;
  const uint8_t* qs = blk + (kFive ? 48 : 16);
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 8; ++i)
      for (int e = 0; e < 4; ++e) out[kpanel::pair(t, p) + i * 64 + 4 * r + e] = qs[32 * p + 4 * i + e];
  if constexpr (kFive)
    for (int i = 0; i < 8; ++i)
      for (int e = 0; e < 4; ++e) out[kpanel::plane(t, 0) + i * 64 + 4 * r + e] = blk[16 + 4 * i + e];
  for (int j = 0; j < 8; ++j) k4_scale_min(blk + 4, j, out[kpanel::scale(t, j) + r], out[kpanel::min(j) + r]);
  std::memcpy(out + kpanel::d + 2 * r, blk, 2);
  std::memcpy(out + kpanel::dmin + 2 * r, blk + 2, 2);
}

template <bool kFive>
void unpack_k45(const uint8_t* blk, int64_t lane, float* o) {  // as dequantize_q4_k / _q5_k
  constexpr GgmlType t = kFive ? GgmlType::q5_k : GgmlType::q4_k;
  uint16_t dh, mh;
  std::memcpy(&dh, blk + kpanel::d + 2 * lane, 2);
  std::memcpy(&mh, blk + kpanel::dmin + 2 * lane, 2);
  const float d = fp16_to_float(dh), dmin = fp16_to_float(mh);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * float(blk[kpanel::scale(t, j) + lane]), mj = dmin * float(blk[kpanel::min(j) + lane]);
    for (int i = 0; i < 8; ++i)
      for (int e = 0; e < 4; ++e) {
        const uint8_t byte = blk[kpanel::pair(t, j / 2) + i * 64 + 4 * lane + e];
        const int h = kFive ? (blk[kpanel::plane(t, 0) + i * 64 + 4 * lane + e] >> j) & 1 : 0;
        o[32 * j + 4 * i + e] = dj * float((j % 2 ? byte >> 4 : byte & 0xF) | (h << 4)) - mj;
      }
  }
}

}  // namespace

void pack_q4_k(const uint8_t* blk, int64_t r, uint8_t* out) { pack_k45<false>(blk, r, out); }
void pack_q5_k(const uint8_t* blk, int64_t r, uint8_t* out) { pack_k45<true>(blk, r, out); }
void unpack_q4_k(const uint8_t* blk, int64_t lane, float* o) { unpack_k45<false>(blk, lane, o); }
void unpack_q5_k(const uint8_t* blk, int64_t lane, float* o) { unpack_k45<true>(blk, lane, o); }

void pack_q6_k(const uint8_t* blk, int64_t r, uint8_t* out) {
  constexpr GgmlType t = GgmlType::q6_k;
  int q[256];
  for (int w = 0; w < 256; ++w) q[w] = k6_quant(blk, w);
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 8; ++i)
      for (int e = 0; e < 4; ++e) {
        const int w = 64 * p + 4 * i + e;
        out[kpanel::pair(t, p) + i * 64 + 4 * r + e] = uint8_t((q[w] & 0xF) | ((q[w + 32] & 0xF) << 4));
      }
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 8; ++i)
      for (int e = 0; e < 4; ++e) {
        int bits = 0;
        for (int c = 0; c < 4; ++c) bits |= (q[32 * (4 * s + c) + 4 * i + e] >> 4) << (2 * c);
        out[kpanel::plane(t, s) + i * 64 + 4 * r + e] = uint8_t(bits);
      }
  for (int j = 0; j < 16; ++j) out[kpanel::scale(t, j / 2) + 16 * (j % 2) + r] = blk[192 + j];
  std::memcpy(out + kpanel::d + 2 * r, blk + 208, 2);
}

void unpack_q6_k(const uint8_t* blk, int64_t lane, float* o) {  // as dequantize_q6_k: d · sc · (q − 32)
  constexpr GgmlType t = GgmlType::q6_k;
  uint16_t dh;
  std::memcpy(&dh, blk + kpanel::d + 2 * lane, 2);
  const float d = fp16_to_float(dh);
  for (int w = 0; w < 256; ++w) {
    const int j = w / 32, i = (w % 32) / 4, e = w % 4;
    const uint8_t nib = blk[kpanel::pair(t, j / 2) + i * 64 + 4 * lane + e];
    const uint8_t hib = blk[kpanel::plane(t, j / 4) + i * 64 + 4 * lane + e];
    const int q = ((j % 2 ? nib >> 4 : nib & 0xF) | (((hib >> (2 * (j % 4))) & 3) << 4)) - 32;
    const int8_t sc = int8_t(blk[kpanel::scale(t, j) + 16 * ((w % 32) / 16) + lane]);
    o[w] = d * float(sc) * float(q);
  }
}

// ---- dequantized only: Q5_0, Q5_1, Q5_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS ----
// The same float32 operations in the same order as gguf-py's
// dequantize_blocks (gguf 0.10.0, gguf/quants.py); for these types that is
// also ggml's dequantize_row_* order (a product d · q, then + m or − m).

namespace {
// IQ4_NL's and IQ4_XS's 16 non-linear levels (kvalues_iq4nl).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
}  // namespace

// {f16 d; u8 qh[4]; u8 qs[16]}: element j: low nibble of qs[j] (j + 16: high), bit j of qh as bit 4; (q − 16) · d
void dequantize_q5_0(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 32; ++b, src += 22, dst += 32) {
    const float d = f16(src);
    uint32_t qh;
    std::memcpy(&qh, src + 2, 4);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      const int q0 = int((qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int q1 = int((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      dst[j] = d * float(q0);
      dst[j + 16] = d * float(q1);
    }
  }
}

// {f16 d, m; u8 qh[4]; u8 qs[16]}: Q5_0's 5-bit q, unsigned; q · d + m
void dequantize_q5_1(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 32; ++b, src += 24, dst += 32) {
    const float d = f16(src), m = f16(src + 2);
    uint32_t qh;
    std::memcpy(&qh, src + 4, 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      const uint32_t q0 = (qs[j] & 0x0Fu) | (((qh >> j) & 1u) << 4);
      const uint32_t q1 = (qs[j] >> 4u) | (((qh >> (j + 16)) & 1u) << 4);
      dst[j] = d * float(q0) + m;
      dst[j + 16] = d * float(q1) + m;
    }
  }
}

// {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K with bit 4 of each q in qh (sub-block s: bit s)
void dequantize_q5_k(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 256; ++b, src += 176) {
    const float d = f16(src), dmin = f16(src + 2);
    const uint8_t* sc = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* q = src + 48;
    for (int j = 0; j < 8; j += 2, q += 32) {  // sub-blocks j and j + 1
      uint8_t s, m;
      k4_scale_min(sc, j, s, m);
      const float d1 = d * float(s), m1 = dmin * float(m);
      k4_scale_min(sc, j + 1, s, m);
      const float d2 = d * float(s), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * float((q[l] & 0xF) | (((qh[l] >> j) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * float((q[l] >> 4) | (((qh[l] >> (j + 1)) & 1) << 4)) - m2;
    }
  }
}

// {u8 scales[16]; u8 qs[64]; f16 d, dmin}: 16 sub-blocks of 16, 4-bit scale (low) and min (high); 2-bit q
void dequantize_q2_k(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 256; ++b, src += 84) {
    const float d = f16(src + 80), dmin = f16(src + 82);
    const uint8_t* sc = src;
    for (int h = 0; h < 2; ++h) {  // 128 elements from qs[32h .. 32h + 32)
      const uint8_t* q = src + 16 + 32 * h;
      for (int shift = 0; shift < 8; shift += 2)
        for (int half = 0; half < 2; ++half, ++sc) {
          const float dl = d * float(*sc & 0xF), ml = dmin * float(*sc >> 4);
          for (int l = 0; l < 16; ++l) *dst++ = dl * float((q[16 * half + l] >> shift) & 3) - ml;
        }
    }
  }
}

// {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: 16 sub-blocks of 16, 6-bit scale − 32; q − 4 if hmask's bit is 0
void dequantize_q3_k(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 256; ++b, src += 110) {
    const uint8_t* hm = src;
    const uint8_t* sc = src + 96;
    const float d = f16(src + 108);
    int8_t scales[16];  // sub-block i: low 4 bits from sc[i % 8] (i < 8: low nibble), high 2 from sc[8 + i % 4]
    for (int i = 0; i < 16; ++i) {
      const int lo = (i < 8 ? sc[i] : sc[i - 8] >> 4) & 0x0F, hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
      scales[i] = int8_t((lo | (hi << 4)) - 32);
    }
    int is = 0, bit = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = src + 32 + 32 * h;
      for (int shift = 0; shift < 8; shift += 2, ++bit)
        for (int half = 0; half < 2; ++half) {
          const float dl = d * float(scales[is++]);
          for (int l = 16 * half; l < 16 * half + 16; ++l)
            *dst++ = dl * float(int((q[l] >> shift) & 3) - ((hm[l] >> bit) & 1 ? 0 : 4));
        }
    }
  }
}

// {f16 d; u8 qs[16]}: element j low nibble, j + 16 high, through kvalues_iq4nl; d · value
void dequantize_iq4_nl(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const float d = f16(src);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(kIq4Values[src[2 + j] & 0x0F]);
      dst[j + 16] = d * float(kIq4Values[src[2 + j] >> 4]);
    }
  }
}

// {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: 8 sub-blocks of 32 (IQ4_NL's layout), 6-bit scale − 32
void dequantize_iq4_xs(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 256; ++b, src += 136) {
    const float d = f16(src);
    uint16_t sh;
    std::memcpy(&sh, src + 2, 2);
    const uint8_t* sl = src + 4;
    const uint8_t* qs = src + 8;
    for (int ib = 0; ib < 8; ++ib, qs += 16, dst += 32) {
      const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
      const float dl = d * float(ls - 32);
      for (int j = 0; j < 16; ++j) {
        dst[j] = dl * float(kIq4Values[qs[j] & 0x0F]);
        dst[j + 16] = dl * float(kIq4Values[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace ffn::nn::blocks
