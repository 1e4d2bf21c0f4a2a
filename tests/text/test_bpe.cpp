// Byte-level BPE (src/text/bpe.cpp) and SentencePiece (src/text/spm.cpp) on
// the real vocabularies llama.cpp ships
// with its test vectors (the llama-cpp-python sdist's
// vendor/llama.cpp/models/ggml-vocab-*.gguf with .inp and .out: texts and the
// ids transformers gives them with each model's own tokenizer.json),
// extracted by scripts/setup.sh outside the repository.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"
#include "ffn/gguf.hpp"
#include "ffn/tokenizer.hpp"
#include "ffn/types.hpp"
#include "cli_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace ffn;
using test::expect_error;

namespace {

// FFN_LLAMA_CPP_MODELS, or where scripts/setup.sh extracts them.
std::string vocab_dir() {
  if (const char* env = std::getenv("FFN_LLAMA_CPP_MODELS")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/ffn/llama.cpp-models";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// llama.cpp's format: each text followed by "\n__ggml_vocab_test__\n"; one
// line of ids per text.
std::vector<std::string> texts_of(const fs::path& p) {
  const std::string s = slurp(p), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at; (at = s.find(sep, from)) != std::string::npos; from = at + sep.size()) out.push_back(s.substr(from, at - from));
  return out;
}
std::vector<std::vector<int32_t>> ids_of(const fs::path& p) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream in(slurp(p));
  for (std::string line; std::getline(in, line);) {
    std::vector<int32_t> ids;
    std::istringstream l(line);
    for (int64_t id; l >> id;) ids.push_back(int32_t(id));
    out.push_back(std::move(ids));
  }
  return out;
}

// Whether this ffn was built with libsentencepiece (an optional dependency).
bool spm_built() {
  try {
    SpmTokenizer::from_file("/nonexistent/tokenizer.model");
  } catch (const Error& e) {
    return std::string(e.what()).find("built without libsentencepiece") == std::string::npos;
  }
  return true;
}
#define REQUIRE_SPM()                                                                                                 \
  if (!spm_built()) GTEST_SKIP() << "ffn was built without libsentencepiece (SentencePiece vocabularies are refused)"

#define REQUIRE_VOCABS()                                                                                              \
  if (!fs::exists(vocab_dir() + "/ggml-vocab-qwen2.gguf"))                                                            \
  GTEST_SKIP() << "llama.cpp's vocabularies are not installed in " << vocab_dir()                                     \
               << " (scripts/setup.sh extracts them from the llama-cpp-python sdist; FFN_LLAMA_CPP_MODELS overrides)"

}  // namespace

// Every text of each vocabulary's test vectors: the ids of the model's own
// tokenizer, and the text back from them.
TEST(BpeVocabularies, MatchTheirModelsTokenizers) {
  REQUIRE_SPM();
  REQUIRE_VOCABS();
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "qwen35", "starcoder", "refact", "command-r", "mpt",
                           "llama-spm", "phi-3"}) {
    SCOPED_TRACE(name);
    const fs::path f = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
    const auto made = Tokenizer::from_gguf(GgufFile(f.string()));
    const Tokenizer& tok = *made;
    const auto texts = texts_of(f.string() + ".inp");
    const auto want = ids_of(f.string() + ".out");
    ASSERT_GE(texts.size(), 30u);
    ASSERT_EQ(texts.size(), want.size());
    int differ = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto got = tok.encode(texts[i]);
      if (got != want[i] && ++differ <= 3) ADD_FAILURE() << "text " << i << ": \"" << texts[i] << "\"";
      if (got == want[i] && tok.decode(got) != texts[i]) ADD_FAILURE() << "text " << i << " decodes to \"" << tok.decode(got) << "\"";
    }
    EXPECT_EQ(differ, 0) << "of " << texts.size();
  }
}

// Hostile texts (Unicode, combining marks, emoji, code, digit and whitespace
// runs, special tokens in the text) on four vocabularies (llama-spm's
// SentencePiece against transformers' GGUF loader), against each
// model's own tokenizer.json run by Hugging Face tokenizers
// (scripts/make_vocab_golden.py, which also checks transformers' GGUF loader
// where it builds the same tokenizer).
TEST(BpeVocabularies, HostileTextsAsTokenizersRunsThem) {
  REQUIRE_VOCABS();
  REQUIRE_SPM();
  std::ifstream in(std::string(FFN_VOCAB_GOLDEN_DIR) + "/hostile.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 4u);
  for (const auto& [name, c] : j.items()) {
    SCOPED_TRACE(name);
    const auto made = Tokenizer::from_gguf(GgufFile(vocab_dir() + "/ggml-vocab-" + name + ".gguf"));
    const Tokenizer& tok = *made;
    const auto texts = c["texts"].get<std::vector<std::string>>();
    const auto ids = c["ids"].get<std::vector<std::vector<int32_t>>>();
    const auto decoded = c["decoded"].get<std::vector<std::string>>();
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto got = tok.encode(texts[i]);
      EXPECT_EQ(got, ids[i]) << "text " << i << ": \"" << texts[i] << "\"";
      EXPECT_EQ(tok.decode(ids[i]), decoded[i]) << "text " << i;
    }
  }
}

