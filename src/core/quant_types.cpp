// The quant type table's lookups and run-time rows (src/core/quant_types.hpp).
#include "core/quant_types.hpp"

#include <deque>
#include <mutex>

#include "ffn/types.hpp"

namespace ffn::nn {
namespace {

// Rows added at run time; a deque keeps their addresses.
struct Extensions {
  std::mutex mu;
  std::deque<QuantType> rows;
};
Extensions& extensions() {
  static Extensions e;
  return e;
}

}  // namespace

const QuantType* find_quant_type(uint32_t id) {
  if (id < kFirstExtensionType) return builtin_quant_type(GgmlType(id));
  Extensions& e = extensions();
  std::lock_guard<std::mutex> lock(e.mu);
  for (const QuantType& q : e.rows)
    if (uint32_t(q.id) == id) return &q;
  return nullptr;
}

const QuantType& quant_type(GgmlType t) {
  const QuantType* q = find_quant_type(uint32_t(t));
  if (!q) throw Error("quant type " + std::to_string(uint32_t(t)) + " is not in the table (src/core/quant_types.hpp)");
  return *q;
}

void register_quant_type(const QuantType& row) {
  const std::string what = std::string("register_quant_type: ") + (row.name ? row.name : "(unnamed)");
  if (uint32_t(row.id) < kFirstExtensionType)
    throw Error(what + ": number " + std::to_string(uint32_t(row.id)) + " is ggml's; an added type takes " +
                std::to_string(kFirstExtensionType) + " or above");
  if (row.block <= 0 || row.block_bytes <= 0 || !row.dequantize)
    throw Error(what + ": a row needs its block, bytes per block and dequantize");
  if (row.native() && (!row.panels.unpack || !row.reference || row.panels.quant_bytes <= 0 ||
                       row.panels.scale_bytes < 0 || row.block % kQBlock != 0))
    throw Error(what + ": a native row needs pack, unpack, its reference, panel sizes and a block of whole " +
                std::to_string(kQBlock) + "-weight activation blocks");
  Extensions& e = extensions();
  std::lock_guard<std::mutex> lock(e.mu);
  for (const QuantType& q : e.rows)
    if (q.id == row.id) throw Error(what + ": number " + std::to_string(uint32_t(row.id)) + " is taken by " + q.name);
  e.rows.push_back(row);
}

std::vector<const QuantType*> quant_types() {
  std::vector<const QuantType*> v;
  for (const QuantType& q : kQuantTypes) v.push_back(&q);
  Extensions& e = extensions();
  std::lock_guard<std::mutex> lock(e.mu);
  for (const QuantType& q : e.rows) v.push_back(&q);
  return v;
}

}  // namespace ffn::nn

namespace ffn {

std::string ggml_type_name(uint32_t t) {
  const nn::QuantType* q = nn::find_quant_type(t);
  return q ? std::string(q->name) : "unknown (" + std::to_string(t) + ")";
}

bool ggml_block(uint32_t t, int64_t& elems, int64_t& bytes) {
  const nn::QuantType* q = nn::find_quant_type(t);
  if (!q || !q->readable()) return false;
  elems = q->block, bytes = q->block_bytes;
  return true;
}

std::string quant_type_names(QuantSet which, std::string_view sep) {
  std::string s;
  for (const nn::QuantType* q : nn::quant_types())
    if (which == QuantSet::readable ? q->readable() : q->native()) s += (s.empty() ? "" : std::string(sep)) + q->name;
  return s;
}

}  // namespace ffn
