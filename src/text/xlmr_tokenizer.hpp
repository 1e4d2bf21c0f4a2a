// XLM-RoBERTa's tokenizer (transformers' XLMRobertaTokenizer): the model's
// SentencePiece Unigram model (sentencepiece.bpe.model, read with Debian's
// libsentencepiece, its own normalizer included) with fairseq's ids: <s> 0,
// <pad> 1, </s> 2, <unk> 3, SentencePiece's piece i at i + 1 (its unknown
// piece 0 at <unk>), <mask> last. Special tokens written in the text are cut
// out first and stand for their ids (<mask> takes the white space before
// it, as its lstrip says); SentencePiece encodes each piece of text between
// them. A text is <s> ids </s>, its white space at both ends stripped first
// as sentence-transformers strips it (Python's str.strip); a pair is
// <s> a </s></s> b </s> as CrossEncoder passes it (unstripped), token types 0.
#pragma once

#include <memory>
#include <string>

#include "text/encoder_tokenizer.hpp"

namespace ffn::text {

class XlmrTokenizer final : public EncoderTokenizer {
 public:
  // Throws Error naming the file if it is not a SentencePiece model, or if
  // ffn was built without libsentencepiece.
  static XlmrTokenizer load(const std::string& spm_path);
  std::vector<int32_t> encode(std::string_view text, int64_t max_tokens, const std::string& what = "text",
                              bool* cut = nullptr) const override;
  std::vector<int32_t> encode_pair(std::string_view a, std::string_view b, int64_t max_tokens,
                                   std::vector<int32_t>& types, const std::string& what = "pair",
                                   bool* cut = nullptr) const override;
  int64_t vocab_size() const override;  // SentencePiece's pieces + 2

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  void append_ids(std::string_view text, const std::string& what, std::vector<int32_t>& out) const;
};

}  // namespace ffn::text