// A name the table does not know is refused, naming the key and the name;
// so is a non-string value.
TEST(BpeVocabularies, UnknownPreTokenizersAreRefused) {
  REQUIRE_VOCABS();
  for (const char* name : {"deepseek-llm", "deepseek-coder", "falcon"}) {
    try {
      BpeTokenizer::from_gguf(GgufFile(vocab_dir() + "/ggml-vocab-" + name + ".gguf"));
      ADD_FAILURE() << name << ": accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("tokenizer.ggml.pre is \"" + std::string(name) + "\""), std::string::npos) << m;
      EXPECT_NE(m.find("\"llama-bpe\""), std::string::npos) << m;
    }
  }
}

// BOS: tokenizer.ggml.add_bos_token where the file has it (phi-3, llama-spm
// true); without it, llama.cpp's default: Llama 3's pre-tokenizer yes, the
// other byte-level ones no.
TEST(BpeVocabularies, BosAsTheFileOrItsSchemeSays) {
  REQUIRE_SPM();
  REQUIRE_VOCABS();
  for (const auto& [name, bos] : std::vector<std::pair<std::string, bool>>{
           {"llama-bpe", true}, {"qwen2", false}, {"gpt-2", false}, {"llama-spm", true}, {"phi-3", true}}) {
    const auto t = Tokenizer::from_gguf(GgufFile(vocab_dir() + "/ggml-vocab-" + name + ".gguf"));
    EXPECT_EQ(t->adds_bos(), bos) << name;
  }
}

namespace {

// A GGUF of metadata only (version 3, no tensors), for hostile tokenizers.
struct Meta {
  std::string kv;
  int64_t n = 0;
  static void u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
  static void u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
  static void str(std::string& s, const std::string& v) {
    u64(s, v.size());
    s += v;
  }
  Meta& key(const std::string& k, uint32_t type) {
    ++n;
    str(kv, k);
    u32(kv, type);
    return *this;
  }
  Meta& string(const std::string& k, const std::string& v) {
    key(k, 8);
    str(kv, v);
    return *this;
  }
  Meta& u32v(const std::string& k, uint32_t v) {
    key(k, 4);
    u32(kv, v);
    return *this;
  }
  Meta& boolean(const std::string& k, bool v) {
    key(k, 7);
    kv += char(v);
    return *this;
  }
  Meta& strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    u32(kv, 8);
    u64(kv, v.size());
    for (const auto& x : v) str(kv, x);
    return *this;
  }
  Meta& floats(const std::string& k, const std::vector<float>& v) {
    key(k, 9);
    u32(kv, 6);
    u64(kv, v.size());
    for (float x : v) kv.append(reinterpret_cast<const char*>(&x), 4);
    return *this;
  }
  Meta& ints(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    u32(kv, 5);
    u64(kv, v.size());
    for (int32_t x : v) kv.append(reinterpret_cast<const char*>(&x), 4);
    return *this;
  }
  std::string write(const std::string& name) const {
    std::string s = "GGUF";
    u32(s, 3);
    u64(s, 0);
    u64(s, uint64_t(n));
    s += kv;
    const fs::path p = fs::temp_directory_path() / ("ffn_tok_" + name + ".gguf");
    std::ofstream(p, std::ios::binary) << s;
    return p.string();
  }
};

// A small SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens,
// "▁", "a", "b", "▁a", "ab".
Meta spm(const std::vector<int32_t>& type_of_unk = {2}) {
  std::vector<std::string> t{"<unk>", "<s>", "</s>"};
  std::vector<int32_t> ty{type_of_unk[0], 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    t.push_back(buf);
    ty.push_back(6);
  }
  for (const char* p : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab"}) {
    t.push_back(p);
    ty.push_back(1);
  }
  std::vector<float> sc(t.size(), 0.0f);
  for (size_t i = 259; i < t.size(); ++i) sc[i] = -float(i);
  Meta m;
  m.string("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", t).floats("tokenizer.ggml.scores", sc);
  m.ints("tokenizer.ggml.token_type", ty).u32v("tokenizer.ggml.unknown_token_id", 0);
  return m;
}

}  // namespace

