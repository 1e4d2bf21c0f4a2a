// The MarianMT tokenizer (src/text/marian_tokenizer.cpp): the text room's
// public header; ffn/translation.hpp includes it for its users.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ffn {

// transformers' MarianTokenizer: SentencePiece (source.spm, target.spm) and
// the vocabulary mapping of vocab.json (target_vocab.json when
// tokenizer_config.json says separate_vocabs); a leading language code
// (>>fr<<) and the special tokens </s>, <unk>, <pad> written in the text are
// tokens of their own; a piece the vocabulary lacks is <unk>; EOS is appended.
// Decoding skips the special tokens and joins the target pieces with the
// target model (clean_up_tokenization_spaces as tokenizer_config.json says,
// default off as in transformers 4.46).
class MarianTokenizer {
 public:
  // Throws Error naming the file when one is missing or malformed, or when
  // the library was built without SentencePiece.
  static MarianTokenizer load(const std::string& dir);
  // Trains SentencePiece unigram models on the lines of each side (about
  // `*_pieces` pieces each; fewer when the text has fewer) and writes a
  // tokenizer load() and transformers' MarianTokenizer read: source.spm,
  // target.spm, one vocab.json for both sides (</s> 0, <unk> 1, the
  // pieces, <pad> last), tokenizer_config.json (en → fr) and
  // special_tokens_map.json, in dir (made if missing), each written atomically.
  // Silences SentencePiece's INFO log while it trains (a process-wide
  // setting: do not run two trainings at once on different threads).
  static void train(const std::string& dir, const std::vector<std::string>& source,
                    const std::vector<std::string>& target, int64_t source_pieces, int64_t target_pieces);
  MarianTokenizer(MarianTokenizer&&) noexcept;
  MarianTokenizer& operator=(MarianTokenizer&&) noexcept;
  ~MarianTokenizer();
  std::vector<int64_t> encode(const std::string& text) const;
  // The target side's ids of a text (transformers' tokenizer(text_target=...):
  // target.spm and the target vocabulary), EOS appended: training labels.
  std::vector<int64_t> encode_target(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  // The vocabulary's piece of a source id, or of a target id when `target`
  // ("" when it has none), e.g. for labels.
  std::string piece(int64_t id, bool target = false) const;
  int64_t eos_id() const;
  int64_t pad_id() const;
  int64_t unk_id() const;
  int64_t source_vocab_size() const;
  int64_t target_vocab_size() const;

  struct Impl;

 private:
  MarianTokenizer();
  std::unique_ptr<Impl> p_;
  std::vector<int64_t> encode_side(const std::string& text, bool target) const;
};

}  // namespace ffn
