// Byte-level BPE (GPT-2's scheme, used by LLaMA-family models such as
// SmolLM2), as Hugging Face `tokenizers` runs it:
//   1. special tokens written in the text ("<|im_start|>") are cut out and
//      become their own ids (longest match first);
//   2. the rest is normalized (NFC, where the tokenizer says so) and split by
//      the pre-tokenizer: GPT-2's regular expression
//      (ByteLevel), optionally after single digits (Digits) or another
//      Split pattern, run by PCRE2 with Unicode properties;
//   3. each piece's UTF-8 bytes become GPT-2's printable byte characters and
//      are merged pairwise, lowest merge rank first, into vocabulary tokens.
// Read from a GGUF file's tokenizer.ggml.* metadata (model "gpt2") or from a
// tokenizer.json (model BPE; pre-tokenizers ByteLevel, Digits, Split and
// Sequence of them; decoder ByteLevel). A GGUF's pre-tokenizer is the one
// tokenizer.ggml.pre names, as the model's own tokenizer.json writes it:
// "llama-bpe" (Llama 3), "qwen2", "qwen35", "smollm", "gpt-2" and the other
// names of src/text/bpe.cpp's table; no key or "default" is GPT-2's
// expression. A name not in the table is refused, never guessed. (This is
// not what transformers' GGUF loader does: it builds GPT-2's expression for
// Llama 3 files, so its ids differ from Llama 3's own on digits and
// whitespace.)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ffn {

class GgufFile;

// What a language model's tokenizer does, whatever its scheme: byte-level
// BPE (BpeTokenizer) or SentencePiece (SpmTokenizer).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // A GGUF's tokenizer, as tokenizer.ggml.model names it: "gpt2" (byte-level
  // BPE) or "llama" (SentencePiece); Error naming the file and the model
  // otherwise.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);

  virtual int64_t vocab_size() const = 0;
  // The ids of text (UTF-8; Error if it is not), no BOS or EOS added.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // The text of ids (bytes joined; an incomplete UTF-8 sequence is kept as
  // bytes). skip_special: special tokens give nothing.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;
  virtual const std::string& token(int32_t id) const = 0;
  virtual int32_t id_of(const std::string& token) const = 0;  // -1 if absent
  virtual bool is_special(int32_t id) const = 0;
  // Whether its model's prompts start with BOS: a GGUF's
  // tokenizer.ggml.add_bos_token; without it, as llama.cpp reads such files,
  // yes for SentencePiece and for byte-level BPE of Llama 3's pre-tokenizer,
  // no for the others; from a tokenizer.json, whether its post-processor puts
  // a special token first (template_bos()).
  virtual bool adds_bos() const = 0;
};

class BpeTokenizer final : public Tokenizer {
 public:
  static BpeTokenizer from_gguf(const GgufFile& f);
  static BpeTokenizer from_json(const std::string& path);

  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
  const std::string& token(int32_t id) const override { return tokens_.at(size_t(id)); }
  int32_t id_of(const std::string& token) const override;
  bool is_special(int32_t id) const override;
  bool adds_bos() const override { return add_bos_; }
  // The special token tokenizer.json's post-processor puts before the text
  // (TemplateProcessing's "single", alone or in a Sequence; Llama 3's
  // <|begin_of_text|>), or -1.
  int32_t template_bos() const { return template_bos_; }
  // The pre-tokenizer: a GGUF's tokenizer.ggml.pre ("default" without one),
  // or "tokenizer.json".
  const std::string& pre_tokenizer() const { return pre_; }

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

 private:
  BpeTokenizer();
  struct Step {  // one pre-tokenizer stage
    enum class Kind { regex, digits } kind = Kind::regex;
    std::string pattern;          // regex: the expression (matches and the text between become pieces)
    bool individual = true;       // digits: one piece per digit
    std::shared_ptr<void> code;   // the compiled pcre2_code
  };
  void init(const std::string& where);
  void split(const std::string& text, std::vector<std::string>& pieces) const;
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;
  void merge(std::vector<std::string>& sym, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" → merge rank
  std::vector<bool> special_;
  std::vector<bool> added_;  // special or added: decoded as its text
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  std::vector<Step> steps_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  bool nfc_ = false;  // NFC before the pre-tokenizer (Qwen's normalizer)
  int32_t unk_ = -1;  // the unknown token, for bytes without a token (-1: they are left out)
  std::string where_;  // the file, for messages
  std::string pre_ = "tokenizer.json";
  int32_t template_bos_ = -1;
  bool add_bos_ = false;
};

// SentencePiece vocabularies as a GGUF holds them (tokenizer.ggml.model
// "llama": pieces, scores and types; Llama 2, Mistral, Gemma, Phi-3), run by
// libsentencepiece as a BPE model with byte fallback, as transformers' and
// llama.cpp's tokenizers run them:
//   1. control and user-defined tokens written in the text are cut out and
//      become their own ids (longest match first);
//   2. each piece of text between them gets "▁" in front
//      (tokenizer.ggml.add_space_prefix, default true) and spaces become "▁";
//      pieces merge, highest score first; a character without a piece
//      becomes its UTF-8 bytes' <0xXX> tokens.
// Error if ffn was built without libsentencepiece.
class SpmTokenizer final : public Tokenizer {
 public:
  static SpmTokenizer from_gguf(const GgufFile& f);
  // A SentencePiece model file (a Hugging Face directory's tokenizer.model:
  // Llama 2, Mistral, Gemma, Phi-3), its control pieces cut out of the text;
  // the space prefix as the model's normalizer adds it.
  static SpmTokenizer from_file(const std::string& path);
  // A GGUF's vocabulary as a SentencePiece model file's bytes (what a
  // tokenizer.model with its pieces, scores and types holds).
  static std::string model_proto(const GgufFile& f);

  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  std::vector<int32_t> encode(const std::string& text) const override;
  // Pieces joined, "▁" as a space, <0xXX> as its byte; with a space prefix,
  // the text's first space is dropped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const override;
  const std::string& token(int32_t id) const override { return tokens_.at(size_t(id)); }
  int32_t id_of(const std::string& token) const override;
  bool is_special(int32_t id) const override;
  bool adds_bos() const override { return add_bos_; }

  SpmTokenizer(SpmTokenizer&&) noexcept;
  SpmTokenizer& operator=(SpmTokenizer&&) noexcept;
  ~SpmTokenizer() override;

 private:
  SpmTokenizer();
  std::string read(const GgufFile& f);  // this tokenizer's fields from f, and its ModelProto
  struct Impl;
  std::unique_ptr<Impl> impl_;  // the SentencePiece processor
  std::vector<std::string> tokens_;
  std::vector<int32_t> types_;  // GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // cut out of the text, longest first
  bool space_prefix_ = true;
  bool add_bos_ = true;
  std::string where_;
};

}  // namespace ffn
