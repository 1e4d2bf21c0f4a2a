// Byte-level BPE (include/ffn/tokenizer.hpp).
#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "ffn/gguf.hpp"
#include "ffn/tokenizer.hpp"
#include "ffn/types.hpp"
#include "text/specials.hpp"

namespace ffn::text {

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t i = 0, n = utf8proc_ssize_t(s.size());
  while (i < n) {
    utf8proc_int32_t cp;
    const auto len = utf8proc_iterate(p + i, n - i, &cp);
    if (len <= 0) return false;
    i += len;
  }
  return true;
}

}  // namespace ffn::text

namespace ffn {
namespace {

// GPT-2's pre-tokenizer expression (tokenizers' ByteLevel with use_regex).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The Split expressions of the models' own tokenizer.json files, as written
// there (PCRE2 runs them as tokenizers' Oniguruma does).
// Llama 3 (Meta-Llama-3-8B, Llama-3.1/3.2): digits in runs of up to three.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2, Qwen2.5 and Qwen3: Llama 3's with single digits.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: Qwen2's with combining marks (\p{M}) inside words.
constexpr const char* kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A GGUF's tokenizer.ggml.pre (the name llama.cpp's converter gives a
// tokenizer.json's pre-tokenizer) → that pre-tokenizer, as its tokenizer.json
// writes it. A name not here is refused: a wrong guess gives wrong ids
// without a word.
struct PreTokenizer {
  std::vector<const char*> names;
  enum class Kind { byte_level, digits_byte_level, split_byte_level } kind;
  const char* pattern;  // split_byte_level's expression
  bool ignore_merges;   // tokenizer.json's model.ignore_merges
  bool nfc;             // tokenizer.json's normalizer NFC
  bool add_bos;         // prompts start with BOS (llama.cpp's default without tokenizer.ggml.add_bos_token)
};
const std::vector<PreTokenizer>& pre_tokenizers() {
  using K = PreTokenizer::Kind;
  static const std::vector<PreTokenizer> t = {
      // ByteLevel(use_regex) alone. "default" (and no key): GPT-2's, as
      // before and as transformers' GGUF loader builds for every file.
      {{"default", "gpt-2", "gpt2", "phi-2", "mpt", "olmo"}, K::byte_level, nullptr, false, false, false},
      // Digits(individual_digits) then ByteLevel(use_regex).
      {{"smollm", "starcoder", "refact", "command-r"}, K::digits_byte_level, nullptr, false, false, false},
      // Split(expression, Isolated) then ByteLevel without its expression;
      // Qwen2's after an NFC normalizer (Qwen3.5's has none: its vectors
      // keep combining marks as they are).
      {{"llama-bpe", "llama3", "llama-v3"}, K::split_byte_level, kLlama3Pattern, true, false, true},
      {{"qwen2", "deepseek-r1-qwen"}, K::split_byte_level, kQwen2Pattern, false, true, false},
      {{"qwen35"}, K::split_byte_level, kQwen35Pattern, false, false, false},
  };
  return t;
}

// GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the
// others (controls, space, 0x7f-0xa0, 0xad) for U+0100 onwards in order.
struct ByteMap {
  std::string of_byte[256];                      // UTF-8 of each byte's character
  std::unordered_map<int32_t, uint8_t> to_byte;  // code point → byte
  ByteMap() {
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const int cp = printable ? b : next++;
      uint8_t buf[4];
      const auto n = utf8proc_encode_char(cp, buf);
      of_byte[b] = std::string(reinterpret_cast<char*>(buf), size_t(n));
      to_byte[cp] = uint8_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}


std::shared_ptr<void> compile(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(where + ": pre-tokenizer pattern " + pattern + " does not compile (" +
                reinterpret_cast<const char*>(msg) + " at " + std::to_string(at) + ")");
  }
  return std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
}

// Cuts text into the regex's matches and the text between them (tokenizers'
// Split with behavior Isolated).
void regex_split(const pcre2_code* code, const std::string& text, std::vector<std::string>& out) {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create_from_pattern(code, nullptr),
                                                                    pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, last = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, s, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(std::string("pre-tokenizer expression failed on the text: ") + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[0] > last) out.emplace_back(text.substr(last, ov[0] - last));
    if (ov[1] > ov[0]) {
      out.emplace_back(text.substr(ov[0], ov[1] - ov[0]));
      pos = last = ov[1];
    } else {  // an empty match: step over one character
      pos = ov[0] + 1;
      while (pos < text.size() && (uint8_t(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (last < text.size()) out.emplace_back(text.substr(last));
}

// Unicode's canonical composition (NFC) of valid UTF-8.
std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                                          &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> keep(out, std::free);
  if (n < 0) throw Error(std::string("text cannot be normalized (NFC): ") + utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), size_t(n));
}

// Digits: each numeric character (Unicode N*) its own piece, or runs of them.
void digit_split(const std::string& text, bool individual, std::vector<std::string>& out) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const utf8proc_ssize_t n = utf8proc_ssize_t(text.size());
  utf8proc_ssize_t i = 0, start = 0;
  int prev = -1;  // 1 digit run, 0 other
  while (i < n) {
    utf8proc_int32_t cp;
    const auto len = utf8proc_iterate(p + i, n - i, &cp);
    const auto cat = utf8proc_category(cp);
    const int digit = (cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO);
    if (i > start && (digit != prev || (digit && individual))) {
      out.emplace_back(text.substr(size_t(start), size_t(i - start)));
      start = i;
    }
    prev = digit;
    i += len;
  }
  if (n > start) out.emplace_back(text.substr(size_t(start)));
}

}  // namespace

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

void BpeTokenizer::init(const std::string& where) {
  where_ = where;
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], int32_t(i));
  special_.resize(tokens_.size(), false);
  added_.assign(tokens_.size(), false);
  for (const auto& s : specials_) added_[size_t(s.second)] = true;
  text::sort_specials(specials_);
  for (auto& s : steps_)
    if (s.kind == Step::Kind::regex) s.code = compile(s.pattern, where);
  // A byte without a token (SmolLM2's vocabulary lacks some control bytes)
  // becomes the unknown token if there is one, else is left out, as
  // tokenizers' BPE does.
  int have = 0;
  for (int b = 0; b < 256; ++b) have += ids_.count(byte_map().of_byte[b]) ? 1 : 0;
  if (have < 128) throw Error(where + ": only " + std::to_string(have) + " of the 256 byte tokens are in the vocabulary "
                              "(not a byte-level BPE vocabulary)");
}

