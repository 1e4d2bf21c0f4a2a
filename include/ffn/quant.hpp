// The weight types of GGUF files, by ggml's numbers (ggml.h): the enum, their
// names, and which of them this build reads and which it keeps quantized in
// native compute. Every fact comes from one table, src/core/quant_types.hpp
// (a row per type, types registered at run time included); messages, help
// texts and the Python binding's docs list the types through
// quant_type_names, never by hand.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ffn {

// ggml's tensor type numbers (ggml.h) that ffn names in code; the table has
// a row for every number ggml defines (most named only, and refused).
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9, q2_k = 10, q3_k = 11,
  q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15, iq4_nl = 20, iq4_xs = 23, bf16 = 30,
};
// The name ("Q4_K") of a type number, or "unknown (N)".
std::string ggml_type_name(uint32_t t);
// Elements per block and bytes per block of a type this build reads; false otherwise.
bool ggml_block(uint32_t t, int64_t& elems, int64_t& bytes);

// The types this build reads (dequantizes to float32), or those that native
// compute keeps in their blocks (a product kernel on their panels), in the
// table's order, their names joined by sep: "F32, F16, Q4_0, ...".
enum class QuantSet { readable, native };
std::string quant_type_names(QuantSet which, std::string_view sep = ", ");

}  // namespace ffn
