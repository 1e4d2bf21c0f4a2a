// Quant types in one table (issue 45; ggml's type_traits[]): a row per ggml
// type number holds everything ffn knows about the type, and nothing else
// in ffn spells out a type's sizes or layout:
//   - its name and GGUF number;
//   - elements and bytes per block (0: a type ffn knows by name only, and
//     whose tensors the GGUF reader refuses, naming it);
//   - dequantize: the file's blocks to float32, bitwise as ggml's
//     dequantize_row_* (src/core/quant_blocks.cpp);
//   - native compute (optional): the 16-row panel layout that the
//     block-quantized product keeps in memory (src/backends/cpu/qgemm.hpp),
//     how one row's block goes into it and comes back out, and the integer
//     rule's reference for one row and token, read from the file's own blocks
//     (src/reference/qlinear_reference.cpp).
// Each ISA's products for the type are reached through the kernel set
// (KernelConfig::qgemm in src/backends/cpu/kernel_config.cpp, a list of
// (type, kernel)); a set without one falls back to the scalar set's, which
// has the same bits by the rule.
//
// Adding a type: its row below, its block functions in
// src/core/quant_blocks.cpp, its reference in
// src/reference/qlinear_reference.cpp if it is native, and kernels where
// they are worth it
// (CONTRIBUTING.md, "Add a quant type"). A type outside ggml's numbers
// (tests, experiments) is added at run time with register_quant_type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ffn/quant.hpp"

