// MPNet (issue 64): the relative position bias, RoBERTa's position ids, the
// <s> … </s> WordPiece tokenizer, against transformers' MPNetModel under
// sentence-transformers 3.4.1 (scripts/make_mpnet_golden.py →
// tests/data/mpnet): a tiny random MPNet of odd sizes (d 24, 3 heads, 2
// layers, texts up to its 128 positions), and the real all-mpnet-base-v2
// on the BERT tests' 72 hostile texts when scripts/setup.sh installed it.
//
// Tolerance: worst cosine ≥ 0.99999 (issue 64's fp32 bound) and, on the tiny
// model, max |Δ| ≤ 1e-5 per element (tests/models/test_pooling.cpp's argument:
// float32 on both sides, O(1) outputs; measured 1.2e-7 tiny, 2.5e-7 real).
// A bucket off by one moves an element by ~1e-2 with weights ~N(0, 0.5):
// dropping the bias fails both (checked below).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ffn/encoder.hpp"
#include "ffn/io.hpp"
#include "ffn/sentence.hpp"
#include "models/relative_bias.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(FFN_MPNET_DIR) / "tiny";

std::vector<std::string> sentences(const SafetensorsFile& f) {
  return nlohmann::json::parse(f.metadata.at("sentences")).get<std::vector<std::string>>();
}

void expect_ids(const SentenceEncoder& m, const SafetensorsFile& g, const std::vector<std::string>& texts) {
  for (size_t i = 0; i < texts.size(); ++i) {
    char key[16];
    std::snprintf(key, sizeof key, "ids.%03zu", i);
    const NamedTensor& want = g.tensors.at(key);
    const std::vector<int32_t> got = m.tokenize(texts[i]);
    std::vector<int32_t> w(want.data.begin(), want.data.end());
    EXPECT_EQ(got, w) << "text " << i << ": " << texts[i].substr(0, 60);
  }
}

TEST(Mpnet, BucketsAreTransformers) {
  const SafetensorsFile g = read_safetensors((kTiny / "golden.safetensors").string());
  const NamedTensor& b = g.tensors.at("buckets");
  const int64_t from = std::stoll(g.metadata.at("buckets_from"));
  ASSERT_EQ(b.data.size(), 2201u);
  for (size_t k = 0; k < b.data.size(); ++k)
    EXPECT_EQ(models::relative_bucket(from + int64_t(k), 32, 128), int64_t(b.data[k])) << "offset " << from + int64_t(k);
}

TEST(Mpnet, TinyModelIsSentenceTransformers) {
  const SafetensorsFile g = read_safetensors((kTiny / "golden.safetensors").string());
  const std::vector<std::string> texts = sentences(g);
  const SentenceEncoder m = SentenceEncoder::load(kTiny.string());
  expect_ids(m, g, texts);
  EmbedOptions o;
  o.batch = 3;
  const auto [diff, worst] = test::compare_rows(m.embed(texts, o), g.tensors.at("default"));
  EXPECT_LE(diff, 1e-5);
  EXPECT_GE(worst, 0.99999);
  // Each text alone gives the batch's bits.
  for (size_t i = 0; i < texts.size(); ++i) {
    const Array one = m.embed({texts[i]}), all = m.embed(texts, o);
    EXPECT_EQ(0, std::memcmp(one.data.data(), all.data.data() + i * 24, 24 * sizeof(float))) << "text " << i;
  }
  // Without the bias (a zero table) the same model is far off: the test sees it.
  EncoderRunOptions none;
  const std::vector<int32_t> ids = m.tokenize(texts[3]);
  const std::vector<float> with = m.hidden(ids, 1);
  std::vector<float> table(size_t(3 * (2 * 128 - 1)), 0.0f);
  none.position_bias = table.data();
  none.position_bias_span = 128;
  const std::vector<float> without = m.hidden(ids, 1, none);
  double moved = 0;
  for (size_t j = 0; j < with.size(); ++j) moved = std::max(moved, double(std::abs(with[j] - without[j])));
  EXPECT_GT(moved, 1e-2);
}

TEST(Mpnet, AllMpnetBaseV2OnTheHostileTexts) {
  const char* home = std::getenv("HOME");
  const fs::path dir = std::getenv("FFN_MPNET_MODEL_DIR") ? fs::path(std::getenv("FFN_MPNET_MODEL_DIR"))
                                                           : fs::path(home ? home : "/root") / ".cache/ffn/all-mpnet-base-v2";
  if (!fs::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "all-mpnet-base-v2 is not installed at " << dir << " (scripts/setup.sh installs it)";
  const SafetensorsFile g = read_safetensors((fs::path(FFN_MPNET_DIR) / "all_mpnet_base_v2.safetensors").string());
  const std::vector<std::string> texts = sentences(g);
  ASSERT_EQ(texts.size(), 72u);
  const SentenceEncoder m = SentenceEncoder::load(dir.string());
  expect_ids(m, g, texts);
  const auto [diff, worst] = test::compare_rows(m.embed(texts), g.tensors.at("embeddings"));
  EXPECT_GE(worst, 0.99999) << "max |Δ| " << diff;
}

TEST(Mpnet, TheBiasIsInferenceOnly) {
  const SentenceEncoder m = SentenceEncoder::load(kTiny.string());
  std::vector<float> table(size_t(3 * (2 * 8 - 1)), 0.0f), x(size_t(9 * 24), 0.5f), y(x.size());
  EncoderRunOptions o;
  o.position_bias = table.data();
  o.position_bias_span = 8;
  test::expect_error([&] { m.encoder().forward(x.data(), y.data(), Shape{1, 9, Layout::tokens, {}}, o); },
                     "sequences of 9 positions, past the position bias's span of 8");
  EncoderCache cache;
  test::expect_error([&] { m.encoder().forward(x.data(), y.data(), Shape{1, 8, Layout::tokens, {}}, o, &cache); },
                     "inference only, without a cache");
}

}  // namespace
}  // namespace ffn