BpeTokenizer BpeTokenizer::from_gguf(const GgufFile& f) {
  const std::string where = f.path();
  const std::string& model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    throw Error(where + ": tokenizer.ggml.model is \"" + model + "\"; a byte-level BPE vocabulary is \"gpt2\"");
  BpeTokenizer t;
  t.tokens_ = f.get_strings("tokenizer.ggml.tokens");
  const auto& merges = f.get_strings("tokenizer.ggml.merges");
  for (size_t r = 0; r < merges.size(); ++r) {
    if (merges[r].find(' ') == std::string::npos)
      throw Error(where + ": tokenizer.ggml.merges[" + std::to_string(r) + "] is not two tokens separated by a space");
    t.ranks_.emplace(merges[r], int32_t(std::min<size_t>(r, INT32_MAX)));
  }
  t.special_.assign(t.tokens_.size(), false);
  if (const GgufValue* types = f.find("tokenizer.ggml.token_type")) {
    if (types->type != GgufType::array || types->ints.size() != t.tokens_.size())
      throw Error(where + ": tokenizer.ggml.token_type must be an integer array with one entry per token (" +
                  std::to_string(t.tokens_.size()) + ")");
    for (size_t i = 0; i < t.tokens_.size(); ++i)
      // Control and user-defined tokens are matched in the text as they are
      // (not one that is not UTF-8: it could cut a character in two).
      if ((types->ints[i] == 3 || types->ints[i] == 4) && text::valid_utf8(t.tokens_[i])) {
        t.special_[i] = types->ints[i] == 3;
        t.specials_.emplace_back(t.tokens_[i], int32_t(i));
      }
  }
  if (f.find("tokenizer.ggml.unknown_token_id")) {
    const uint64_t u = f.get_uint("tokenizer.ggml.unknown_token_id");
    if (u >= t.tokens_.size()) throw Error(where + ": tokenizer.ggml.unknown_token_id is outside the vocabulary");
    t.unk_ = int32_t(u);
  }
  std::string pre = "default";
  if (const GgufValue* v = f.find("tokenizer.ggml.pre")) {
    if (v->type != GgufType::string) throw Error(where + ": tokenizer.ggml.pre must be a string");
    pre = f.get_string("tokenizer.ggml.pre");
  }
  const PreTokenizer* p = nullptr;
  std::string known;
  for (const auto& e : pre_tokenizers())
    for (const char* n : e.names) {
      if (pre == n) p = &e;
      known += (known.empty() ? "\"" : ", \"") + std::string(n) + "\"";
    }
  if (!p)
    throw Error(where + ": tokenizer.ggml.pre is \"" + pre + "\", a pre-tokenizer ffn does not know (known: " + known +
                "); its ids would be wrong, so it is refused");
  t.pre_ = pre;
  t.ignore_merges_ = p->ignore_merges;
  t.nfc_ = p->nfc;
  t.add_bos_ = p->add_bos;
  if (const GgufValue* v = f.find("tokenizer.ggml.add_bos_token")) {
    if (v->type != GgufType::boolean) throw Error(where + ": tokenizer.ggml.add_bos_token must be a boolean");
    t.add_bos_ = v->i != 0;
  }
  if (p->kind == PreTokenizer::Kind::digits_byte_level) t.steps_.push_back(Step{Step::Kind::digits, {}, true, {}});
  t.steps_.push_back(Step{Step::Kind::regex, p->kind == PreTokenizer::Kind::split_byte_level ? p->pattern : kGpt2Pattern,
                          true, {}});
  t.init(where);
  return t;
}

