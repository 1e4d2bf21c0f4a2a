// Special tokens written in a text, as Hugging Face tokenizers cuts them out
// before the model's own splitting (byte-level BPE, SentencePiece).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ffn::text {

// Whether s is valid UTF-8 (src/text/bpe.cpp).
bool valid_utf8(const std::string& s);

// Longest first, then by id: the order the match below tries them in.
inline void sort_specials(std::vector<std::pair<std::string, int32_t>>& specials) {
  std::sort(specials.begin(), specials.end(), [](const auto& a, const auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() > b.first.size() : a.second < b.second;
  });
}

// Walks text: each special token (the longest that matches at a position)
// goes to out as its id; each stretch between them, [from, to), to
// plain(from, to).
template <class Plain>
void cut_specials(const std::string& text, const std::vector<std::pair<std::string, int32_t>>& specials, Plain&& plain,
                  std::vector<int32_t>& out) {
  size_t start = 0, i = 0;
  while (i < text.size()) {
    int32_t hit = -1;
    size_t len = 0;
    for (const auto& [s, id] : specials)
      if (!s.empty() && text.compare(i, s.size(), s) == 0) {
        hit = id;
        len = s.size();
        break;
      }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) plain(start, i);
    out.push_back(hit);
    i += len;
    start = i;
  }
  if (text.size() > start) plain(start, text.size());
}

}  // namespace ffn::text
