// The sentence encoder's pipeline after the encoder (src/models/pooling.hpp):
// each pooling mode, normalization, prompts and truncation against
// sentence-transformers 3.4.1 on a tiny random BERT saved once per
// configuration (scripts/make_pooling_golden.py → tests/data/pooling).
//
// Tolerance: worst cosine ≥ 0.99999 (issue 64's fp32 bound) and max |Δ| ≤ 1e-5
// per element. Both sides compute in float32 the same encoder on ≤ 12 tokens
// of width 16 with weights ~N(0, 0.5); the outputs are O(1), and float32
// rounding over a few hundred operations per element stays below ~1e-6
// relative (measured against sentence-transformers run live: max 4.8e-7,
// worst cosine 0.9999999); 1e-5 leaves a factor 20, and a wrong mode, a missing
// normalization or a token less moves elements by ≥ 1e-2 (checked below:
// the test fails when a mode is changed).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ffn/io.hpp"
#include "ffn/sentence.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const char* const kConfigs[] = {"cls_normalize", "max", "mean_sqrt_len", "lasttoken_normalize", "cls_mean",
                                "mean_prompts"};

struct Golden {
  SafetensorsFile f;
  std::vector<std::string> sentences;
};
Golden golden(const std::string& name) {
  Golden g{read_safetensors((fs::path(FFN_POOLING_DIR) / name / "golden.safetensors").string()), {}};
  g.sentences = nlohmann::json::parse(g.f.metadata.at("sentences")).get<std::vector<std::string>>();
  return g;
}

TEST(Pooling, EveryModeAndPromptIsSentenceTransformers) {
  for (const char* name : kConfigs) {
    SCOPED_TRACE(name);
    const Golden g = golden(name);
    const SentenceEncoder m = SentenceEncoder::load((fs::path(FFN_POOLING_DIR) / name).string());
    EXPECT_TRUE(m.load_notes().empty()) << m.load_notes()[0];
    const auto [diff, cos] = test::compare_rows(m.embed(g.sentences), g.f.tensors.at("default"));
    EXPECT_LE(diff, 1e-5);
    EXPECT_GE(cos, 0.99999);
    for (const auto& [pname, text] : m.prompts()) {
      EmbedOptions o;
      o.prompt_name = pname;
      const auto [pd, pc] = test::compare_rows(m.embed(g.sentences, o), g.f.tensors.at("prompt." + pname));
      EXPECT_LE(pd, 1e-5) << pname;
      EXPECT_GE(pc, 0.99999) << pname;
      o.prompt_name.reset();
      o.prompt = text;  // the same text given directly
      EXPECT_EQ(m.embed(g.sentences, o).data, m.embed(g.sentences, EmbedOptions{.prompt_name = pname}).data);
    }
    // The ids, the default prompt included, as sentence-transformers tokenized them.
    const std::string prompt = m.default_prompt_name().empty() ? "" : m.prompts().at(m.default_prompt_name());
    for (size_t i = 0; i < g.sentences.size(); ++i) {
      char key[16];
      std::snprintf(key, sizeof key, "ids.%03zu", i);
      const std::vector<int32_t> ids = m.tokenize(prompt + g.sentences[i]);
      const std::vector<float>& want = g.f.tensors.at(key).data;
      ASSERT_EQ(ids.size(), want.size()) << key;
      for (size_t k = 0; k < ids.size(); ++k) EXPECT_EQ(float(ids[k]), want[k]) << key;
    }
  }
}

TEST(Pooling, TheDimAndTheDescriptionFollowTheModes) {
  const SentenceEncoder both = SentenceEncoder::load((fs::path(FFN_POOLING_DIR) / "cls_mean").string());
  EXPECT_EQ(both.dim(), 32);
  EXPECT_EQ(both.pooling(), "cls + mean");
  const SentenceEncoder e5 = SentenceEncoder::load((fs::path(FFN_POOLING_DIR) / "mean_prompts").string());
  EXPECT_EQ(e5.dim(), 16);
  EXPECT_EQ(e5.pooling(), "mean, normalized");
  EXPECT_EQ(e5.default_prompt_name(), "passage");
}

// The test can fail: another mode's embeddings are far from the golden ones.
TEST(Pooling, AnotherModeIsFarFromTheGolden) {
  const Golden g = golden("max");
  const SentenceEncoder cls = SentenceEncoder::load((fs::path(FFN_POOLING_DIR) / "cls_normalize").string());
  EXPECT_GT(test::compare_rows(cls.embed(g.sentences), g.f.tensors.at("default")).first, 1e-2);
}