// The small vocabulary works (so each case below fails for its own reason),
// then each hostile tokenizer field gets one line naming the file and field.
TEST(Tokenizers, HostileMetadataGetsOneLineEach) {
  REQUIRE_SPM();
  {
    const std::string f = spm().write("spm_ok");
    const auto t = Tokenizer::from_gguf(GgufFile(f));
    // "▁ab▁aé": "▁a" outscores "ab", so ▁a b ▁a, then é's two bytes.
    EXPECT_EQ(t->encode("ab a\xC3\xA9"), (std::vector<int32_t>{262, 261, 262, 3 + 0xC3, 3 + 0xA9}));
    EXPECT_EQ(t->decode(t->encode("ab a\xC3\xA9")), "ab a\xC3\xA9");
  }
  auto refused = [](const Meta& m, const std::string& name, const std::string& what) {
    const std::string f = m.write(name);
    expect_error([&] { Tokenizer::from_gguf(GgufFile(f)); }, f + ": " + what);
  };
  refused(Meta().string("tokenizer.ggml.model", "bert"), "model", "tokenizer.ggml.model is \"bert\"; expected");
  {
    Meta m = spm();
    m.u32v("tokenizer.ggml.add_bos_token", 1);
    refused(m, "bos", "tokenizer.ggml.add_bos_token must be a boolean");
  }
  {
    Meta m;
    std::vector<std::string> t{"<unk>", "<s>", "</s>", "a"};
    m.string("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", t).ints("tokenizer.ggml.token_type", {2, 3, 3, 1});
    refused(m, "noscores", "tokenizer.ggml.scores must be a float array with one score per token (4)");
  }
  {
    Meta m = spm({9});
    refused(m, "type", "tokenizer.ggml.token_type[0] is 9; expected 1 to 6");
  }
  {
    Meta m = spm();
    m.u32v("tokenizer.ggml.bos_token_id", 100000);
    refused(m, "bosid", "tokenizer.ggml.bos_token_id is 100000, outside the vocabulary");
  }
  {
    Meta m;
    std::vector<std::string> t{"<unk>", "a", "a"};
    m.string("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", t).floats("tokenizer.ggml.scores", {0, 0, 0});
    m.ints("tokenizer.ggml.token_type", {2, 1, 1}).u32v("tokenizer.ggml.unknown_token_id", 0);
    refused(m, "dup", "SentencePiece refuses the vocabulary");
  }
  {
    Meta m;
    std::vector<std::string> t{"<unk>", "<0xZZ>"};
    m.string("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", t).floats("tokenizer.ggml.scores", {0, 0});
    m.ints("tokenizer.ggml.token_type", {2, 6}).u32v("tokenizer.ggml.unknown_token_id", 0);
    refused(m, "byte", "tokenizer.ggml.tokens[1] is a byte token but not <0xXX>");
  }
  {
    Meta m;
    std::vector<std::string> t{"a"};
    m.string("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", t).floats("tokenizer.ggml.scores", {0});
    m.ints("tokenizer.ggml.token_type", {1});
    refused(m, "nounk", "tokenizer.ggml.unknown_token_id is missing");
  }
  // Byte-level BPE: the pre-tokenizer's name must be a string the table knows.
  std::vector<std::string> bytes;
  for (int b = 33; b < 127; ++b) bytes.push_back(std::string(1, char(b)));
  for (int b = 161; b < 256; ++b) {
    if (b == 173) continue;
    bytes.push_back(std::string{char(0xC0 | (b >> 6)), char(0x80 | (b & 0x3F))});
  }
  {
    Meta m;
    m.string("tokenizer.ggml.model", "gpt2").strings("tokenizer.ggml.tokens", bytes).strings("tokenizer.ggml.merges", {});
    m.u32v("tokenizer.ggml.pre", 3);
    refused(m, "pre", "tokenizer.ggml.pre must be a string");
  }
  {
    Meta m;
    m.string("tokenizer.ggml.model", "gpt2").strings("tokenizer.ggml.tokens", bytes).strings("tokenizer.ggml.merges", {});
    m.string("tokenizer.ggml.pre", "tekken");
    refused(m, "tekken", "tokenizer.ggml.pre is \"tekken\", a pre-tokenizer ffn does not know");
  }
}

// A Hugging Face directory's tokenizer.model (SentencePiece's file) gives the
// ids of the same vocabulary read from its GGUF: the llama-spm and phi-3
// vocabularies written as model files, on their test vectors.
TEST(BpeVocabularies, SentencePieceModelFilesAsTheirGgufs) {
  REQUIRE_SPM();
  REQUIRE_VOCABS();
  for (const char* name : {"llama-spm", "phi-3"}) {
    SCOPED_TRACE(name);
    const fs::path f = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
    const GgufFile g(f.string());
    const fs::path model = test::scratch_dir(std::string("spm_model_") + name) / "tokenizer.model";
    std::ofstream(model, std::ios::binary) << SpmTokenizer::model_proto(g);
    const SpmTokenizer a = SpmTokenizer::from_gguf(g), b = SpmTokenizer::from_file(model.string());
    EXPECT_EQ(b.vocab_size(), a.vocab_size());
    EXPECT_TRUE(b.adds_bos());
    const auto texts = texts_of(f.string() + ".inp");
    const auto want = ids_of(f.string() + ".out");
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(b.encode(texts[i]), want[i]) << "text " << i;
      EXPECT_EQ(b.decode(want[i]), a.decode(want[i])) << "text " << i;
    }
    fs::remove_all(model.parent_path());
  }
  expect_error([] { SpmTokenizer::from_file("/nonexistent/tokenizer.model"); },
               "/nonexistent/tokenizer.model: not a SentencePiece model");
}

