// The public types' own code (ffn/types.hpp): the error, the names of the
// enums (one table each, for printing and parsing), the settings' checks, the
// valid tokens of a Shape, and how d_ff is cut into shards (DffShards).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "core/positions.hpp"
#include "ffn/parallel.hpp"
#include "ffn/types.hpp"

namespace ffn {

namespace {
std::string one_line(const std::string& m) {
  std::string out;
  out.reserve(m.size());
  for (unsigned char c : m) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}
}  // namespace

Error::Error(const std::string& message) : std::runtime_error(one_line(message)) {}

// ---- names ------------------------------------------------------------------

namespace {
template <typename E, size_t N>
E parse_enum(std::string_view s, std::string_view what, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, value] : table)
    if (s == name) return value;
  std::string expected;
  for (size_t i = 0; i < N; ++i) expected += (i ? (i + 1 == N ? " or " : ", ") : "") + std::string(table[i].first);
  throw Error(std::string(what) + ": unknown value '" + std::string(s) + "', expected " + expected);
}

constexpr std::pair<const char*, Activation> kActivations[] = {
    {"relu", Activation::relu},     {"gelu", Activation::gelu},     {"gelu_tanh", Activation::gelu_tanh},
    {"silu", Activation::silu},     {"swiglu", Activation::swiglu}, {"geglu", Activation::geglu},
    {"reglu", Activation::reglu},   {"geglu_tanh", Activation::geglu_tanh}};
constexpr std::pair<const char*, NormPlacement> kPlacements[] = {
    {"post", NormPlacement::post}, {"pre", NormPlacement::pre}, {"none", NormPlacement::none}};
constexpr std::pair<const char*, NormType> kNormTypes[] = {{"layernorm", NormType::layernorm},
                                                           {"rmsnorm", NormType::rmsnorm}};
constexpr std::pair<const char*, Layout> kLayouts[] = {{"tokens", Layout::tokens}, {"ncw", Layout::ncw}};
constexpr std::pair<const char*, Isa> kIsas[] = {
    {"auto", Isa::automatic}, {"scalar", Isa::scalar}, {"avx2", Isa::avx2}, {"avx512", Isa::avx512}, {"amx", Isa::amx}};
constexpr std::pair<const char*, Compute> kComputes[] = {{"fp32", Compute::fp32}, {"bf16", Compute::bf16}};
constexpr std::pair<const char*, WeightDtype> kDtypes[] = {{"fp32", WeightDtype::fp32}, {"int8", WeightDtype::int8},
                                                           {"bf16", WeightDtype::bf16}, {"fp16", WeightDtype::fp16}};

template <typename E, size_t N>
std::string_view name_of(E v, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, value] : table)
    if (v == value) return name;
  return "?";
}
}  // namespace

std::string_view to_string(Activation a) { return name_of(a, kActivations); }
std::string_view to_string(NormPlacement p) { return name_of(p, kPlacements); }
std::string_view to_string(NormType t) { return name_of(t, kNormTypes); }
std::string_view to_string(Layout l) { return name_of(l, kLayouts); }
Activation parse_activation(std::string_view s, std::string_view what) { return parse_enum(s, what, kActivations); }
NormPlacement parse_norm_placement(std::string_view s, std::string_view what) {
  return parse_enum(s, what, kPlacements);
}
NormType parse_norm_type(std::string_view s, std::string_view what) { return parse_enum(s, what, kNormTypes); }
Layout parse_layout(std::string_view s, std::string_view what) { return parse_enum(s, what, kLayouts); }
std::string_view to_string(WeightDtype t) { return name_of(t, kDtypes); }
WeightDtype parse_weight_dtype(std::string_view s, std::string_view what) { return parse_enum(s, what, kDtypes); }

bool is_gated(Activation a) {
  return a == Activation::swiglu || a == Activation::geglu || a == Activation::reglu || a == Activation::geglu_tanh;
}
std::string_view to_string(Isa i) { return name_of(i, kIsas); }
Isa parse_isa(std::string_view s, std::string_view what) { return parse_enum(s, what, kIsas); }
std::string_view to_string(Compute c) { return name_of(c, kComputes); }
Compute parse_compute(std::string_view s, std::string_view what) { return parse_enum(s, what, kComputes); }


// ---- settings -----------------------------------------------------------------

// Sizes large enough for any real model, small enough that d_model * d_ff
// and T * d_ff never overflow int64 arithmetic.
constexpr int64_t kMaxDim = int64_t(1) << 24;

void Config::validate() const {
  if (d_model < 1 || d_model > kMaxDim) throw Error("d_model must be in [1, 2^24], got " + std::to_string(d_model));
  if (d_ff < 1 || d_ff > kMaxDim) throw Error("d_ff must be in [1, 2^24], got " + std::to_string(d_ff));
  if (!(eps > 0.0f) || !std::isfinite(eps)) throw Error("eps must be a positive number, got " + num(eps));
  if (!(dropout_hidden >= 0.0f && dropout_hidden <= 1.0f))
    throw Error("hidden dropout probability must be in [0, 1], got " + num(dropout_hidden));
  if (!(dropout_output >= 0.0f && dropout_output <= 1.0f))
    throw Error("output dropout probability must be in [0, 1], got " + num(dropout_output));
}

int64_t valid_tokens(const Shape& shape) { return int64_t(nn::valid_positions(shape).size()); }

// ---- d_ff shards (ffn/feed_forward.hpp): the rule the fused FFN, the file
// readers and the tensor-parallel layers share --------------------------------

std::pair<int64_t, int64_t> DffShards::units(int64_t d_ff, int64_t count, int64_t a, int64_t b) {
  const int64_t chunks = (d_ff + kDffShardChunk - 1) / kDffShardChunk;
  auto at = [&](int64_t s) { return std::min(d_ff, chunks * s / count * kDffShardChunk); };
  return {at(a), at(b)};
}

void DffShards::validate(const std::string& what) const {
  if (count < 1 || count > 64 || (count & (count - 1)) != 0)
    throw Error(what + "count must be a power of two from 1 to 64, got " + std::to_string(count));
  if (first < 0 || first >= last || last > count)
    throw Error(what + "expected 0 <= first < last <= count = " + std::to_string(count) + ", got [" +
                std::to_string(first) + ", " + std::to_string(last) + ")");
  const int64_t size = last - first;
  if ((size & (size - 1)) != 0 || first % size != 0)
    throw Error(what + "[" + std::to_string(first) + ", " + std::to_string(last) + ") is not an aligned block of the " +
                std::to_string(count) + " shards (a power-of-two size that divides its first shard), so its sum "
                "is no subtree of theirs");
}

}  // namespace ffn
