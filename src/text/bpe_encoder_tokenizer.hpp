// A sentence encoder's byte-level BPE tokenizer from its tokenizer.json
// (ModernBERT's, PreTrainedTokenizerFast): the BPE itself is ffn's
// BpeTokenizer (include/ffn/tokenizer.hpp: the normalizer, the ByteLevel
// pre-tokenizer, the merges); this adds what an encoder needs of the file:
//   - the added tokens written in a text are cut out first and stand for
//     their ids, leftmost and longest first, taking the white space before
//     them (lstrip) and after them (rstrip) where the file says so;
//   - the post-processor's TemplateProcessing puts the special tokens around
//     a text ("single": [CLS] $A [SEP]) and a pair ("pair": [CLS] $A [SEP]
//     $B [SEP]) with their type ids; a text is cut to leave room for them,
//     a pair longest first (tokenizers' LongestFirst);
//   - a single text is stripped of white space at both ends first, as
//     sentence-transformers strips it (Python's str.strip); a pair is not, as
//     CrossEncoder passes it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/encoder_tokenizer.hpp"

namespace ffn {
class BpeTokenizer;
}

namespace ffn::text {

class BpeEncoderTokenizer final : public EncoderTokenizer {
 public:
  // Throws Error naming the file and what it cannot take: not a byte-level
  // BPE, no TemplateProcessing post-processor, a template without $A (or,
  // for pairs, $B), an added token with single_word.
  static BpeEncoderTokenizer load(const std::string& tokenizer_json);
  std::vector<int32_t> encode(std::string_view text, int64_t max_tokens, const std::string& what = "text",
                              bool* cut = nullptr) const override;
  std::vector<int32_t> encode_pair(std::string_view a, std::string_view b, int64_t max_tokens,
                                   std::vector<int32_t>& types, const std::string& what = "pair",
                                   bool* cut = nullptr) const override;
  int64_t vocab_size() const override;

  // One template entry: a special token's id, or sequence 0 ($A) / 1 ($B) (special -1); its type id.
  struct Piece {
    int32_t special = -1;
    int seq = 0;
    int32_t type = 0;
  };
  struct Added {
    std::string text;
    int32_t id = 0;
    bool lstrip = false, rstrip = false;
  };

 private:
  std::shared_ptr<const BpeTokenizer> bpe_;
  std::vector<Added> added_;  // longest first
  std::vector<Piece> single_, pair_;
  void append_ids(std::string_view text, const std::string& what, std::vector<int32_t>& out) const;
};

}  // namespace ffn::text