namespace ffn::nn {

struct QActs;  // the quantized activations (src/backends/cpu/qgemm.hpp)

constexpr int64_t kQBlock = 32;  // the activations' block (and the 32-weight types' block)
constexpr int64_t kQRows = 16;   // rows per panel group (a zmm's int32 lanes)

// file_block: one row's block as stored; panel_block: a (group, block) of
// the panels; lane: the row's place in its group (0..15).
using DequantizeFn = void (*)(const uint8_t* src, int64_t n, float* dst);
using PackFn = void (*)(const uint8_t* file_block, int64_t lane, uint8_t* panel_block);
using UnpackFn = void (*)(const uint8_t* panel_block, int64_t lane, float* out);
// The integer rule (src/backends/cpu/qgemm.hpp) for one row of k weights
// (k / block file blocks at row) and token t of x: the reference every ISA's
// kernel is checked against, bit for bit.
using QDotReferenceFn = float (*)(const uint8_t* row, int64_t k, const QActs& x, int64_t t);

// A (group, block) of panels: the quants of 16 rows (quant_bytes), then
// their f16 scales (scale_bytes: d[16], and m[16] where the type has a
// minimum); the K-quants' bytes are in kpanel's order below, their
// quant_bytes and scale_bytes only the sizes. Q5_0's and Q6_K's end in 32
// bytes of padding: a whole number of cache lines, so that no vector load
// straddles two (Q6_K's 3360 bytes streamed at 14.6 GB/s without software
// prefetch, Q4_K's 2368 at 27.8, Zen 4).
struct PanelLayout {
  int64_t quant_bytes = 0, scale_bytes = 0;
  PackFn pack = nullptr;
  UnpackFn unpack = nullptr;
  constexpr int64_t bytes() const { return quant_bytes + scale_bytes; }
};

struct QuantType {
  GgmlType id{};
  const char* name = "";
  int64_t block = 0, block_bytes = 0;  // elements and bytes per block; 0: named only
  DequantizeFn dequantize = nullptr;
  PanelLayout panels{};                // no pack: expanded to float32 where a model needs it
  QDotReferenceFn reference = nullptr;
  constexpr bool readable() const { return dequantize != nullptr; }
  constexpr bool native() const { return panels.pack != nullptr; }
  constexpr int64_t row_bytes(int64_t k) const { return k / block * block_bytes; }
};

// The block functions of the built-in types (src/core/quant_blocks.cpp; the
// references in src/reference/qlinear_reference.cpp).
namespace blocks {
// Q4_K's and Q5_K's 6-bit scale s and minimum m of sub-block j from the
// block's 12 scale bytes (ggml's get_scale_min_k4).
void k4_scale_min(const uint8_t* scales, int j, uint8_t& s, uint8_t& m);
void dequantize_f32(const uint8_t*, int64_t, float*);
void dequantize_f16(const uint8_t*, int64_t, float*);
void dequantize_bf16(const uint8_t*, int64_t, float*);
void dequantize_q4_0(const uint8_t*, int64_t, float*);
void dequantize_q4_1(const uint8_t*, int64_t, float*);
void dequantize_q8_0(const uint8_t*, int64_t, float*);
void dequantize_q4_k(const uint8_t*, int64_t, float*);
void dequantize_q6_k(const uint8_t*, int64_t, float*);
void dequantize_q5_0(const uint8_t*, int64_t, float*);
void dequantize_q5_1(const uint8_t*, int64_t, float*);
void dequantize_q5_k(const uint8_t*, int64_t, float*);
void dequantize_q2_k(const uint8_t*, int64_t, float*);
void dequantize_q3_k(const uint8_t*, int64_t, float*);
void dequantize_iq4_nl(const uint8_t*, int64_t, float*);
void dequantize_iq4_xs(const uint8_t*, int64_t, float*);
void pack_q4_0(const uint8_t*, int64_t, uint8_t*);
void pack_q4_1(const uint8_t*, int64_t, uint8_t*);
void pack_q8_0(const uint8_t*, int64_t, uint8_t*);
void pack_q5_0(const uint8_t*, int64_t, uint8_t*);
void pack_q5_1(const uint8_t*, int64_t, uint8_t*);
void pack_q4_k(const uint8_t*, int64_t, uint8_t*);
void pack_q5_k(const uint8_t*, int64_t, uint8_t*);
void pack_q6_k(const uint8_t*, int64_t, uint8_t*);
void unpack_q4_0(const uint8_t*, int64_t, float*);
void unpack_q4_1(const uint8_t*, int64_t, float*);
void unpack_q8_0(const uint8_t*, int64_t, float*);
void unpack_q5_0(const uint8_t*, int64_t, float*);
void unpack_q5_1(const uint8_t*, int64_t, float*);
void unpack_q4_k(const uint8_t*, int64_t, float*);
void unpack_q5_k(const uint8_t*, int64_t, float*);
void unpack_q6_k(const uint8_t*, int64_t, float*);
float reference_q4_0(const uint8_t*, int64_t, const QActs&, int64_t);
float reference_q4_1(const uint8_t*, int64_t, const QActs&, int64_t);
float reference_q8_0(const uint8_t*, int64_t, const QActs&, int64_t);
float reference_q5_0(const uint8_t*, int64_t, const QActs&, int64_t);
float reference_q5_1(const uint8_t*, int64_t, const QActs&, int64_t);
float reference_q4_k(const uint8_t*, int64_t, const QActs&, int64_t);
float reference_q5_k(const uint8_t*, int64_t, const QActs&, int64_t);
float reference_q6_k(const uint8_t*, int64_t, const QActs&, int64_t);
}  // namespace blocks

// The table: ggml's type numbers (ggml.h), in order.
inline constexpr QuantType kQuantTypes[] = {
    {.id = GgmlType::f32, .name = "F32", .block = 1, .block_bytes = 4, .dequantize = &blocks::dequantize_f32},
    {.id = GgmlType::f16, .name = "F16", .block = 1, .block_bytes = 2, .dequantize = &blocks::dequantize_f16},
    {.id = GgmlType::q4_0, .name = "Q4_0", .block = 32, .block_bytes = 18, .dequantize = &blocks::dequantize_q4_0,
     .panels = {.quant_bytes = 256, .scale_bytes = 32, .pack = &blocks::pack_q4_0, .unpack = &blocks::unpack_q4_0},
     .reference = &blocks::reference_q4_0},
    {.id = GgmlType::q4_1, .name = "Q4_1", .block = 32, .block_bytes = 20, .dequantize = &blocks::dequantize_q4_1,
     .panels = {.quant_bytes = 256, .scale_bytes = 64, .pack = &blocks::pack_q4_1, .unpack = &blocks::unpack_q4_1},
     .reference = &blocks::reference_q4_1},
    {.id = GgmlType(4), .name = "Q4_2"},
    {.id = GgmlType(5), .name = "Q4_3"},
    {.id = GgmlType::q5_0, .name = "Q5_0", .block = 32, .block_bytes = 22, .dequantize = &blocks::dequantize_q5_0,
     .panels = {.quant_bytes = 320, .scale_bytes = 64, .pack = &blocks::pack_q5_0, .unpack = &blocks::unpack_q5_0},
     .reference = &blocks::reference_q5_0},
    {.id = GgmlType::q5_1, .name = "Q5_1", .block = 32, .block_bytes = 24, .dequantize = &blocks::dequantize_q5_1,
     .panels = {.quant_bytes = 320, .scale_bytes = 64, .pack = &blocks::pack_q5_1, .unpack = &blocks::unpack_q5_1},
     .reference = &blocks::reference_q5_1},
    {.id = GgmlType::q8_0, .name = "Q8_0", .block = 32, .block_bytes = 34, .dequantize = &blocks::dequantize_q8_0,
     .panels = {.quant_bytes = 512, .scale_bytes = 32, .pack = &blocks::pack_q8_0, .unpack = &blocks::unpack_q8_0},
     .reference = &blocks::reference_q8_0},
    {.id = GgmlType::q8_1, .name = "Q8_1"},
    {.id = GgmlType::q2_k, .name = "Q2_K", .block = 256, .block_bytes = 84, .dequantize = &blocks::dequantize_q2_k},
    {.id = GgmlType::q3_k, .name = "Q3_K", .block = 256, .block_bytes = 110, .dequantize = &blocks::dequantize_q3_k},
    {.id = GgmlType::q4_k, .name = "Q4_K", .block = 256, .block_bytes = 144, .dequantize = &blocks::dequantize_q4_k,
     .panels = {.quant_bytes = 2048, .scale_bytes = 320, .pack = &blocks::pack_q4_k, .unpack = &blocks::unpack_q4_k},
     .reference = &blocks::reference_q4_k},
    {.id = GgmlType::q5_k, .name = "Q5_K", .block = 256, .block_bytes = 176, .dequantize = &blocks::dequantize_q5_k,
     .panels = {.quant_bytes = 2560, .scale_bytes = 320, .pack = &blocks::pack_q5_k, .unpack = &blocks::unpack_q5_k},
     .reference = &blocks::reference_q5_k},
    {.id = GgmlType::q6_k, .name = "Q6_K", .block = 256, .block_bytes = 210, .dequantize = &blocks::dequantize_q6_k,
     .panels = {.quant_bytes = 3072, .scale_bytes = 320, .pack = &blocks::pack_q6_k, .unpack = &blocks::unpack_q6_k},
     .reference = &blocks::reference_q6_k},
    {.id = GgmlType::q8_k, .name = "Q8_K"},
    {.id = GgmlType(16), .name = "IQ2_XXS"},
    {.id = GgmlType(17), .name = "IQ2_XS"},
    {.id = GgmlType(18), .name = "IQ3_XXS"},
    {.id = GgmlType(19), .name = "IQ1_S"},
    {.id = GgmlType::iq4_nl, .name = "IQ4_NL", .block = 32, .block_bytes = 18, .dequantize = &blocks::dequantize_iq4_nl},
    {.id = GgmlType(21), .name = "IQ3_S"},
    {.id = GgmlType(22), .name = "IQ2_S"},
    {.id = GgmlType::iq4_xs, .name = "IQ4_XS", .block = 256, .block_bytes = 136, .dequantize = &blocks::dequantize_iq4_xs},
    {.id = GgmlType(24), .name = "I8"},
    {.id = GgmlType(25), .name = "I16"},
    {.id = GgmlType(26), .name = "I32"},
    {.id = GgmlType(27), .name = "I64"},
    {.id = GgmlType(28), .name = "F64"},
    {.id = GgmlType(29), .name = "IQ1_M"},
    {.id = GgmlType::bf16, .name = "BF16", .block = 1, .block_bytes = 2, .dequantize = &blocks::dequantize_bf16},
};

// A built-in row at compile time (the kernels' constants), or null.
constexpr const QuantType* builtin_quant_type(GgmlType t) {
  for (const QuantType& q : kQuantTypes)
    if (q.id == t) return &q;
  return nullptr;
}

// Byte offsets inside a (group, block) of the K-quants' panels (layouts in
// src/core/quant_blocks.cpp), in the order the kernels read them: the
// scales first, then each pair of activation blocks' nibbles with the bit
// planes they need just before or after them.
namespace kpanel {
constexpr int64_t d = 0;      // f16 d[16]
constexpr int64_t dmin = 32;  // Q4_K, Q5_K: f16 dmin[16]
// Activation block j's scales: Q4_K, Q5_K: sc[16] (u8; mn[16] at min(j));
// Q6_K: its two sub-blocks' sc[16] (i8), 16 bytes apart.
constexpr int64_t scale(GgmlType t, int64_t j) { return t == GgmlType::q6_k ? 32 + 32 * j : 64 + 16 * j; }
constexpr int64_t min(int64_t j) { return 192 + 16 * j; }
// Pair p's 8 nibble vectors.
constexpr int64_t pair(GgmlType t, int64_t p) {
  if (t == GgmlType::q6_k) return p == 0 ? 288 : p == 1 ? 1312 : p == 2 ? 1824 : 2848;
  return (t == GgmlType::q5_k ? 832 : 320) + 512 * p;
}
// The 8 vectors of high bits: Q5_K's one plane (s = 0); Q6_K's plane s
// (blocks 4s..4s + 3), read with pairs 2s and 2s + 1.
constexpr int64_t plane(GgmlType t, int64_t s) { return t == GgmlType::q5_k ? 320 : s == 0 ? 800 : 2336; }
}  // namespace kpanel

// The row of a type number (built-in or registered), or null.
const QuantType* find_quant_type(uint32_t id);
// The row of t; Error naming the number if there is none.
const QuantType& quant_type(GgmlType t);
// Adds a row at run time: a type outside ggml's numbers (id ≥ kFirstExtensionType),
// with its block functions; Error if the number is taken or the row is
// inconsistent (a native row needs dequantize, pack, unpack and reference,
// and a block of whole 32-weight activation blocks).
constexpr uint32_t kFirstExtensionType = 1024;
void register_quant_type(const QuantType& row);
// Every row, built-in first.
std::vector<const QuantType*> quant_types();

}  // namespace ffn::nn
