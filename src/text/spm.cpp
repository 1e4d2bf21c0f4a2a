// SentencePiece vocabularies from a GGUF (include/ffn/tokenizer.hpp) on
// Debian's libsentencepiece: the GGUF's pieces, scores and types become a
// SentencePiece ModelProto (BPE, byte fallback, the identity normalizer),
// written here in protobuf's wire format (libsentencepiece-dev ships no
// .proto header) and loaded with LoadFromSerializedProto.
#include <cctype>
#include <cstring>
#include <string>

#include "ffn/gguf.hpp"
#include "ffn/tokenizer.hpp"
#include "ffn/types.hpp"
#include "text/specials.hpp"

#ifdef FFN_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace ffn {

#ifdef FFN_HAVE_SENTENCEPIECE
struct SpmTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};
#else
struct SpmTokenizer::Impl {};
#endif

namespace {

// Protobuf's wire format, the few field kinds a ModelProto uses.
struct Proto {
  std::string bytes;
  void varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) bytes += char(uint8_t(v) | 0x80);
    bytes += char(uint8_t(v));
  }
  void key(int field, int wire) { varint(uint64_t(field) << 3 | uint64_t(wire)); }
  void integer(int field, int64_t v) {  // int32, enum and bool: varint (negative: ten bytes)
    key(field, 0);
    varint(uint64_t(v));
  }
  void string(int field, const std::string& s) {  // string, bytes and nested messages
    key(field, 2);
    varint(s.size());
    bytes += s;
  }
  void fixed32(int field, float f) {
    key(field, 5);
    char b[4];
    std::memcpy(b, &f, 4);  // little-endian, as x86 stores it
    bytes.append(b, 4);
  }
};

// SentencePiece's piece types, which GGUF's token types copy.
enum PieceType { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

}  // namespace

SpmTokenizer::SpmTokenizer() = default;
SpmTokenizer::~SpmTokenizer() = default;
SpmTokenizer::SpmTokenizer(SpmTokenizer&&) noexcept = default;
SpmTokenizer& SpmTokenizer::operator=(SpmTokenizer&&) noexcept = default;

std::string SpmTokenizer::model_proto(const GgufFile& f) {
  SpmTokenizer t;
  return t.read(f);
}

SpmTokenizer SpmTokenizer::from_gguf(const GgufFile& f) {
  SpmTokenizer t;
  const std::string proto = t.read(f);
#ifdef FFN_HAVE_SENTENCEPIECE
  t.impl_ = std::make_unique<Impl>();
  const auto status = t.impl_->sp.LoadFromSerializedProto(proto);
  if (!status.ok()) throw Error(f.path() + ": SentencePiece refuses the vocabulary (" + status.ToString() + ")");
#else
  throw Error(f.path() + ": a SentencePiece vocabulary (tokenizer.ggml.model \"llama\"); this ffn was built without "
              "libsentencepiece (install libsentencepiece-dev and rebuild)");
#endif
  return t;
}

