// BERT's tokenizer (uncased): the basic tokenizer, then WordPiece, as
// Hugging Face's BertTokenizerFast (tokenizers' BertNormalizer,
// BertPreTokenizer and WordPiece model) does it:
//   1. clean: drop U+0000, U+FFFD and control characters (category C*,
//      except \t \n \r); map white space (\t \n \r and Unicode White_Space)
//      to ' ';
//   2. put spaces around CJK ideographs (the CJK Unified Ideographs blocks
//      and their extensions, and the compatibility ideographs);
//   3. strip accents: canonical decomposition (NFD), then drop non-spacing
//      marks (Mn);
//   4. lower-case (simple case mapping);
//   5. split on white space, and make every punctuation character (ASCII
//      punctuation, and categories Pc Pd Pe Pf Pi Po Ps) a word of its own;
//   6. WordPiece each word: greedy longest match from the vocabulary, pieces
//      after the first prefixed "##"; a word with no full match, or longer
//      than 100 characters, is [UNK];
//   7. [CLS] pieces [SEP], truncated to max_tokens in all.
// Before all that, the special tokens ([CLS], [SEP], [PAD], [MASK], [UNK]:
// those of special_tokens_map.json) written in the text itself are cut out
// where they appear verbatim (leftmost, longest first) and stand for their
// own ids, as tokenizers' added tokens do.
// Character classes and the decomposition come from utf8proc (Debian's
// libutf8proc), not from tables of our own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/encoder_tokenizer.hpp"

namespace ffn::text {

// The tokens that play BERT's [CLS], [SEP], [UNK], [PAD] and [MASK] roles:
// MPNet's tokenizer (tokenizer_config.json's cls_token, ...) has <s>, </s>,
// [UNK], <pad> and <mask>, and writes <s> a </s> as BERT writes [CLS] a [SEP].
struct WordPieceRoles {
  std::string cls = "[CLS]", sep = "[SEP]", unk = "[UNK]", pad = "[PAD]", mask = "[MASK]";
};

class WordPiece final : public EncoderTokenizer {
 public:
  // vocab.txt: one token per line, its id the line number. Throws Error
  // naming the file if it cannot be read or lacks the unk, cls or sep token
  // (pad: id 0 when absent; mask: optional). The special tokens matched in
  // the text are the roles' tokens.
  static WordPiece load(const std::string& vocab_path, const WordPieceRoles& roles = {});
  // The special tokens matched verbatim in the text (default: [CLS], [SEP],
  // [PAD], [MASK], [UNK]); each must be in the vocabulary.
  void set_special_tokens(const std::vector<std::string>& tokens, const std::string& what);

  // Token ids of `text` (UTF-8) with [CLS] and [SEP], at most max_tokens
  // (≥ 2) in all; *cut (if given) says whether the text had more and was
  // cut. Throws Error if text is not valid UTF-8 (naming `what` and the
  // byte offset).
  std::vector<int32_t> encode(std::string_view text, int64_t max_tokens, const std::string& what = "text",
                              bool* cut = nullptr) const override;
  // A text pair's ids as BertTokenizerFast gives them with
  // truncation="longest_first": [CLS] a [SEP] b [SEP], at most max_tokens
  // (≥ 3) in all, the longer text cut first (tokenizers' rule: the shorter
  // is kept whole if the longer can take the rest, else each gets half);
  // types: each id's token type, 0 through the first [SEP], 1 after. *cut:
  // whether either text was cut.
  std::vector<int32_t> encode_pair(std::string_view a, std::string_view b, int64_t max_tokens,
                                   std::vector<int32_t>& types, const std::string& what = "pair",
                                   bool* cut = nullptr) const override;
  // The word pieces of `text` (no [CLS]/[SEP], no truncation).
  std::vector<std::string> pieces(std::string_view text, const std::string& what = "text") const;

  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  const std::string& token(int32_t id) const { return tokens_.at(size_t(id)); }
  int32_t unk() const { return unk_; }
  int32_t cls() const { return cls_; }
  int32_t sep() const { return sep_; }
  int32_t pad() const { return pad_; }

 private:
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
  int32_t unk_ = -1, cls_ = -1, sep_ = -1, pad_ = 0;
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  // The text cut at its special tokens: (segment, -1) or ("", special id).
  std::vector<std::pair<std::string_view, int32_t>> segments(std::string_view text) const;
  // Steps 1–6 on the text, specials included, appending ids.
  void append_ids(std::string_view text, const std::string& what, std::vector<int32_t>& out, size_t limit) const;
  // Steps 1–5: the words of `text`, as code points.
  std::vector<std::u32string> words(std::string_view text, const std::string& what) const;
  // Step 6 for one word, appending ids.
  void wordpiece(const std::u32string& word, std::vector<int32_t>& out) const;
};

}  // namespace ffn::text
