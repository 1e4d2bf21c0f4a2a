// Cross-encoder rerankers (include/ffn/cross_encoder.hpp) against
// sentence-transformers' CrossEncoder.predict on tiny random
// BertForSequenceClassification models (scripts/make_cross_encoder_golden.py
// → tests/data/cross_encoder): the pair ids and token types exactly as the
// fast tokenizer gives them (longest-first truncation at 16 tokens
// included), and the scores within 1e-4 (issue 64's bound: float32 on both
// sides over a 16-wide model; measured below 1e-6).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "ffn/cross_encoder.hpp"
#include "ffn/io.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

struct Golden {
  SafetensorsFile f;
  std::vector<std::pair<std::string, std::string>> pairs;
};
Golden golden(const std::string& name) {
  Golden g{read_safetensors((fs::path(FFN_CROSS_ENCODER_DIR) / name / "golden.safetensors").string()), {}};
  for (const auto& p : nlohmann::json::parse(g.f.metadata.at("pairs")))
    g.pairs.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
  return g;
}

TEST(CrossEncoder, ScoresAndPairIdsAreSentenceTransformers) {
  // xlmr: XLMRobertaForSequenceClassification (bge-reranker-base's kind), its SentencePiece pairs.
  for (const char* name : {"logits", "sigmoid", "three", "xlmr"}) {
    SCOPED_TRACE(name);
#ifndef FFN_TEST_HAVE_SENTENCEPIECE
    if (std::string(name) == "xlmr") {
      std::printf("SKIPPED: the XLM-R cross-encoder: ffn was built without libsentencepiece\n");
      continue;
    }
#endif
    const Golden g = golden(name);
    const CrossEncoder ce = CrossEncoder::load((fs::path(FFN_CROSS_ENCODER_DIR) / name).string());
    EXPECT_EQ(ce.max_tokens(), 16);
    EXPECT_EQ(ce.activation(), std::string(name) == "sigmoid" || std::string(name) == "xlmr" ? "sigmoid" : "identity");
    for (size_t i = 0; i < g.pairs.size(); ++i) {
      char key[32];
      std::vector<int32_t> types;
      const std::vector<int32_t> ids = ce.tokenize(g.pairs[i].first, g.pairs[i].second, &types);
      std::snprintf(key, sizeof key, "ids.%03zu", i);
      const std::vector<float>& want = g.f.tensors.at(key).data;
      std::snprintf(key, sizeof key, "types.%03zu", i);
      const std::vector<float>& want_types = g.f.tensors.at(key).data;
      ASSERT_EQ(ids.size(), want.size()) << i;
      for (size_t k = 0; k < ids.size(); ++k) {
        EXPECT_EQ(float(ids[k]), want[k]) << i << " " << k;
        EXPECT_EQ(float(types[k]), want_types[k]) << i << " " << k;
      }
    }
    RerankOptions o;
    o.batch = 3;  // batches of other lengths: padding changes nothing
    const Array s = ce.predict(g.pairs, o);
    const NamedTensor& want = g.f.tensors.at("scores");
    ASSERT_EQ(s.shape, want.shape);
    double diff = 0;
    for (size_t k = 0; k < s.data.size(); ++k) diff = std::max(diff, double(std::abs(s.data[k] - want.data[k])));
    EXPECT_LE(diff, 1e-4);
  }
}

TEST(CrossEncoder, RankSortsByScoreAndRefusesWhatItCannotRun) {
  const fs::path dir = fs::path(FFN_CROSS_ENCODER_DIR) / "logits";
  const CrossEncoder ce = CrossEncoder::load(dir.string());
  const std::vector<std::string> docs = {"The cat sat on the red book.", "a dog runs fast", "", "the cat"};
  const auto r = ce.rank("where is the cat", docs);
  ASSERT_EQ(r.size(), docs.size());
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& d : docs) pairs.emplace_back("where is the cat", d);
  const Array s = ce.predict(pairs);
  for (size_t k = 0; k < r.size(); ++k) {
    EXPECT_EQ(r[k].second, s.data[size_t(r[k].first)]);
    if (k) {
      EXPECT_GE(r[k - 1].second, r[k].second);
    }
  }
  const CrossEncoder three = CrossEncoder::load((fs::path(FFN_CROSS_ENCODER_DIR) / "three").string());
  expect_error([&] { (void)three.rank("q", docs); }, "the model has 3 labels; ranking needs a one-score model");
  RerankOptions strict;
  strict.truncate = false;
  const std::string long_doc = "one two three four five six seven eight nine ten one two three four";
  expect_error([&] { (void)ce.predict({{"q", "a"}, {"q", long_doc}}, strict); },
               "pair 1: more than the model's 16 tokens");
  std::vector<int64_t> cut;
  RerankOptions counted;
  counted.truncated = [&](int64_t i) { cut.push_back(i); };
  (void)ce.predict({{"q", "a"}, {"q", long_doc}}, counted);
  EXPECT_EQ(cut, std::vector<int64_t>{1});
  // A sentence-embedding directory is not a cross-encoder.
  expect_error([&] { (void)CrossEncoder::load((fs::path(FFN_POOLING_DIR) / "max").string()); },
               "a cross-encoder here is a [\"BertForSequenceClassification\"]");
}

}  // namespace
}  // namespace ffn
