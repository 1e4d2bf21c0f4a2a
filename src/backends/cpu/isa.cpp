#include "backends/cpu/isa.hpp"

#include "backends/cpu/kernel_config.hpp"

#include <cstdlib>
#include <fstream>
#include <string>

namespace ffn {

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

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t b = line.find_first_not_of(" \t", colon + 1);
    if (b == std::string::npos) break;
    return line.substr(b, line.find_last_not_of(" \t\r") + 1 - b);
  }
  return "unknown CPU";
}

}  // namespace ffn
