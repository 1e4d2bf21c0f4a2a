#include "text/wordpiece.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "ffn/io.hpp"
#include "ffn/types.hpp"

namespace ffn::text {
namespace {

constexpr size_t kMaxCharsPerWord = 100;  // tokenizers' WordPiece max_input_chars_per_word

// tokenizers' is_other (the unicode_categories crate): Cc, Cf and Co. An
// unassigned code point (Cn) is kept (and becomes [UNK]), as Hugging Face does.
bool is_other(int32_t c) {
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CO:
      return true;
    default:
      return false;
  }
}

bool is_control(int32_t c) { return c != '\t' && c != '\n' && c != '\r' && is_other(c); }

// Unicode's White_Space property (Rust's char::is_whitespace): Zs, Zl, Zp,
// U+0009–U+000D and U+0085.
bool is_whitespace(int32_t c) {
  if ((c >= 0x09 && c <= 0x0d) || c == 0x85) return true;
  const auto cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_punctuation(int32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// tokenizers' ranges (the slow Python BertTokenizer starts one block at 0x2B820, not 0x2B920).
bool is_cjk(int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// f(c) for each code point of `text`; Error naming `what` and the byte offset
// at the first byte that does not begin a valid UTF-8 sequence.
template <typename F>
void for_each_code_point(std::string_view text, const std::string& what, F f) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = utf8proc_ssize_t(text.size());
  size_t offset = 0;
  while (left > 0) {
    utf8proc_int32_t c;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n < 0) throw Error(what + ": not valid UTF-8 at byte " + std::to_string(offset));
    p += n;
    left -= n;
    offset += size_t(n);
    f(c);
  }
}

void append_utf8(std::string& s, int32_t c) {
  uint8_t buf[4];
  const auto n = utf8proc_encode_char(c, buf);
  s.append(reinterpret_cast<const char*>(buf), size_t(n));
}

}  // namespace

WordPiece WordPiece::load(const std::string& vocab_path, const WordPieceRoles& roles) {
  std::ifstream f(vocab_path, std::ios::binary);
  if (!f) throw Error(vocab_path + ": cannot open the vocabulary");
  WordPiece w;
  std::string line;
  while (std::getline(f, line)) {
    // As tokenizers' WordPiece::read_file: trailing white space trimmed, the
    // last of duplicate lines wins.
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    w.ids_[line] = int32_t(w.tokens_.size());
    w.tokens_.push_back(line);
  }
  auto id = [&](const std::string& t) {
    auto it = w.ids_.find(t);
    if (it == w.ids_.end()) throw Error(vocab_path + ": the vocabulary has no " + t + " token");
    return it->second;
  };
  w.unk_ = id(roles.unk);
  w.cls_ = id(roles.cls);
  w.sep_ = id(roles.sep);
  w.pad_ = w.ids_.count(roles.pad) ? w.ids_.at(roles.pad) : 0;
  std::vector<std::string> specials;
  for (const std::string& t : {roles.cls, roles.sep, roles.pad, roles.mask, roles.unk})
    if (w.ids_.count(t) && std::find(specials.begin(), specials.end(), t) == specials.end()) specials.push_back(t);
  w.set_special_tokens(specials, vocab_path);
  return w;
}

void WordPiece::set_special_tokens(const std::vector<std::string>& tokens, const std::string& what) {
  specials_.clear();
  for (const auto& t : tokens) {
    auto it = ids_.find(t);
    if (t.empty() || it == ids_.end()) throw Error(what + ": special token '" + t + "' is not in the vocabulary");
    specials_.push_back({t, it->second});
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::vector<std::pair<std::string_view, int32_t>> WordPiece::segments(std::string_view text) const {
  std::vector<std::pair<std::string_view, int32_t>> out;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t hit = -1;
    size_t len = 0;
    for (const auto& [tok, id] : specials_)
      if (text.compare(i, tok.size(), tok) == 0) {
        hit = id;
        len = tok.size();
        break;  // longest first
      }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({text.substr(start, i - start), -1});
    out.push_back({std::string_view(), hit});
    i += len;
    start = i;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
  return out;
}

void WordPiece::append_ids(std::string_view text, const std::string& what, std::vector<int32_t>& out,
                           size_t limit) const {
  for_each_code_point(text, what, [](int32_t) {});  // the whole text is checked, also past the truncation
  for (const auto& [seg, special] : segments(text)) {
    if (out.size() >= limit) return;
    if (special >= 0) {
      out.push_back(special);
      continue;
    }
    // In pieces of about 4 KiB cut at ASCII white space (which no word or
    // decomposition crosses), so a huge text costs memory in proportion to
    // what truncation keeps, not to its length.
    for (size_t p0 = 0; p0 < seg.size();) {
      size_t p1 = seg.size();
      if (seg.size() - p0 > 4096) {
        const size_t cut = seg.find_first_of(" \n", p0 + 4096);
        if (cut != std::string_view::npos) p1 = cut + 1;
      }
      for (const auto& w : words(seg.substr(p0, p1 - p0), what)) {
        wordpiece(w, out);
        if (out.size() >= limit) return;
      }
      p0 = p1;
    }
  }
}

std::vector<std::u32string> WordPiece::words(std::string_view text, const std::string& what) const {
  // 1–2: decode, clean, white space to ' ', spaces around CJK.
  std::string cleaned;
  cleaned.reserve(text.size() + 16);
  for_each_code_point(text, what, [&](int32_t c) {
    if (c == 0 || c == 0xFFFD || is_control(c)) return;
    if (is_whitespace(c)) {
      cleaned += ' ';
    } else if (is_cjk(c)) {
      cleaned += ' ';
      append_utf8(cleaned, c);
      cleaned += ' ';
    } else {
      append_utf8(cleaned, c);
    }
  });
  // 3: NFD (with canonical ordering), without non-spacing marks; 4: lower case.
  std::vector<utf8proc_int32_t> cps(cleaned.size() * 4 + 4);  // a code point decomposes into at most 4 here; grown below
  utf8proc_ssize_t m;
  for (;;) {
    m = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(cleaned.data()), utf8proc_ssize_t(cleaned.size()),
                           cps.data(), utf8proc_ssize_t(cps.size()), UTF8PROC_DECOMPOSE);
    if (m < 0) throw Error(what + ": " + utf8proc_errmsg(m));
    if (size_t(m) <= cps.size()) break;
    cps.resize(size_t(m));
  }
  // 5: words split at white space, punctuation on its own.
  std::vector<std::u32string> out;
  std::u32string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  for (utf8proc_ssize_t i = 0; i < m; ++i) {
    int32_t c = cps[size_t(i)];
    if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN) continue;
    c = utf8proc_tolower(c);
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      out.push_back(std::u32string(1, char32_t(c)));
    } else {
      cur += char32_t(c);
    }
  }
  flush();
  return out;
}