TEST(Pooling, LongTextsAreCutAndCountedOrRefused) {
  const Golden g = golden("max");
  const SentenceEncoder m = SentenceEncoder::load((fs::path(FFN_POOLING_DIR) / "max").string());
  std::vector<int64_t> cut;
  EmbedOptions o;
  o.truncated = [&](int64_t i) { cut.push_back(i); };
  (void)m.embed(g.sentences, o);
  // The sentences over 12 tokens: two long ones, and "unknownword zzz …",
  // which the tiny vocabulary spells letter by letter (u ##n ##k …).
  EXPECT_EQ(cut, (std::vector<int64_t>{2, 5, 6}));
  o.truncate = false;
  expect_error([&] { (void)m.embed(g.sentences, o); },
               "text 2: more than the model's 12 tokens (its special tokens included), and truncation is off");
  EXPECT_NO_THROW((void)m.embed({g.sentences[0], g.sentences[1]}, o));
}

TEST(Pooling, PromptsAndModesItCannotRunAreRefusedByName) {
  const fs::path src = fs::path(FFN_POOLING_DIR) / "mean_prompts";
  const SentenceEncoder m = SentenceEncoder::load(src.string());
  expect_error([&] { (void)m.embed({"x"}, EmbedOptions{.prompt_name = "document"}); },
               "prompt name 'document': the model has only passage, query (default passage)");
  expect_error([&] { (void)m.embed({"x"}, EmbedOptions{.prompt = "a: ", .prompt_name = "query"}); }, "not both");
  const SentenceEncoder plain = SentenceEncoder::load((fs::path(FFN_POOLING_DIR) / "max").string());
  expect_error([&] { (void)plain.embed({"x"}, EmbedOptions{.prompt_name = "query"}); },
               "the model has no prompts (config_sentence_transformers.json)");

  auto with_pooling = [&](const std::string& tag, const std::function<void(nlohmann::json&)>& edit) {
    const fs::path d = test::scratch_dir("pooling_" + tag);
    fs::remove_all(d);
    fs::copy(src, d, fs::copy_options::recursive);
    nlohmann::json pc = nlohmann::json::parse(std::ifstream(d / "1_Pooling" / "config.json"));
    edit(pc);
    std::ofstream(d / "1_Pooling" / "config.json") << pc.dump();
    return d;
  };
  const fs::path wm = with_pooling("weighted", [](nlohmann::json& j) { j["pooling_mode_weightedmean_tokens"] = true; });
  expect_error([&] { (void)SentenceEncoder::load(wm.string()); }, "pooling_mode_weightedmean_tokens is not supported");
  const fs::path ip = with_pooling("include_prompt", [](nlohmann::json& j) { j["include_prompt"] = false; });
  expect_error([&] { (void)SentenceEncoder::load(ip.string()); }, "include_prompt false");
  const fs::path none = with_pooling("none", [](nlohmann::json& j) { j["pooling_mode_mean_tokens"] = false; });
  expect_error([&] { (void)SentenceEncoder::load(none.string()); }, "no pooling mode is set");
  // As sentence-transformers' Pooling(**config): mean is on unless the file says
  // otherwise, and a pooling_mode string names one mode alone.
  const fs::path cls_only = with_pooling("cls_only", [](nlohmann::json& j) {
    j = {{"word_embedding_dimension", 16}, {"pooling_mode_cls_token", true}};
  });
  EXPECT_EQ(SentenceEncoder::load(cls_only.string()).pooling(), "cls + mean, normalized");
  const fs::path named = with_pooling("named", [](nlohmann::json& j) { j["pooling_mode"] = "max"; });
  EXPECT_EQ(SentenceEncoder::load(named.string()).pooling(), "max, normalized");
  const fs::path bad_name = with_pooling("bad_name", [](nlohmann::json& j) { j["pooling_mode"] = "median"; });
  expect_error([&] { (void)SentenceEncoder::load(bad_name.string()); }, "pooling_mode 'median' is not one of");
  expect_error([&] { (void)m.embed({"x"}, EmbedOptions{.prompt_name = ""}); }, "prompt name '': the model has only");
  const fs::path dim = with_pooling("dim", [](nlohmann::json& j) { j["word_embedding_dimension"] = 17; });
  expect_error([&] { (void)SentenceEncoder::load(dim.string()); },
               "word_embedding_dimension is 17, but the model's hidden size is 16");
}

}  // namespace
}  // namespace ffn
