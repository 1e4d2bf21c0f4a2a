// MarianTokenizer (include/ffn/translation.hpp) on Debian's libsentencepiece:
// transformers' tokenization_marian.py and PreTrainedTokenizer's handling of
// special tokens written in the text, step for step.
#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "ffn/translation.hpp"
#include "core/json_file.hpp"

#ifdef FFN_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace ffn {

namespace fs = std::filesystem;

#ifdef FFN_HAVE_SENTENCEPIECE

struct MarianTokenizer::Impl {
  sentencepiece::SentencePieceProcessor source, target;
  std::unordered_map<std::string, int64_t> encoder;         // vocab.json
  std::unordered_map<int64_t, std::string> decoder;         // target ids -> pieces
  int64_t eos = 0, unk = 0, pad = 0, target_size = 0;
  bool cleanup = false;
  std::vector<std::string> specials{"</s>", "<unk>", "<pad>"};
};

namespace {

std::unordered_map<std::string, int64_t> read_vocab(const fs::path& p) {
  const nlohmann::json j = models::read_json(p);
  if (!j.is_object()) throw Error(p.string() + ": expected a JSON object of piece -> id");
  std::unordered_map<std::string, int64_t> v;
  for (const auto& [k, id] : j.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      throw Error(p.string() + ": the id of '" + k + "' is not a non-negative integer (" + id.dump() + ")");
    v[k] = id.get<int64_t>();
  }
  return v;
}

void load_spm(sentencepiece::SentencePieceProcessor& sp, const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) throw Error(p.string() + ": missing (a MarianMT tokenizer needs source.spm and target.spm)");
  const auto status = sp.Load(p.string());
  if (!status.ok()) throw Error(p.string() + ": not a SentencePiece model (" + status.ToString() + ")");
}

// transformers' clean_up_tokenization.
std::string clean_up(std::string s) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
           {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}}) {
    size_t at = 0;
    while ((at = s.find(from, at)) != std::string::npos) {
      s.replace(at, from.size(), to);
      at += to.size();
    }
  }
  return s;
}

}  // namespace

MarianTokenizer MarianTokenizer::load(const std::string& dir_in) {
  const fs::path dir(dir_in);
  MarianTokenizer t;
  t.p_ = std::make_unique<Impl>();
  Impl& p = *t.p_;
  load_spm(p.source, dir / "source.spm");
  load_spm(p.target, dir / "target.spm");
  std::error_code ec;
  nlohmann::json cfg = nlohmann::json::object();
  const fs::path cfg_path = dir / "tokenizer_config.json";
  if (fs::exists(cfg_path, ec)) cfg = models::read_json(cfg_path);
  const bool separate = models::json_opt<bool>(cfg, "separate_vocabs", false, cfg_path);
  p.cleanup = models::json_opt<bool>(cfg, "clean_up_tokenization_spaces", false, cfg_path);
  const fs::path vocab_path = dir / "vocab.json";
  if (!fs::exists(vocab_path, ec)) throw Error(vocab_path.string() + ": missing (the tokenizer's vocabulary)");
  p.encoder = read_vocab(vocab_path);
  const fs::path target_path = dir / "target_vocab.json";
  const auto target = separate ? read_vocab(target_path) : p.encoder;
  for (const auto& [k, id] : target) {
    p.decoder[id] = k;
    p.target_size = std::max(p.target_size, id + 1);
  }
  auto special = [&](const char* name) {
    auto it = p.encoder.find(name);
    if (it == p.encoder.end()) throw Error(vocab_path.string() + ": no " + name + " token");
    return it->second;
  };
  p.eos = special("</s>");
  p.unk = special("<unk>");
  p.pad = special("<pad>");
  return t;
}