void WordPiece::wordpiece(const std::u32string& word, std::vector<int32_t>& out) const {
  if (word.size() > kMaxCharsPerWord) {
    out.push_back(unk_);
    return;
  }
  std::vector<std::string> prefix(word.size() + 1);  // UTF-8 of word[0, i)
  for (size_t i = 0; i < word.size(); ++i) {
    prefix[i + 1] = prefix[i];
    append_utf8(prefix[i + 1], int32_t(word[i]));
  }
  const size_t before = out.size();
  size_t start = 0;
  while (start < word.size()) {
    int32_t found = -1;
    size_t end = word.size();
    for (; end > start; --end) {
      std::string piece = (start > 0 ? "##" : "") + prefix[end].substr(prefix[start].size());
      auto it = ids_.find(piece);
      if (it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      out.resize(before);
      out.push_back(unk_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<int32_t> WordPiece::encode(std::string_view text, int64_t max_tokens, const std::string& what,
                                       bool* cut) const {
  if (max_tokens < 2) throw Error("max_tokens: expected at least 2 ([CLS] and [SEP]), got " + std::to_string(max_tokens));
  std::vector<int32_t> ids{cls_};
  // One piece past what fits: whether the text had more (then it is cut).
  append_ids(text, what, ids, size_t(max_tokens));
  if (cut) *cut = int64_t(ids.size()) > max_tokens - 1;
  if (int64_t(ids.size()) > max_tokens - 1) ids.resize(size_t(max_tokens - 1));
  ids.push_back(sep_);
  return ids;
}

std::vector<int32_t> WordPiece::encode_pair(std::string_view a, std::string_view b, int64_t max_tokens,
                                            std::vector<int32_t>& types, const std::string& what, bool* cut) const {
  if (max_tokens < 3)
    throw Error("max_tokens: expected at least 3 for a pair ([CLS] and two [SEP]), got " + std::to_string(max_tokens));
  std::vector<int32_t> ia, ib;
  append_ids(a, what + " (first text)", ia, SIZE_MAX);
  append_ids(b, what + " (second text)", ib, SIZE_MAX);
  // tokenizers' TruncationStrategy::LongestFirst over the room left by the specials.
  const size_t room = size_t(max_tokens - 3);
  size_t n1 = ia.size(), n2 = ib.size();
  if (cut) *cut = n1 + n2 > room;
  longest_first(n1, n2, room);
  ia.resize(n1);
  ib.resize(n2);
  std::vector<int32_t> ids{cls_};
  ids.insert(ids.end(), ia.begin(), ia.end());
  ids.push_back(sep_);
  types.assign(ids.size(), 0);
  ids.insert(ids.end(), ib.begin(), ib.end());
  ids.push_back(sep_);
  types.resize(ids.size(), 1);
  return ids;
}

std::vector<std::string> WordPiece::pieces(std::string_view text, const std::string& what) const {
  std::vector<int32_t> ids;
  append_ids(text, what, ids, SIZE_MAX);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tokens_[size_t(id)]);
  return out;
}

}  // namespace ffn::text
