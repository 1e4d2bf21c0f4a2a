// What a sentence encoder or cross-encoder needs of its tokenizer
// (src/models/sentence_model.hpp): a text's ids with the model's special
// tokens, truncated; a text pair's ids and token types, truncated longest
// first; the vocabulary's size. BERT's and MPNet's WordPiece
// (src/text/wordpiece.hpp) and XLM-R's SentencePiece
// (src/text/xlmr_tokenizer.hpp) are the two kinds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ffn::text {

class EncoderTokenizer {
 public:
  virtual ~EncoderTokenizer() = default;
  // Token ids of `text` (UTF-8) with the model's specials around them, at
  // most max_tokens in all; *cut (if given): whether the text had more.
  // Throws Error naming `what` if the text is not valid UTF-8.
  virtual std::vector<int32_t> encode(std::string_view text, int64_t max_tokens, const std::string& what = "text",
                                      bool* cut = nullptr) const = 0;
  // A pair's ids (truncation="longest_first") and each id's token type.
  virtual std::vector<int32_t> encode_pair(std::string_view a, std::string_view b, int64_t max_tokens,
                                           std::vector<int32_t>& types, const std::string& what = "pair",
                                           bool* cut = nullptr) const = 0;
  virtual int64_t vocab_size() const = 0;
};

// tokenizers' TruncationStrategy::LongestFirst: the lengths n1, n2 of two
// texts cut to fit `room` tokens together: the shorter is kept whole if the
// longer can take the rest, else each gets half (the first the smaller half).
inline void longest_first(size_t& n1, size_t& n2, size_t room) {
  if (n1 + n2 <= room) return;
  const bool swap = n1 > n2;  // n1: the shorter
  if (swap) std::swap(n1, n2);
  n2 = n1 > room ? n1 : std::max(n1, room - n1);
  if (n1 + n2 > room) {
    n1 = room / 2;
    n2 = n1 + room % 2;
  }
  if (swap) std::swap(n1, n2);
}

}  // namespace ffn::text
