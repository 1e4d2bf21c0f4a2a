// Text for error messages: shapes as "[2, 3]", numbers as printf's %g,
// durations as "850 ms", "42 s", "7.5 min" or "3.2 h".
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

inline std::string duration_str(double seconds) {
  char b[32];
  if (seconds < 1.0)
    std::snprintf(b, sizeof b, "%.0f ms", seconds * 1e3);
  else if (seconds < 120.0)
    std::snprintf(b, sizeof b, "%.0f s", seconds);
  else if (seconds < 7200.0)
    std::snprintf(b, sizeof b, "%.1f min", seconds / 60.0);
  else
    std::snprintf(b, sizeof b, "%.1f h", seconds / 3600.0);
  return b;
}

}  // namespace ffn
