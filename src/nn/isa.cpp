#include "nn/isa.hpp"

#include <cpuid.h>

#include <cstdlib>
#include <string>

namespace ffn {

namespace {
constexpr std::pair<const char*, Isa> kIsas[] = {
    {"auto", Isa::automatic}, {"scalar", Isa::scalar}, {"avx2", Isa::avx2}, {"avx512", Isa::avx512}};
}

std::string_view to_string(Isa i) {
  for (const auto& [name, v] : kIsas)
    if (v == i) return name;
  return "?";
}

Isa parse_isa(std::string_view s, std::string_view what) {
  for (const auto& [name, v] : kIsas)
    if (s == name) return v;
  throw Error(std::string(what) + ": unknown value '" + std::string(s) + "', expected auto, scalar, avx2 or avx512");
}

namespace {
// F16C (CPUID leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
}
}  // namespace

bool isa_supported(Isa i) {
  switch (i) {
    case Isa::automatic:
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::avx512:
      return false;  // no AVX-512 kernels in this build yet
  }
  return false;
}

Isa best_isa() { return isa_supported(Isa::avx2) ? Isa::avx2 : Isa::scalar; }

namespace nn {

Isa resolve_isa(Isa requested) {
  static const Isa from_env = [] {
    const char* e = std::getenv("FFN_ISA");
    return e && *e ? parse_isa(e, "FFN_ISA") : Isa::automatic;
  }();
  Isa i = requested != Isa::automatic ? requested : from_env;
  if (i == Isa::automatic) return best_isa();
  if (!isa_supported(i))
    throw Error("isa " + std::string(to_string(i)) + ": not available on this CPU or in this build (best: " +
                std::string(to_string(best_isa())) + ")");
  return i;
}

}  // namespace nn
}  // namespace ffn