std::vector<int64_t> MarianTokenizer::encode(const std::string& text_in) const {
  const Impl& p = *p_;
  std::vector<std::string> tokens;
  // A language code: the leftmost match of >>.+<< (greedy, no newline), kept
  // as a token when the text starts with it; any match is removed.
  std::string text = text_in;
  for (size_t from = 0; (from = text.find(">>", from)) != std::string::npos; ++from) {
    const size_t line_end = text.find('\n', from);
    const size_t limit = line_end == std::string::npos ? text.size() : line_end;
    const size_t close = text.rfind("<<", limit >= 2 ? limit - 2 : 0);
    if (close == std::string::npos || close < from + 3 || close + 2 > limit) continue;
    if (from == 0) tokens.push_back(text.substr(0, close + 2));
    text.erase(from, close + 2 - from);
    break;
  }
  // Special tokens written in the text are tokens; the rest goes through
  // SentencePiece, chunk by chunk.
  auto encode_chunk = [&](const std::string& chunk) {
    if (chunk.empty()) return;
    std::vector<std::string> pieces;
    const auto status = p.source.Encode(chunk, &pieces);
    if (!status.ok()) throw Error("tokenizer: " + status.ToString());
    tokens.insert(tokens.end(), pieces.begin(), pieces.end());
  };
  size_t start = 0;
  while (start <= text.size()) {
    size_t best = std::string::npos, len = 0;
    for (const std::string& s : p.specials) {
      const size_t at = text.find(s, start);
      if (at != std::string::npos && (at < best || (at == best && s.size() > len))) {
        best = at;
        len = s.size();
      }
    }
    if (best == std::string::npos) {
      encode_chunk(text.substr(start));
      break;
    }
    encode_chunk(text.substr(start, best - start));
    tokens.push_back(text.substr(best, len));
    start = best + len;
  }
  std::vector<int64_t> ids;
  for (const std::string& tok : tokens) {
    auto it = p.encoder.find(tok);
    ids.push_back(it == p.encoder.end() ? p.unk : it->second);
  }
  ids.push_back(p.eos);
  return ids;
}

std::string MarianTokenizer::decode(const std::vector<int64_t>& ids) const {
  const Impl& p = *p_;
  std::vector<std::string> pieces;
  for (int64_t id : ids) {
    if (id == p.eos || id == p.pad || id == p.unk) continue;  // skip_special_tokens
    auto it = p.decoder.find(id);
    if (it == p.decoder.end()) continue;  // transformers maps it to <unk>, then skips it
    pieces.push_back(it->second);
  }
  std::string out;
  const auto status = p.target.Decode(pieces, &out);
  if (!status.ok()) throw Error("tokenizer: " + status.ToString());
  // "▁" left by pieces the model does not know becomes a space; then strip.
  const std::string underline = "\xe2\x96\x81";
  for (size_t at = 0; (at = out.find(underline, at)) != std::string::npos;) out.replace(at, underline.size(), " ");
  const size_t a = out.find_first_not_of(" \t\n\r\f\v"), b = out.find_last_not_of(" \t\n\r\f\v");
  out = a == std::string::npos ? std::string() : out.substr(a, b - a + 1);
  return p.cleanup ? clean_up(out) : out;
}

#else  // built without SentencePiece

struct MarianTokenizer::Impl {
  int64_t eos = 0, unk = 0, pad = 0, target_size = 0;
  std::unordered_map<std::string, int64_t> encoder;
};

MarianTokenizer MarianTokenizer::load(const std::string& dir) {
  throw Error(dir + ": this ffn was built without SentencePiece (install libsentencepiece-dev: scripts/setup.sh, then "
              "rebuild); use --ids to give token ids");
}
std::vector<int64_t> MarianTokenizer::encode(const std::string&) const { return {}; }
std::string MarianTokenizer::decode(const std::vector<int64_t>&) const { return {}; }

#endif

MarianTokenizer::MarianTokenizer() = default;
MarianTokenizer::MarianTokenizer(MarianTokenizer&&) noexcept = default;
MarianTokenizer& MarianTokenizer::operator=(MarianTokenizer&&) noexcept = default;
MarianTokenizer::~MarianTokenizer() = default;
int64_t MarianTokenizer::eos_id() const { return p_->eos; }
int64_t MarianTokenizer::pad_id() const { return p_->pad; }
int64_t MarianTokenizer::unk_id() const { return p_->unk; }
int64_t MarianTokenizer::source_vocab_size() const {
  int64_t n = 0;
  for (const auto& [k, id] : p_->encoder) n = std::max(n, id + 1);
  return n;
}
int64_t MarianTokenizer::target_vocab_size() const { return p_->target_size; }

}  // namespace ffn
