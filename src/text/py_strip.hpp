// Python's white space and strip on UTF-8 text, as sentence-transformers
// strips a text before tokenizing it (str.strip), and a UTF-8 check that
// names the text: shared by the encoder tokenizers (XLM-R's, the BPE one).
#pragma once

#include <utf8proc.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ffn/types.hpp"

namespace ffn::text {

// Python's str.isspace() for one code point (what str.rstrip() strips).
inline bool py_space(int32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// The text with its trailing (Python) white space removed; the text is valid UTF-8.
inline std::string_view rstrip(std::string_view s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t c;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), utf8proc_ssize_t(s.size() - i), &c);
    starts.push_back(i);
    i += size_t(n > 0 ? n : 1);
  }
  size_t end = s.size();
  while (!starts.empty()) {
    utf8proc_int32_t c;
    utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + starts.back()),
                     utf8proc_ssize_t(end - starts.back()), &c);
    if (!py_space(c)) break;
    end = starts.back();
    starts.pop_back();
  }
  return s.substr(0, end);
}

// The text without its leading (Python) white space; the text is valid UTF-8.
inline std::string_view lstrip(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t c;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), utf8proc_ssize_t(s.size() - i), &c);
    if (n <= 0 || !py_space(c)) break;
    i += size_t(n);
  }
  return s.substr(i);
}

inline void check_utf8(std::string_view s, const std::string& what) {
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t c;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), utf8proc_ssize_t(s.size() - i), &c);
    if (n <= 0) throw Error(what + ": not valid UTF-8 (at byte " + std::to_string(i) + ")");
    i += size_t(n);
  }
}

}  // namespace ffn::text
