// XLM-RoBERTa (issue 64): its SentencePiece tokenizer with fairseq's ids,
// RoBERTa's position ids, one token type, against transformers'
// XLMRobertaModel and XLMRobertaTokenizer under sentence-transformers 3.4.1
// on a tiny random model with a Unigram vocabulary trained on multilingual
// text (scripts/make_xlmr_golden.py → tests/data/xlmr/tiny): texts in six
// scripts, special tokens in the text, a text cut at 64, the BERT tests' 72
// hostile texts' ids, and text pairs cut longest first.
//
// Tolerance: worst cosine ≥ 0.99999 and max |Δ| ≤ 1e-5 per element, as
// tests/models/test_pooling.cpp argues (float32 on both sides, O(1) outputs).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ffn/io.hpp"
#include "ffn/sentence.hpp"
#include "test_util.hpp"
#include "text/xlmr_tokenizer.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(FFN_XLMR_DIR) / "tiny";

std::vector<int32_t> ids_of(const SafetensorsFile& g, const std::string& prefix, size_t i) {
  char key[32];
  std::snprintf(key, sizeof key, "%s.%03zu", prefix.c_str(), i);
  const NamedTensor& t = g.tensors.at(key);
  return std::vector<int32_t>(t.data.begin(), t.data.end());
}

#ifdef FFN_TEST_HAVE_SENTENCEPIECE
constexpr bool kHaveSpm = true;
#else
constexpr bool kHaveSpm = false;
#endif

TEST(Xlmr, TokenizerIsTransformers) {
  if (!kHaveSpm) GTEST_SKIP() << "ffn was built without libsentencepiece: XLM-R's tokenizer is refused";
  const SafetensorsFile g = read_safetensors((kTiny / "golden.safetensors").string());
  const SentenceEncoder m = SentenceEncoder::load(kTiny.string());
  for (const char* set : {"sentences", "hostile"}) {
    const auto texts = nlohmann::json::parse(g.metadata.at(set)).get<std::vector<std::string>>();
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(m.tokenize(texts[i]), ids_of(g, set == std::string("sentences") ? "ids" : "hostile", i))
          << set << " " << i << ": " << texts[i].substr(0, 60);
  }
  const text::XlmrTokenizer tok = text::XlmrTokenizer::load((kTiny / "sentencepiece.bpe.model").string());
  const auto pairs = nlohmann::json::parse(g.metadata.at("pairs")).get<std::vector<std::pair<std::string, std::string>>>();
  for (size_t i = 0; i < pairs.size(); ++i) {
    std::vector<int32_t> types;
    EXPECT_EQ(tok.encode_pair(pairs[i].first, pairs[i].second, 24, types), ids_of(g, "pair", i)) << "pair " << i;
    EXPECT_EQ(types, std::vector<int32_t>(types.size(), 0));
  }
}

// kTiny (XLM-R), and a BERT body with XLM-R's tokenizer (paraphrase-multilingual-MiniLM's shape).
class XlmrModels : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Dirs, XlmrModels, ::testing::Values("tiny", "bert_body"));

TEST_P(XlmrModels, EmbeddingsAreSentenceTransformers) {
  if (!kHaveSpm) GTEST_SKIP() << "ffn was built without libsentencepiece: XLM-R's tokenizer is refused";
  const fs::path dir = fs::path(FFN_XLMR_DIR) / GetParam();
  const SafetensorsFile g = read_safetensors((dir / "golden.safetensors").string());
  const auto texts = nlohmann::json::parse(g.metadata.at("sentences")).get<std::vector<std::string>>();
  const SentenceEncoder m = SentenceEncoder::load(dir.string());
  EmbedOptions o;
  o.batch = 3;
  const auto [diff, worst] = test::compare_rows(m.embed(texts, o), g.tensors.at("default"));
  EXPECT_LE(diff, 1e-5);
  EXPECT_GE(worst, 0.99999);
}

TEST(Xlmr, OtherSpecialTokensAreRefused) {
  const fs::path d = test::scratch_dir("xlmr_specials");
  fs::remove_all(d);
  fs::copy(kTiny, d, fs::copy_options::recursive);
  nlohmann::json tc = nlohmann::json::parse(std::ifstream(d / "tokenizer_config.json"));
  tc["cls_token"] = "[CLS]";
  std::ofstream(d / "tokenizer_config.json") << tc.dump();
  test::expect_error([&] { SentenceEncoder::load(d.string()); },
                     (d / "tokenizer_config.json").string() + ": cls_token '[CLS]' is not XLM-R's <s>");
  fs::remove(d / "sentencepiece.bpe.model");
  tc["cls_token"] = "<s>";
  std::ofstream(d / "tokenizer_config.json") << tc.dump();
  test::expect_error([&] { SentenceEncoder::load(d.string()); }, "sentencepiece.bpe.model: not found");
  fs::remove_all(d);
}

}  // namespace
}  // namespace ffn
