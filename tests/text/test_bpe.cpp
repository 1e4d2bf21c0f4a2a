// Byte-level BPE (src/text/bpe.cpp) and SentencePiece (src/text/spm.cpp) on
// the real vocabularies llama.cpp ships
// with its test vectors (the llama-cpp-python sdist's
// vendor/llama.cpp/models/ggml-vocab-*.gguf with .inp and .out: texts and the
// ids transformers gives them with each model's own tokenizer.json),
// extracted by scripts/setup.sh outside the repository.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ffn/gguf.hpp"
#include "ffn/tokenizer.hpp"
#include "ffn/types.hpp"

namespace fs = std::filesystem;
using namespace ffn;

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

#define REQUIRE_VOCABS()                                                                                              \
  if (!fs::exists(vocab_dir() + "/ggml-vocab-qwen2.gguf"))                                                            \
  GTEST_SKIP() << "llama.cpp's vocabularies are not installed in " << vocab_dir()                                     \
               << " (scripts/setup.sh extracts them from the llama-cpp-python sdist; FFN_LLAMA_CPP_MODELS overrides)"

}  // namespace

// Every text of each vocabulary's test vectors: the ids of the model's own
// tokenizer, and the text back from them.
TEST(BpeVocabularies, MatchTheirModelsTokenizers) {
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
// runs, special tokens in the text) on three vocabularies, against each
// model's own tokenizer.json run by Hugging Face tokenizers
// (scripts/make_vocab_golden.py, which also checks transformers' GGUF loader
// where it builds the same tokenizer).
TEST(BpeVocabularies, HostileTextsAsTokenizersRunsThem) {
  REQUIRE_VOCABS();
  std::ifstream in(std::string(FFN_VOCAB_GOLDEN_DIR) + "/hostile.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 3u);
  for (const auto& [name, c] : j.items()) {
    SCOPED_TRACE(name);
    const BpeTokenizer tok = BpeTokenizer::from_gguf(GgufFile(vocab_dir() + "/ggml-vocab-" + name + ".gguf"));
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
  REQUIRE_VOCABS();
  for (const auto& [name, bos] : std::vector<std::pair<std::string, bool>>{
           {"llama-bpe", true}, {"qwen2", false}, {"gpt-2", false}, {"llama-spm", true}, {"phi-3", true}}) {
    const auto t = Tokenizer::from_gguf(GgufFile(vocab_dir() + "/ggml-vocab-" + name + ".gguf"));
    EXPECT_EQ(t->adds_bos(), bos) << name;
  }
}
