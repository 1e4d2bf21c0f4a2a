// MarianTokenizer (include/ffn/marian_tokenizer.hpp) on Debian's libsentencepiece:
// transformers' tokenization_marian.py and PreTrainedTokenizer's handling of
// special tokens written in the text, step for step.
#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "ffn/marian_tokenizer.hpp"
#include "core/json_file.hpp"

#include "ffn/io.hpp"

#ifdef FFN_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#ifdef FFN_SPM_MIN_LOG_LEVEL
namespace sentencepiece::logging {  // exported by libsentencepiece, not declared in its headers
int GetMinLogLevel();
void SetMinLogLevel(int v);
}  // namespace sentencepiece::logging
#endif
#endif

namespace ffn {

namespace fs = std::filesystem;

#ifdef FFN_HAVE_SENTENCEPIECE

struct MarianTokenizer::Impl {
  sentencepiece::SentencePieceProcessor source, target;
  std::unordered_map<std::string, int64_t> encoder;         // vocab.json
  std::unordered_map<std::string, int64_t> target_encoder;  // target_vocab.json when separate, else vocab.json
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
  p.target_encoder = target;
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

std::vector<int64_t> MarianTokenizer::encode(const std::string& text) const { return encode_side(text, false); }
std::vector<int64_t> MarianTokenizer::encode_target(const std::string& text) const { return encode_side(text, true); }

std::vector<int64_t> MarianTokenizer::encode_side(const std::string& text_in, bool target_side) const {
  const Impl& p = *p_;
  const sentencepiece::SentencePieceProcessor& spm = target_side ? p.target : p.source;
  const std::unordered_map<std::string, int64_t>& vocab = target_side ? p.target_encoder : p.encoder;
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
    const auto status = spm.Encode(chunk, &pieces);
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
  // (The target side's <unk> and </s> are those of its vocabulary, as transformers' target mode.)
  auto id_of = [&](const std::string& tok, int64_t otherwise) {
    auto it = vocab.find(tok);
    return it == vocab.end() ? otherwise : it->second;
  };
  const int64_t unk = id_of("<unk>", p.unk);
  std::vector<int64_t> ids;
  for (const std::string& tok : tokens) ids.push_back(id_of(tok, unk));
  ids.push_back(id_of("</s>", p.eos));
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


namespace {

class LinesIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LinesIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

std::string train_spm(const std::vector<std::string>& lines, int64_t pieces, const char* side) {
  if (lines.empty()) throw Error(std::string("MarianTokenizer::train: no ") + side + " text");
  if (pieces < 4) throw Error(std::string("MarianTokenizer::train: ") + side + " pieces " + std::to_string(pieces) + ", expected ≥ 4");
  LinesIterator it(lines);
  std::string proto;
  // As transformers' own test models: a unigram model, no BOS/EOS pieces
  // (Marian's vocab.json holds </s>), <unk> first; hard_vocab_limit off, so
  // a small text gives the pieces it has.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "unigram"}, {"vocab_size", std::to_string(pieces)}, {"character_coverage", "1.0"},
      {"bos_id", "-1"}, {"eos_id", "-1"}, {"unk_id", "0"}, {"hard_vocab_limit", "false"}, {"num_threads", "1"},
      {"input_sentence_size", "0"}, {"shuffle_input_sentence", "false"}};
#ifdef FFN_SPM_MIN_LOG_LEVEL
  // The trainer logs its settings and progress at INFO level; keep warnings.
  const int level = sentencepiece::logging::GetMinLogLevel();
  sentencepiece::logging::SetMinLogLevel(1);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
  sentencepiece::logging::SetMinLogLevel(level);
#else
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
#endif
  if (!status.ok()) throw Error(std::string("MarianTokenizer::train: the ") + side + " SentencePiece model: " + status.ToString());
  return proto;
}

void write_text(const fs::path& p, const std::string& text) {
  io::write_file_atomic(p.string(), [&](std::FILE* f) { io::write_all(f, text.data(), text.size(), p.string()); });
}

}  // namespace

void MarianTokenizer::train(const std::string& dir_in, const std::vector<std::string>& source,
                            const std::vector<std::string>& target, int64_t source_pieces, int64_t target_pieces) {
  const fs::path dir(dir_in);
  const std::string src = train_spm(source, source_pieces, "source"), tgt = train_spm(target, target_pieces, "target");
  // vocab.json: </s>, <unk>, the source's pieces, the target's not already
  // there, and <pad> last (the layout of the opus-mt models).
  nlohmann::ordered_json vocab;
  int64_t next = 0;
  vocab["</s>"] = next++;
  vocab["<unk>"] = next++;
  for (const std::string* proto : {&src, &tgt}) {
    sentencepiece::SentencePieceProcessor sp;
    const auto status = sp.LoadFromSerializedProto(*proto);
    if (!status.ok()) throw Error("MarianTokenizer::train: " + status.ToString());
    for (int i = 0; i < sp.GetPieceSize(); ++i) {
      const std::string& piece = sp.IdToPiece(i);
      if (piece == "<unk>" || piece == "<s>" || piece == "</s>" || vocab.contains(piece)) continue;
      vocab[piece] = next++;
    }
  }
  vocab["<pad>"] = next++;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) throw Error(dir_in + ": cannot make the directory");
  write_text(dir / "source.spm", src);
  write_text(dir / "target.spm", tgt);
  write_text(dir / "vocab.json", vocab.dump() + "\n");
  const nlohmann::ordered_json config = {
      {"tokenizer_class", "MarianTokenizer"}, {"source_lang", "en"}, {"target_lang", "fr"},
      {"separate_vocabs", false}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"},
      {"model_max_length", 512}, {"clean_up_tokenization_spaces", false}, {"sp_model_kwargs", nlohmann::json::object()}};
  write_text(dir / "tokenizer_config.json", config.dump(2) + "\n");
  const nlohmann::ordered_json special = {{"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}};
  write_text(dir / "special_tokens_map.json", special.dump(2) + "\n");
}

#else  // built without SentencePiece

struct MarianTokenizer::Impl {
  int64_t eos = 0, unk = 0, pad = 0, target_size = 0;
  std::unordered_map<std::string, int64_t> encoder, target_encoder;
};

MarianTokenizer MarianTokenizer::load(const std::string& dir) {
  throw Error(dir + ": this ffn was built without SentencePiece (install libsentencepiece-dev: scripts/setup.sh, then "
              "rebuild); use --ids to give token ids");
}
void MarianTokenizer::train(const std::string& dir, const std::vector<std::string>&, const std::vector<std::string>&,
                            int64_t, int64_t) {
  throw Error(dir + ": this ffn was built without SentencePiece (install libsentencepiece-dev: scripts/setup.sh, then "
              "rebuild); training a tokenizer needs it");
}
std::vector<int64_t> MarianTokenizer::encode(const std::string&) const { return {}; }
std::vector<int64_t> MarianTokenizer::encode_target(const std::string&) const { return {}; }
std::vector<int64_t> MarianTokenizer::encode_side(const std::string&, bool) const { return {}; }
std::string MarianTokenizer::decode(const std::vector<int64_t>&) const { return {}; }

#endif

MarianTokenizer::MarianTokenizer() = default;
MarianTokenizer::MarianTokenizer(MarianTokenizer&&) noexcept = default;
MarianTokenizer& MarianTokenizer::operator=(MarianTokenizer&&) noexcept = default;
MarianTokenizer::~MarianTokenizer() = default;
int64_t MarianTokenizer::eos_id() const { return p_->eos; }
std::string MarianTokenizer::piece(int64_t id, bool target) const {
  for (const auto& [k, v] : target ? p_->target_encoder : p_->encoder)
    if (v == id) return k;
  return {};
}
int64_t MarianTokenizer::pad_id() const { return p_->pad; }
int64_t MarianTokenizer::unk_id() const { return p_->unk; }
int64_t MarianTokenizer::source_vocab_size() const {
  int64_t n = 0;
  for (const auto& [k, id] : p_->encoder) n = std::max(n, id + 1);
  return n;
}
int64_t MarianTokenizer::target_vocab_size() const { return p_->target_size; }

}  // namespace ffn