// A Hugging Face directory whose tokenizer.json is SentencePiece's (Metaspace,
// not byte-level BPE) loads its tokenizer.model: Mistral's random model with
// a small SentencePiece vocabulary (no byte pieces: unknown characters are
// <unk>), BOS before a text prompt.
TEST(Tokenizers, DirectoriesWithATokenizerModelUseIt) {
  REQUIRE_SPM();
  std::vector<std::string> t{"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "c", "\xE2\x96\x81" "a", "ab", "bc"};
  std::vector<float> sc;
  for (size_t i = 0; i < t.size(); ++i) sc.push_back(-float(i));
  Meta m;
  m.string("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", t).floats("tokenizer.ggml.scores", sc);
  m.ints("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1, 1, 1}).u32v("tokenizer.ggml.unknown_token_id", 0);
  const fs::path dir = test::scratch_dir("spm_directory");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(fs::path(FFN_FAMILIES_DIR) / "mistral_window" / f, dir / f);
  std::ofstream(dir / "tokenizer.model", std::ios::binary) << SpmTokenizer::model_proto(GgufFile(m.write("spm_dir")));
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
    "normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"}})";
  const CausalLM lm = CausalLM::load(dir.string());
  ASSERT_NE(lm.tokenizer(), nullptr);
  EXPECT_EQ(lm.tokenizer()->vocab_size(), 10);
  // "▁a" outscores "ab": ▁a, b, ▁, c, then "é" (no piece, no bytes): <unk>.
  EXPECT_EQ(lm.tokenizer()->encode("ab c\xC3\xA9"), (std::vector<int32_t>{7, 5, 3, 6, 0}));
  EXPECT_TRUE(lm.config().add_bos);
  EXPECT_EQ(lm.encode_prompt("ab"), (std::vector<int32_t>{1, 7, 5}));
  fs::remove_all(dir);
}

// ffn generate streams what the whole continuation decodes to: on a
// SentencePiece vocabulary of "▁w…" words (197 pieces, Mistral's random
// model), the printed text is the decoded ids', spaces between the words (a
// token decoded alone would lose its "▁").
TEST(Tokenizers, GenerateStreamsTheContinuationsText) {
  REQUIRE_SPM();
  std::vector<std::string> t{"<unk>", "<s>", "</s>", "\xE2\x96\x81"};
  std::vector<int32_t> ty{2, 3, 3, 1};
  for (int i = 0; t.size() < 197; ++i) {
    t.push_back((i % 2 ? "x" : "\xE2\x96\x81w") + std::to_string(i));
    ty.push_back(1);
  }
  std::vector<float> sc(t.size(), -1.0f);
  Meta m;
  m.string("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", t).floats("tokenizer.ggml.scores", sc);
  m.ints("tokenizer.ggml.token_type", ty).u32v("tokenizer.ggml.unknown_token_id", 0);
  const fs::path dir = test::scratch_dir("spm_stream");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(fs::path(FFN_FAMILIES_DIR) / "mistral_window" / f, dir / f);
  std::ofstream(dir / "tokenizer.model", std::ios::binary) << SpmTokenizer::model_proto(GgufFile(m.write("spm_stream")));
  const CausalLM lm = CausalLM::load(dir.string());
  const auto text = test::run_ffn("generate --model " + dir.string() + " --max-new-tokens 40 --threads 1 w0", dir);
  ASSERT_EQ(text.status, 0) << text.err;
  std::string ids_arg;
  for (int32_t id : lm.encode_prompt("w0")) ids_arg += (ids_arg.empty() ? "" : " ") + std::to_string(id);
  const auto ids = test::run_ffn("generate --model " + dir.string() + " --max-new-tokens 40 --threads 1 --ids '" + ids_arg + "'",
                                 dir);
  ASSERT_EQ(ids.status, 0) << ids.err;
  std::vector<int32_t> made;
  std::istringstream in(ids.out);
  for (int32_t id; in >> id;) made.push_back(id);
  ASSERT_GE(made.size(), 5u);
  const std::string want = lm.tokenizer()->decode(made, true);
  EXPECT_NE(want.find(' '), std::string::npos) << want;
  EXPECT_EQ(text.out, want + "\n");
  fs::remove_all(dir);
}
