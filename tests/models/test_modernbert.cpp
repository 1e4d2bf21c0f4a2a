// ModernBERT (issue 64): rotary positions with a base per layer, local
// attention windows on two layers in three, the first layer's attention
// without its norm, GELU gating, LayerNorm without β, a byte-level BPE
// tokenizer from tokenizer.json with its [CLS] $A [SEP] template, against
// transformers' ModernBertModel (eager attention) and
// PreTrainedTokenizerFast under sentence-transformers 3.4.1, on two tiny
// random models (scripts/make_modernbert_golden.py → tests/data/modernbert,
// made in the developer-only torch 2 venv: transformers' ModernBERT needs
// torch ≥ 2): texts in four scripts, special tokens in the text ([MASK]
// takes the space before it), a text cut at 64 (past every window), the
// BERT tests' 72 hostile texts' ids, a prompt by name; mean pooling with
// Normalize (tiny), CLS pooling with every bias on (biased).
//
// Tolerance: worst cosine ≥ 0.99999 and max |Δ| ≤ 1e-5 per element, as
// tests/models/test_pooling.cpp argues (float32 on both sides, O(1) outputs).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ffn/cross_encoder.hpp"
#include "ffn/io.hpp"
#include "ffn/sentence.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(FFN_MODERNBERT_DIR);

std::vector<int32_t> ids_of(const SafetensorsFile& g, const std::string& prefix, size_t i) {
  char key[32];
  std::snprintf(key, sizeof key, "%s.%03zu", prefix.c_str(), i);
  const NamedTensor& t = g.tensors.at(key);
  return std::vector<int32_t>(t.data.begin(), t.data.end());
}

TEST(ModernBert, TokenizerIsTransformers) {
  const SafetensorsFile g = read_safetensors((kDir / "tiny" / "golden.safetensors").string());
  const SentenceEncoder m = SentenceEncoder::load((kDir / "tiny").string());
  for (const char* set : {"sentences", "hostile"}) {
    const auto texts = nlohmann::json::parse(g.metadata.at(set)).get<std::vector<std::string>>();
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(m.tokenize(texts[i]), ids_of(g, set == std::string("sentences") ? "ids" : "hostile", i))
          << set << " " << i << ": " << texts[i].substr(0, 60);
  }
}

class ModernBertModels : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Dirs, ModernBertModels, ::testing::Values("tiny", "biased"));

TEST_P(ModernBertModels, EmbeddingsAreSentenceTransformers) {
  const fs::path dir = kDir / GetParam();
  const SafetensorsFile g = read_safetensors((dir / "golden.safetensors").string());
  const auto texts = nlohmann::json::parse(g.metadata.at("sentences")).get<std::vector<std::string>>();
  const SentenceEncoder m = SentenceEncoder::load(dir.string());
  EmbedOptions o;
  o.batch = 3;
  const Array got = m.embed(texts, o);
  const auto [diff, worst] = test::compare_rows(got, g.tensors.at("default"));
  std::printf("%s: max |delta| %.2g, worst cosine %.9f\n", GetParam(), diff, worst);
  EXPECT_LE(diff, 1e-5);
  EXPECT_GE(worst, 0.99999);
  if (g.tensors.count("query")) {
    o.prompt_name = "query";
    const auto [qdiff, qworst] = test::compare_rows(m.embed(texts, o), g.tensors.at("query"));
    EXPECT_LE(qdiff, 1e-5);
    EXPECT_GE(qworst, 0.99999);
  }
  // Each text alone gives the bits it gets in a batch (sequences do not see each other's rows).
  EmbedOptions one;
  one.batch = 1;
  const Array alone = m.embed(texts, one);
  EXPECT_EQ(0, std::memcmp(alone.data.data(), got.data.data(), got.data.size() * 4));
}

// ModernBertForSequenceClassification (gte-reranker-modernbert's kind): the
// rows' mean through the head's dense layer, GELU and LayerNorm, then the
// classifier and a sigmoid, against CrossEncoder.predict; pairs [CLS] a [SEP]
// b [SEP] cut longest first at 24. Scores within 1e-4, as the BERT and XLM-R
// rerankers' (tests/models/test_cross_encoder.cpp).
TEST(ModernBert, RerankerIsCrossEncoderPredict) {
  const fs::path dir = kDir / "reranker";
  const SafetensorsFile g = read_safetensors((dir / "golden.safetensors").string());
  const auto pairs = nlohmann::json::parse(g.metadata.at("pairs")).get<std::vector<std::pair<std::string, std::string>>>();
  const CrossEncoder ce = CrossEncoder::load(dir.string());
  EXPECT_EQ(ce.activation(), "sigmoid");
  EXPECT_EQ(ce.max_tokens(), 24);
  for (size_t i = 0; i < pairs.size(); ++i)
    EXPECT_EQ(ce.tokenize(pairs[i].first, pairs[i].second), ids_of(g, "ids", i)) << "pair " << i;
  const Array s = ce.predict(pairs);
  const std::vector<float>& want = g.tensors.at("scores").data;
  ASSERT_EQ(s.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(s.data[i], want[i], 1e-4) << "pair " << i;
}

TEST(ModernBert, WhatItDoesNotRunIsRefused) {
  const fs::path d = test::scratch_dir("modernbert_refusals");
  fs::remove_all(d);
  fs::copy(kDir / "tiny", d, fs::copy_options::recursive);
  const std::string cfg_path = (d / "config.json").string();
  const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(cfg_path));
  SentenceLoadOptions int8;
  int8.dtype = WeightDtype::int8;
  test::expect_error([&] { SentenceEncoder::load(d.string(), int8); }, "runs in float32 only for now");
  auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json c = cfg;
    c[key] = v;
    std::ofstream(cfg_path) << c.dump();
  };
  with("rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}});
  test::expect_error([&] { SentenceEncoder::load(d.string()); }, cfg_path + ": rope_scaling is not supported");
  with("local_attention", 1);
  test::expect_error([&] { SentenceEncoder::load(d.string()); }, cfg_path + ": local_attention 1 leaves a local layer");
  with("hidden_activation", "quick_gelu");
  test::expect_error([&] { SentenceEncoder::load(d.string()); }, cfg_path + ": hidden_activation 'quick_gelu'");
  std::ofstream(cfg_path) << cfg.dump();
  fs::remove(d / "tokenizer.json");
  test::expect_error([&] { SentenceEncoder::load(d.string()); }, "tokenizer.json: not found");
  fs::remove_all(d);
}

}  // namespace
}  // namespace ffn
