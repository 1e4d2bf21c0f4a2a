// A sentence encoder's byte-level BPE tokenizer (src/text/bpe_encoder_tokenizer.hpp).
#include "text/bpe_encoder_tokenizer.hpp"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ffn/tokenizer.hpp"
#include "ffn/types.hpp"
#include "text/py_strip.hpp"

namespace ffn::text {

namespace {

using Piece = BpeEncoderTokenizer::Piece;

// A TemplateProcessing's "single" or "pair" list → pieces; the special
// tokens' ids from its special_tokens map.
std::vector<Piece> read_template(const nlohmann::json& tp, const char* which, const std::string& path) {
  std::vector<Piece> out;
  const auto& list = tp.at(which);
  if (!list.is_array()) throw Error(path + ": post_processor." + which + " must be a list");
  int seen_a = 0, seen_b = 0;
  for (const auto& item : list) {
    Piece p;
    if (item.contains("SpecialToken")) {
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      const auto& ids = tp.at("special_tokens").at(name).at("ids");
      if (ids.size() != 1)
        throw Error(path + ": post_processor special token " + name + " has " + std::to_string(ids.size()) +
                    " ids; expected 1");
      p.special = ids[0].get<int32_t>();
      p.type = item.at("SpecialToken").value("type_id", 0);
    } else if (item.contains("Sequence")) {
      const std::string id = item.at("Sequence").at("id").get<std::string>();
      if (id != "A" && id != "B") throw Error(path + ": post_processor sequence " + id + " is neither A nor B");
      p.seq = id == "A" ? 0 : 1;
      (p.seq == 0 ? seen_a : seen_b)++;
      p.type = item.at("Sequence").value("type_id", 0);
    } else {
      throw Error(path + ": post_processor." + which + " has an entry that is neither SpecialToken nor Sequence");
    }
    out.push_back(p);
  }
  const bool pair = std::string(which) == "pair";
  if (seen_a != 1 || seen_b != (pair ? 1 : 0))
    throw Error(path + ": post_processor." + which + " must hold $A once" + (pair ? " and $B once" : " and no $B"));
  return out;
}

// The ids of a template around a (and b), with each id's type.
std::vector<int32_t> assemble(const std::vector<Piece>& tpl, const std::vector<int32_t>& a,
                              const std::vector<int32_t>& b, std::vector<int32_t>* types) {
  std::vector<int32_t> ids;
  if (types) types->clear();
  for (const Piece& p : tpl) {
    const size_t before = ids.size();
    if (p.special >= 0) ids.push_back(p.special);
    else ids.insert(ids.end(), (p.seq == 0 ? a : b).begin(), (p.seq == 0 ? a : b).end());
    if (types) types->insert(types->end(), ids.size() - before, p.type);
  }
  return ids;
}

int64_t specials_in(const std::vector<Piece>& tpl) {
  return std::count_if(tpl.begin(), tpl.end(), [](const Piece& p) { return p.special >= 0; });
}

}  // namespace

BpeEncoderTokenizer BpeEncoderTokenizer::load(const std::string& path) {
  BpeEncoderTokenizer t;
  t.bpe_ = std::make_shared<const BpeTokenizer>(BpeTokenizer::from_json(path));  // the file's own checks first
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  try {
    if (j.contains("added_tokens"))
      for (const auto& a : j.at("added_tokens")) {
        if (a.value("single_word", false))
          throw Error(path + ": added token " + a.at("content").dump() + " has single_word, which is not supported");
        t.added_.push_back({a.at("content").get<std::string>(), a.at("id").get<int32_t>(), a.value("lstrip", false),
                            a.value("rstrip", false)});
      }
    std::stable_sort(t.added_.begin(), t.added_.end(), [](const Added& x, const Added& y) {
      return x.text.size() > y.text.size();
    });
    // The post-processor: a TemplateProcessing, alone or in a Sequence (a ByteLevel one beside it changes offsets only).
    const nlohmann::json* tp = nullptr;
    if (j.contains("post_processor") && j.at("post_processor").is_object()) {
      const auto& pp = j.at("post_processor");
      if (pp.value("type", std::string()) == "TemplateProcessing") tp = &pp;
      else if (pp.value("type", std::string()) == "Sequence")
        for (const auto& p : pp.at("processors"))
          if (p.value("type", std::string()) == "TemplateProcessing") tp = &p;
    }
    if (!tp)
      throw Error(path + ": no TemplateProcessing post-processor (an encoder's tokenizer puts its special tokens "
                  "around a text with one, as ModernBERT's [CLS] $A [SEP])");
    t.single_ = read_template(*tp, "single", path);
    t.pair_ = read_template(*tp, "pair", path);
    for (const auto* tpl : {&t.single_, &t.pair_})
      for (const Piece& p : *tpl)
        if (p.special >= int32_t(t.bpe_->vocab_size()))
          throw Error(path + ": post_processor special token id " + std::to_string(p.special) +
                      " is outside the vocabulary (" + std::to_string(t.bpe_->vocab_size()) + ")");
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a tokenizers file (" + std::string(e.what()) + ")");
  }
  return t;
}

int64_t BpeEncoderTokenizer::vocab_size() const { return bpe_->vocab_size(); }

void BpeEncoderTokenizer::append_ids(std::string_view text, const std::string& what, std::vector<int32_t>& out) const {
  check_utf8(text, what);
  auto plain = [&](std::string_view seg) {
    if (seg.empty()) return;
    const std::vector<int32_t> ids = bpe_->encode(std::string(seg));
    out.insert(out.end(), ids.begin(), ids.end());
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const Added* hit = nullptr;
    for (const Added& a : added_)
      if (!a.text.empty() && text.compare(i, a.text.size(), a.text) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    std::string_view before = text.substr(start, i - start);
    if (hit->lstrip) before = rstrip(before);
    plain(before);
    out.push_back(hit->id);
    i += hit->text.size();
    if (hit->rstrip) i = text.size() - lstrip(text.substr(i)).size();
    start = i;
  }
  plain(text.substr(std::min(start, text.size())));
}

std::vector<int32_t> BpeEncoderTokenizer::encode(std::string_view text, int64_t max_tokens, const std::string& what,
                                                 bool* cut) const {
  const int64_t specials = specials_in(single_);
  if (max_tokens < specials + 1)
    throw Error("max_tokens: expected at least " + std::to_string(specials + 1) + " (the template's " +
                std::to_string(specials) + " special tokens and one of the text), got " + std::to_string(max_tokens));
  check_utf8(text, what);
  std::vector<int32_t> ids;
  append_ids(rstrip(lstrip(text)), what, ids);
  const bool over = int64_t(ids.size()) > max_tokens - specials;
  if (cut) *cut = over;
  if (over) ids.resize(size_t(max_tokens - specials));
  return assemble(single_, ids, {}, nullptr);
}

std::vector<int32_t> BpeEncoderTokenizer::encode_pair(std::string_view a, std::string_view b, int64_t max_tokens,
                                                      std::vector<int32_t>& types, const std::string& what,
                                                      bool* cut) const {
  const int64_t specials = specials_in(pair_);
  if (max_tokens < specials + 2)
    throw Error("max_tokens: expected at least " + std::to_string(specials + 2) + " for a pair (the template's " +
                std::to_string(specials) + " special tokens and one of each text), got " + std::to_string(max_tokens));
  std::vector<int32_t> ia, ib;
  append_ids(a, what + " (first text)", ia);
  append_ids(b, what + " (second text)", ib);
  size_t n1 = ia.size(), n2 = ib.size();
  const size_t room = size_t(max_tokens - specials);
  if (cut) *cut = n1 + n2 > room;
  longest_first(n1, n2, room);
  ia.resize(n1);
  ib.resize(n2);
  return assemble(pair_, ia, ib, &types);
}

}  // namespace ffn::text