std::string SpmTokenizer::read(const GgufFile& f) {
  const std::string where = f.path();
  SpmTokenizer& t = *this;
  t.where_ = where;
  t.tokens_ = f.get_strings("tokenizer.ggml.tokens");
  const size_t n = t.tokens_.size();
  const GgufValue* scores = f.find("tokenizer.ggml.scores");
  if (!scores || scores->type != GgufType::array || scores->floats.size() != n)
    throw Error(where + ": tokenizer.ggml.scores must be a float array with one score per token (" + std::to_string(n) +
                "); a SentencePiece vocabulary merges by them");
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  if (!types || types->type != GgufType::array || types->ints.size() != n)
    throw Error(where + ": tokenizer.ggml.token_type must be an integer array with one entry per token (" +
                std::to_string(n) + ")");
  auto id_key = [&](const char* k, int64_t fallback) {
    if (!f.find(k)) return fallback;
    const uint64_t v = f.get_uint(k);
    if (v >= n) throw Error(where + ": " + k + " is " + std::to_string(v) + ", outside the vocabulary (" + std::to_string(n) + ")");
    return int64_t(v);
  };
  int bytes = 0;  // <0xXX> pieces: byte fallback needs all 256
  for (size_t i = 0; i < n; ++i) bytes += types->ints[i] == byte;
  // The unknown piece: the key's, else the first piece typed unknown (llama.cpp's
  // converter writes no key for vocabularies whose config names none).
  int64_t unk = id_key("tokenizer.ggml.unknown_token_id", -1);
  for (size_t i = 0; unk < 0 && i < n; ++i)
    if (types->ints[i] == unknown) unk = int64_t(i);
  if (const GgufValue* v = f.find("tokenizer.ggml.add_bos_token")) {
    if (v->type != GgufType::boolean) throw Error(where + ": tokenizer.ggml.add_bos_token must be a boolean");
    t.add_bos_ = v->i != 0;
  }
  if (const GgufValue* v = f.find("tokenizer.ggml.add_space_prefix")) {
    if (v->type != GgufType::boolean) throw Error(where + ": tokenizer.ggml.add_space_prefix must be a boolean");
    t.space_prefix_ = v->i != 0;
  }
  t.types_.resize(n);
  Proto model;
  for (size_t i = 0; i < n; ++i) {
    const int64_t ty = types->ints[i];
    if (ty < normal || ty > byte)
      throw Error(where + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is " + std::to_string(ty) +
                  "; expected 1 to 6 (normal, unknown, control, user-defined, unused, byte)");
    if (t.tokens_[i].empty() || !text::valid_utf8(t.tokens_[i]))
      throw Error(where + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is empty or not UTF-8");
    t.types_[i] = int32_t(ty);
    // SentencePiece holds one unknown piece: the file's unknown id (Phi-3
    // marks its padding pieces unknown too: they become unused, never made
    // from text). Control and user-defined pieces are cut out of the text
    // before SentencePiece sees it.
    PieceType pt = PieceType(ty);
    if (int64_t(i) == unk) pt = unknown;
    else if (pt == unknown) pt = unused;
    if (ty == control || ty == user_defined) t.specials_.emplace_back(t.tokens_[i], int32_t(i));
    const std::string& tok = t.tokens_[i];
    if (ty == byte && !(tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && std::isxdigit(uint8_t(tok[3])) &&
                        std::isxdigit(uint8_t(tok[4])) && tok[5] == '>'))
      throw Error(where + ": tokenizer.ggml.tokens[" + std::to_string(i) + "] is a byte token but not <0xXX>");
    Proto piece;
    piece.string(1, t.tokens_[i]);
    piece.fixed32(2, float(scores->floats[i]));
    piece.integer(3, pt);
    model.string(1, piece.bytes);
    t.ids_.emplace(t.tokens_[i], int32_t(i));
  }
  if (unk < 0)
    throw Error(where + ": tokenizer.ggml.unknown_token_id is missing and no token is typed unknown (a SentencePiece "
                "vocabulary has one)");
  text::sort_specials(t.specials_);
  Proto trainer;
  trainer.integer(3, 2);  // model_type BPE
  trainer.integer(4, int64_t(n));
  trainer.integer(35, bytes == 256);  // byte_fallback (else a character without a piece is <unk>)
  trainer.integer(40, unk);
  trainer.integer(41, id_key("tokenizer.ggml.bos_token_id", -1));
  trainer.integer(42, id_key("tokenizer.ggml.eos_token_id", -1));
  // Padding is no part of tokenizing: an id out of range is left out, not refused.
  trainer.integer(43, f.find("tokenizer.ggml.padding_token_id") && f.get_uint("tokenizer.ggml.padding_token_id") < n
                          ? int64_t(f.get_uint("tokenizer.ggml.padding_token_id"))
                          : -1);
  trainer.string(45, t.tokens_[size_t(unk)]);
  model.string(2, trainer.bytes);
  Proto normalizer;
  normalizer.string(1, "identity");
  normalizer.integer(3, t.space_prefix_);  // add_dummy_prefix
  normalizer.integer(4, 0);                // remove_extra_whitespaces
  normalizer.integer(5, 1);                // escape_whitespaces
  model.string(3, normalizer.bytes);
  return model.bytes;
}

SpmTokenizer SpmTokenizer::from_file(const std::string& path) {
  SpmTokenizer t;
  t.where_ = path;
#ifdef FFN_HAVE_SENTENCEPIECE
  t.impl_ = std::make_unique<Impl>();
  sentencepiece::SentencePieceProcessor& sp = t.impl_->sp;
  const auto status = sp.Load(path);
  if (!status.ok()) throw Error(path + ": not a SentencePiece model (" + status.ToString() + ")");
  const int n = sp.GetPieceSize();
  for (int i = 0; i < n; ++i) {
    t.tokens_.push_back(sp.IdToPiece(i));
    const int32_t ty = sp.IsUnknown(i) ? unknown : sp.IsControl(i) ? control : sp.IsUnused(i) ? unused
                       : sp.IsByte(i)  ? byte
                                       : normal;
    t.types_.push_back(ty);
    t.ids_.emplace(t.tokens_.back(), i);
    if (ty == control && !t.tokens_.back().empty() && text::valid_utf8(t.tokens_.back()))
      t.specials_.emplace_back(t.tokens_.back(), i);
  }
  text::sort_specials(t.specials_);
  // The normalizer's dummy prefix: whether "a" is encoded with "▁" before it.
  std::vector<std::string> pieces;
  (void)sp.Encode("a", &pieces);
  t.space_prefix_ = !pieces.empty() && pieces[0].compare(0, 3, "\xE2\x96\x81") == 0;
#else
  throw Error(path + ": a SentencePiece model; this ffn was built without libsentencepiece (install "
              "libsentencepiece-dev and rebuild)");
#endif
  return t;
}

int32_t SpmTokenizer::id_of(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

bool SpmTokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < types_.size() && types_[size_t(id)] == control;
}

std::vector<int32_t> SpmTokenizer::encode(const std::string& s) const {
  if (!text::valid_utf8(s)) throw Error("text is not valid UTF-8");
  std::vector<int32_t> out;
#ifdef FFN_HAVE_SENTENCEPIECE
  std::vector<int> ids;
  text::cut_specials(
      s, specials_,
      [&](size_t from, size_t to) {
        const auto status = impl_->sp.Encode(std::string_view(s).substr(from, to - from), &ids);
        if (!status.ok()) throw Error(where_ + ": SentencePiece cannot encode the text (" + status.ToString() + ")");
        out.insert(out.end(), ids.begin(), ids.end());
      },
      out);
#endif
  return out;
}

std::string SpmTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= tokens_.size())
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(tokens_.size()) + ")");
    const std::string& p = tokens_[size_t(id)];
    const int32_t ty = types_[size_t(id)];
    if (ty == control || ty == unknown || ty == unused) {
      if (!skip_special || ty == unknown) out += p;
      continue;
    }
    if (ty == byte) {
      out += char(std::stoi(p.substr(3, 2), nullptr, 16));
      continue;
    }
    for (size_t k = 0; k < p.size();) {  // "▁" (E2 96 81) is a space
      if (p.compare(k, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        k += 3;
      } else {
        out += p[k++];
      }
    }
  }
  if (space_prefix_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  const std::string& model = f.get_string("tokenizer.ggml.model");
  if (model == "gpt2") return std::make_unique<BpeTokenizer>(BpeTokenizer::from_gguf(f));
  if (model == "llama") return std::make_unique<SpmTokenizer>(SpmTokenizer::from_gguf(f));
  throw Error(f.path() + ": tokenizer.ggml.model is \"" + model +
              "\"; expected \"gpt2\" (byte-level BPE) or \"llama\" (SentencePiece)");
}

}  // namespace ffn
