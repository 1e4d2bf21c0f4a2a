// Text for error messages: shapes as "[2, 3]", numbers as printf's %g.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ffn {

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace ffn