BpeTokenizer BpeTokenizer::from_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  BpeTokenizer t;
  try {
    const auto& m = j.at("model");
    if (m.value("type", std::string("BPE")) != "BPE")
      throw Error(path + ": model.type is " + m.at("type").dump() + "; only BPE is supported");
    t.ignore_merges_ = m.value("ignore_merges", false);
    const auto& vocab = m.at("vocab");
    if (!vocab.is_object()) throw Error(path + ": model.vocab must be an object of token → id");
    // Ids are dense in a real file: each must be below the number of entries
    // (vocabulary plus added tokens), checked before it indexes anything.
    const int64_t added = j.contains("added_tokens") ? int64_t(j.at("added_tokens").size()) : 0;
    const int64_t limit = int64_t(vocab.size()) + added;
    auto checked_id = [&](const nlohmann::json& v, const std::string& what) {
      if (!v.is_number_integer()) throw Error(path + ": " + what + " has id " + v.dump() + ", not an integer");
      const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : v.get<int64_t>();
      if (id < 0 || id >= limit)
        throw Error(path + ": " + what + " has id " + v.dump() + ", outside 0.." + std::to_string(limit - 1) +
                    " (the vocabulary and added tokens)");
      return id;
    };
    int64_t n = 0;
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
      n = std::max<int64_t>(n, checked_id(it.value(), "model.vocab token " + it.key()) + 1);
    if (j.contains("added_tokens"))
      for (const auto& a : j.at("added_tokens")) n = std::max<int64_t>(n, checked_id(a.at("id"), "an added token") + 1);
    t.tokens_.assign(size_t(n), std::string());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) t.tokens_[size_t(it.value().get<int64_t>())] = it.key();
    t.special_.assign(size_t(n), false);
    const auto& merges = m.at("merges");
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string key;
      if (merges[r].is_string()) key = merges[r].get<std::string>();
      else if (merges[r].is_array() && merges[r].size() == 2)
        key = merges[r][0].get<std::string>() + " " + merges[r][1].get<std::string>();
      else throw Error(path + ": model.merges[" + std::to_string(r) + "] is neither \"a b\" nor [a, b]");
      t.ranks_.emplace(key, int32_t(r));
    }
    if (j.contains("added_tokens"))
      for (const auto& a : j.at("added_tokens")) {
        const int32_t id = int32_t(a.at("id").get<int64_t>());  // in range: checked above
        t.tokens_[size_t(id)] = a.at("content").get<std::string>();
        t.special_[size_t(id)] = a.value("special", false);
        t.specials_.emplace_back(t.tokens_[size_t(id)], id);
      }
    if (m.contains("unk_token") && m.at("unk_token").is_string()) {
      const std::string u = m.at("unk_token").get<std::string>();
      for (size_t i = 0; i < t.tokens_.size(); ++i)
        if (t.tokens_[i] == u) t.unk_ = int32_t(i);
    }
    // The normalizer: none, or NFC (Qwen's), alone or in a Sequence.
    if (j.contains("normalizer") && !j.at("normalizer").is_null()) {
      const auto& nz = j.at("normalizer");
      std::vector<nlohmann::json> list;
      if (nz.value("type", std::string()) == "Sequence") for (const auto& n : nz.at("normalizers")) list.push_back(n);
      else list.push_back(nz);
      for (const auto& n : list) {
        if (n.value("type", std::string()) != "NFC")
          throw Error(path + ": normalizer " + n.value("type", std::string("?")) +
                      " is not supported (byte-level BPE tokenizers have none, or NFC)");
        t.nfc_ = true;
      }
    }
    // The pre-tokenizer: ByteLevel, Digits, Split, or a Sequence of them.
    std::vector<nlohmann::json> steps;
    const auto& pre = j.at("pre_tokenizer");
    if (pre.is_null()) throw Error(path + ": no pre_tokenizer (expected ByteLevel)");
    if (pre.at("type") == "Sequence") for (const auto& p : pre.at("pretokenizers")) steps.push_back(p);
    else steps.push_back(pre);
    bool byte_level = false;
    for (const auto& p : steps) {
      const std::string type = p.at("type").get<std::string>();
      Step s;
      if (type == "ByteLevel") {
        byte_level = true;
        t.add_prefix_space_ = p.value("add_prefix_space", false);
        if (!p.value("use_regex", true)) continue;
        s.pattern = kGpt2Pattern;
      } else if (type == "Digits") {
        s.kind = Step::Kind::digits;
        s.individual = p.value("individual_digits", false);
      } else if (type == "Split") {
        const auto& pat = p.at("pattern");
        if (pat.contains("Regex")) s.pattern = pat.at("Regex").get<std::string>();
        else {  // a literal string
          for (char c : pat.at("String").get<std::string>()) {
            if (std::strchr("\\^$.|?*+()[]{}", c)) s.pattern += '\\';
            s.pattern += c;
          }
        }
        if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false))
          throw Error(path + ": pre-tokenizer Split with behavior " + p.value("behavior", std::string("?")) +
                      (p.value("invert", false) ? " inverted" : "") + " is not supported (only Isolated)");
      } else {
        throw Error(path + ": pre-tokenizer " + type + " is not supported (ByteLevel, Digits, Split, Sequence)");
      }
      t.steps_.push_back(std::move(s));
    }
    if (!byte_level) throw Error(path + ": the pre-tokenizer has no ByteLevel step (not a byte-level BPE)");
    // The post-processor's first piece, if a special token (BOS).
    if (j.contains("post_processor") && j.at("post_processor").is_object()) {
      std::vector<nlohmann::json> procs;
      const auto& pp = j.at("post_processor");
      if (pp.value("type", std::string()) == "Sequence" && pp.contains("processors")) for (const auto& p : pp.at("processors")) procs.push_back(p);
      else procs.push_back(pp);
      for (const auto& p : procs) {
        if (p.value("type", std::string()) != "TemplateProcessing" || !p.contains("single") || !p.at("single").is_array() ||
            p.at("single").empty() || !p.at("single")[0].contains("SpecialToken"))
          continue;
        const std::string name = p.at("single")[0].at("SpecialToken").at("id").get<std::string>();
        const auto& ids = p.at("special_tokens").at(name).at("ids");
        if (ids.size() != 1) throw Error(path + ": post_processor special token " + name + " has " + std::to_string(ids.size()) + " ids; expected 1");
        t.template_bos_ = int32_t(checked_id(ids[0], "post_processor special token " + name));
        if (t.template_bos_ >= int32_t(t.tokens_.size()))
          throw Error(path + ": post_processor special token " + name + " has id " + std::to_string(t.template_bos_) +
                      ", outside the vocabulary (" + std::to_string(t.tokens_.size()) + ")");
        t.add_bos_ = true;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a tokenizers BPE file (" + std::string(e.what()) + ")");
  }
  t.init(path);
  return t;
}

