// XLM-RoBERTa's tokenizer (src/text/xlmr_tokenizer.hpp).
#include "text/xlmr_tokenizer.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <utility>

#include "ffn/types.hpp"
#include "text/py_strip.hpp"

#ifdef FFN_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace ffn::text {

namespace {

constexpr int32_t kBos = 0, kPad = 1, kEos = 2, kUnk = 3;

}  // namespace

#ifdef FFN_HAVE_SENTENCEPIECE
struct XlmrTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  int32_t mask = 0;
};

XlmrTokenizer XlmrTokenizer::load(const std::string& spm_path) {
  auto impl = std::make_shared<Impl>();
  const auto status = impl->sp.Load(spm_path);
  if (!status.ok()) throw Error(spm_path + ": not a SentencePiece model (" + status.ToString() + ")");
  impl->mask = int32_t(impl->sp.GetPieceSize()) + 1;
  XlmrTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

int64_t XlmrTokenizer::vocab_size() const { return int64_t(impl_->sp.GetPieceSize()) + 2; }

void XlmrTokenizer::append_ids(std::string_view text, const std::string& what, std::vector<int32_t>& out) const {
  check_utf8(text, what);
  // The added tokens (leftmost, longest first: "<mask>" before "<s>" never overlap, so leftmost is enough).
  static const std::array<std::pair<std::string_view, int32_t>, 5> specials{
      {{"<mask>", -1}, {"<pad>", kPad}, {"</s>", kEos}, {"<unk>", kUnk}, {"<s>", kBos}}};
  std::vector<int> ids;
  auto piece = [&](std::string_view seg) {
    if (seg.empty()) return;
    const auto status = impl_->sp.Encode(std::string(seg), &ids);
    if (!status.ok()) throw Error(what + ": SentencePiece could not encode it (" + status.ToString() + ")");
    for (int id : ids) out.push_back(id == 0 ? kUnk : int32_t(id) + 1);
  };
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t hit = -2;
    size_t len = 0;
    for (const auto& [tok, id] : specials)
      if (text.compare(i, tok.size(), tok) == 0) {
        hit = id < 0 ? impl_->mask : id;
        len = tok.size();
        break;
      }
    if (hit == -2) {
      ++i;
      continue;
    }
    std::string_view before = text.substr(start, i - start);
    if (hit == impl_->mask) before = rstrip(before);  // <mask>'s lstrip
    piece(before);
    out.push_back(hit);
    i += len;
    start = i;
  }
  piece(text.substr(start));
}
#else
struct XlmrTokenizer::Impl {};

XlmrTokenizer XlmrTokenizer::load(const std::string& spm_path) {
  throw Error(spm_path + ": XLM-R's tokenizer needs SentencePiece, and ffn was built without libsentencepiece "
              "(scripts/setup.sh installs libsentencepiece-dev)");
}
int64_t XlmrTokenizer::vocab_size() const { return 0; }
void XlmrTokenizer::append_ids(std::string_view, const std::string&, std::vector<int32_t>&) const {}
#endif

std::vector<int32_t> XlmrTokenizer::encode(std::string_view text, int64_t max_tokens, const std::string& what,
                                           bool* cut) const {
  if (max_tokens < 2) throw Error("max_tokens: expected at least 2 (<s> and </s>), got " + std::to_string(max_tokens));
  std::vector<int32_t> ids{kBos};
  check_utf8(text, what);
  append_ids(rstrip(lstrip(text)), what, ids);
  const bool over = int64_t(ids.size()) > max_tokens - 1;
  if (cut) *cut = over;
  if (over) ids.resize(size_t(max_tokens - 1));
  ids.push_back(kEos);
  return ids;
}

std::vector<int32_t> XlmrTokenizer::encode_pair(std::string_view a, std::string_view b, int64_t max_tokens,
                                                std::vector<int32_t>& types, const std::string& what, bool* cut) const {
  if (max_tokens < 4)
    throw Error("max_tokens: expected at least 4 for a pair (<s>, </s></s> and </s>), got " + std::to_string(max_tokens));
  std::vector<int32_t> ia, ib;
  append_ids(a, what + " (first text)", ia);
  append_ids(b, what + " (second text)", ib);
  size_t n1 = ia.size(), n2 = ib.size();
  const size_t room = size_t(max_tokens - 4);
  if (cut) *cut = n1 + n2 > room;
  longest_first(n1, n2, room);
  ia.resize(n1);
  ib.resize(n2);
  std::vector<int32_t> ids{kBos};
  ids.insert(ids.end(), ia.begin(), ia.end());
  ids.push_back(kEos);
  ids.push_back(kEos);
  ids.insert(ids.end(), ib.begin(), ib.end());
  ids.push_back(kEos);
  types.assign(ids.size(), 0);
  return ids;
}

}  // namespace ffn::text