int32_t BpeTokenizer::id_of(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

bool BpeTokenizer::is_special(int32_t id) const { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }

void BpeTokenizer::split(const std::string& text, std::vector<std::string>& pieces) const {
  std::vector<std::string> cur{add_prefix_space_ && (text.empty() || text[0] != ' ') ? " " + text : text}, next;
  for (const Step& s : steps_) {
    next.clear();
    for (const auto& p : cur) {
      if (s.kind == Step::Kind::digits) digit_split(p, s.individual, next);
      else regex_split(static_cast<const pcre2_code*>(s.code.get()), p, next);
    }
    cur.swap(next);
  }
  for (auto& p : cur) pieces.push_back(std::move(p));
}

void BpeTokenizer::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  const ByteMap& bm = byte_map();
  if (ignore_merges_) {  // a piece that is a token is that token
    std::string mapped;
    for (unsigned char c : piece) mapped += bm.of_byte[c];
    auto it = ids_.find(mapped);
    if (it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Runs of bytes with tokens are merged; a byte without one becomes the
  // unknown token between them (or nothing).
  std::vector<std::string> sym;
  for (unsigned char c : piece) {
    if (ids_.count(bm.of_byte[c])) {
      sym.push_back(bm.of_byte[c]);
      continue;
    }
    merge(sym, out);
    sym.clear();
    if (unk_ >= 0) out.push_back(unk_);
  }
  merge(sym, out);
}

void BpeTokenizer::merge(std::vector<std::string>& sym, std::vector<int32_t>& out) const {
  std::string key;
  while (sym.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      key.assign(sym[i]).append(" ").append(sym[i + 1]);
      auto it = ranks_.find(key);
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == INT32_MAX) break;
    // Merge every occurrence of this pair, left to right (as tokenizers does for one rank).
    const std::string a = sym[at], b = sym[at + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
        merged.push_back(a + b);
        ++i;
      } else {
        merged.push_back(sym[i]);
      }
    }
    sym.swap(merged);
  }
  for (const auto& s : sym) {
    auto it = ids_.find(s);
    if (it == ids_.end()) throw Error(where_ + ": merged token " + s + " is not in the vocabulary");
    out.push_back(it->second);
  }
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  if (!text::valid_utf8(text)) throw Error("text is not valid UTF-8");
  std::vector<int32_t> out;
  std::vector<std::string> pieces;
  auto plain = [&](size_t from, size_t to) {
    if (to <= from) return;
    pieces.clear();
    split(nfc_ ? nfc(text.substr(from, to - from)) : text.substr(from, to - from), pieces);
    for (const auto& p : pieces) bpe(p, out);
  };
  text::cut_specials(text, specials_, plain, out);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const ByteMap& bm = byte_map();
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= tokens_.size())
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(tokens_.size()) + ")");
    if (is_special(id)) {
      if (!skip_special) out += tokens_[size_t(id)];
      continue;
    }
    const std::string& t = tokens_[size_t(id)];
    if (added_[size_t(id)]) {  // an added (non-special) token: its text as it is
      out += t;
      continue;
    }
    const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(t.data());
    utf8proc_ssize_t k = 0, n = utf8proc_ssize_t(t.size());
    while (k < n) {
      utf8proc_int32_t cp;
      const auto len = utf8proc_iterate(p + k, n - k, &cp);
      if (len <= 0) break;
      auto it = bm.to_byte.find(cp);
      if (it != bm.to_byte.end()) out += char(it->second);
      else out.append(t, size_t(k), size_t(len));
      k += len;
    }
  }
  return out;
}

}  // namespace ffn
