// MarianMT checkpoints against transformers 4.46.3 (tests/data/marian,
// scripts/make_marian_golden.py): teacher-forced logits, and greedy and beam
// search token for token as MarianMTModel.generate; hostile directories.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ffn/diagnostics.hpp"
#include "ffn/translation.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(FFN_MARIAN_DIR) + "/cases.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

std::string model_dir(const std::string& name) { return std::string(FFN_MARIAN_DIR) + "/" + name; }

using Ids = std::vector<std::vector<int64_t>>;

TEST(Translation, MatchesTransformersGenerate) {
  ASSERT_EQ(cases()["models"].size(), 3u);
  for (const auto& [name, c] : cases()["models"].items()) {
    SCOPED_TRACE(name);
    const TranslationModel m = TranslationModel::load(model_dir(name));
    const Ids sources = c["sources"].get<Ids>();
    // Teacher forcing: the logits of transformers' forward (float32 both;
    // tolerance 1e-4 of the largest logit: the products sum over d_model and
    // d_ff in another order through every layer, then over d_model again).
    const int64_t V = m.config().decoder_vocab_size;
    const auto want = c["logits"].get<std::vector<float>>();
    RunOptions ro;
    ro.threads = 2;
    const std::vector<float> got =
        m.logits(sources[c["logits_source"].get<size_t>()], c["logits_decoder_input"].get<std::vector<int64_t>>(), ro);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(int64_t(got.size()) % V, 0);
    const Comparison cmp = compare(got.data(), want.data(), got.size());
    EXPECT_TRUE(cmp.ok(1e-4)) << cmp.describe();
    std::printf("[ measured ] %s logits vs transformers: scaled error %.2e (tolerance 1e-4)\n", name.c_str(),
                cmp.max_error);
    for (int threads : {1, 2}) {
      GenerateOptions g;
      g.threads = threads;
      g.beams = 1;
      EXPECT_EQ(m.generate(sources, g), c["greedy"].get<Ids>()) << "greedy, threads " << threads;
      g.beams.reset();  // the generation config's num_beams
      EXPECT_EQ(m.generate(sources, g), c["beam"].get<Ids>()) << "beam " << m.config().num_beams << ", threads " << threads;
      g.beams = 1;
      g.max_new_tokens = 4;
      EXPECT_EQ(m.generate(sources, g), c["greedy_max_new_tokens_4"].get<Ids>()) << "max_new_tokens 4";
    }
    // A source's result does not depend on the others of its batch.
    GenerateOptions g;
    for (size_t i = 0; i < sources.size(); i += 3)
      EXPECT_EQ(m.generate({sources[i]}, g)[0], c["beam"][i].get<std::vector<int64_t>>()) << "source " << i << " alone";
    // Sampling (the decoding engine's sampler): source b of a call draws from
    // seed + b·φ, so a source alone with its seed gives its tokens in the
    // batch; another seed gives other tokens; beams default to 1.
    GenerateOptions sg;
    sg.temperature = 1.5f;
    sg.top_k = 50;
    sg.seed = 11;
    sg.max_new_tokens = 8;
    const Ids together = m.generate(sources, sg);
    int differ = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      GenerateOptions one = sg;
      one.seed = sg.seed + uint64_t(i) * 0x9e3779b97f4a7c15ULL;
      EXPECT_EQ(m.generate({sources[i]}, one)[0], together[i]) << "sampled source " << i << " alone";
      differ += int(together[i] != c["greedy"][i].get<std::vector<int64_t>>());
    }
    EXPECT_GT(differ, 0) << "sampling at T = 1.5 gave the greedy tokens everywhere";
    sg.seed = 12;
    EXPECT_NE(m.generate(sources, sg), together) << "another seed, the same draws";
  }
}

// --dtype int8: the FFN matrices, the decoder's attention projections and the
// output projection in int8 (per-row weight scales, per-token activation
// scales). The logits stay within 8e-2 of the largest fp32 logit: each int8
// product carries ~1/254 relative rounding per operand, summed over d_model
// (random signs: ~√d of them) through every layer and the projection, on
// models of d_model 12-20; measured 2.1e-2 and 5.7e-2 here (2.6e-2 and
// 4.6e-2 with the decoder's attention in fp32).
TEST(Translation, Int8StaysCloseToFp32) {
  for (const char* name : {"swish_shared", "relu_untied"}) {
    const auto& c = cases()["models"][name];
    const TranslationModel f = TranslationModel::load(model_dir(name));
    const TranslationModel q = TranslationModel::load(model_dir(name), WeightDtype::int8);
    const auto src = c["sources"][c["logits_source"].get<size_t>()].get<std::vector<int64_t>>();
    const auto din = c["logits_decoder_input"].get<std::vector<int64_t>>();
    const std::vector<float> a = f.logits(src, din), b = q.logits(src, din);
    const Comparison cmp = compare(b.data(), a.data(), a.size());
    std::printf("[ measured ] %s int8 logits vs fp32: scaled error %.2e (tolerance 8e-2)\n", name, cmp.max_error);
    EXPECT_TRUE(cmp.ok(8e-2)) << cmp.describe();
    EXPECT_GT(cmp.max_error, 0.0) << "int8 changed nothing: is the projection quantized?";
  }
}

TEST(Translation, GenerationConfigSetsTheDefaults) {
  const TranslationModel m = TranslationModel::load(model_dir("relu_untied"));
  EXPECT_EQ(m.config().num_beams, 4);
  EXPECT_EQ(m.config().max_length, 20);
  EXPECT_DOUBLE_EQ(m.config().length_penalty, 0.6);
  EXPECT_TRUE(m.config().early_stopping);
  EXPECT_FALSE(m.config().tied_head);
  EXPECT_EQ(m.config().bad_words, std::vector<int64_t>{66});
  EXPECT_FALSE(m.config().forced_eos_id.has_value());
  EXPECT_TRUE(m.config().renormalize_logits);
  EXPECT_EQ(m.config().min_length, 4);
  const TranslationModel s = TranslationModel::load(model_dir("gelu_separate"));
  EXPECT_FALSE(s.config().shared_embeddings);
  EXPECT_EQ(s.config().decoder_vocab_size, 47);
  EXPECT_EQ(s.config().vocab_size, 53);
  EXPECT_EQ(s.config().forced_eos_id, std::optional<int64_t>(0));
}

// Errors name the file and what is wrong; generation never reads past the position table.
TEST(Translation, BadInputIsNamed) {
  const TranslationModel m = TranslationModel::load(model_dir("swish_shared"));
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  GenerateOptions g;
  g.max_new_tokens = 65;
  EXPECT_NE(message([&] { m.generate({{5, 0}}, g); }).find("max_new_tokens 65 is past the model's 64 positions"),
            std::string::npos);
  EXPECT_NE(message([&] { m.generate({{5, 61, 0}}); }).find("token id 61 is outside the vocabulary of 61"),
            std::string::npos);
  EXPECT_NE(message([&] { m.generate({{}}); }).find("source 0 is empty"), std::string::npos);
  g.max_new_tokens = 64;  // the whole table is allowed
  EXPECT_NO_THROW(m.generate({{5, 0}}, g));

  const auto dir = test::scratch_dir("marian_bad");
  const fs::path bad = dir / "m";
  auto copy_model = [&] {
    fs::remove_all(bad);
    fs::copy(model_dir("swish_shared"), bad, fs::copy_options::recursive);
  };
  auto edit_config = [&](const std::function<void(nlohmann::json&)>& f) {
    std::ifstream in(bad / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    in.close();
    f(j);
    std::ofstream(bad / "config.json") << j.dump();
  };
  copy_model();
  edit_config([](nlohmann::json& j) { j["model_type"] = "bert"; });
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); }).find("config.json: \"model_type\" is 'bert', expected marian"),
            std::string::npos);
  copy_model();
  edit_config([](nlohmann::json& j) { j["encoder_ffn_dim"] = 37; });
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); }).find("fc1.weight has shape [36, 20], expected [37, 20]"),
            std::string::npos) << message([&] { TranslationModel::load(bad.string()); });
  copy_model();
  edit_config([](nlohmann::json& j) { j["activation_function"] = "tanh"; });
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); }).find("\"activation_function\" is 'tanh'"),
            std::string::npos);
  copy_model();
  edit_config([](nlohmann::json& j) { j["encoder_attention_heads"] = 3; });
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); }).find("does not divide d_model 20"), std::string::npos);
  copy_model();
  edit_config([](nlohmann::json& j) { j["eos_token_id"] = 99; });
  fs::remove(bad / "generation_config.json");
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); }).find("config.json: \"eos_token_id\" is 99, outside"),
            std::string::npos);
  copy_model();
  fs::remove(bad / "model.safetensors");
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); }).find("model.safetensors: missing"), std::string::npos);
  copy_model();
  std::ofstream(bad / "generation_config.json") << "{\"num_beams\": 2, \"repetition_penalty\": 1.2}";
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); })
                .find("generation_config.json: \"repetition_penalty\" is 1.2; ffn's generation does not implement it"),
            std::string::npos)
      << message([&] { TranslationModel::load(bad.string()); });
  std::ofstream(bad / "generation_config.json") << "{\"num_beams\": 2, \"repetition_penalty\": 1.0, \"suppress_tokens\": []}";
  EXPECT_NO_THROW(TranslationModel::load(bad.string())) << "defaults are accepted";
  std::ofstream(bad / "generation_config.json") << "{\"num_beams\": ";
  EXPECT_NE(message([&] { TranslationModel::load(bad.string()); }).find("generation_config.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(message([&] { TranslationModel::load((dir / "nothing").string()); }).find("not a directory"), std::string::npos);
}

}  // namespace
}  // namespace ffn

namespace ffn {
namespace {

const nlohmann::json& text_cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(FFN_MARIAN_TEXT_DIR) + "/cases.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

// MarianTokenizer's ids on texts with accents, punctuation, numbers, unknown
// characters, a language code, special tokens written in the text,
// whitespace runs and an empty text; decoding skips the special tokens.
TEST(MarianTokenizer, MatchesTransformers) {
  const MarianTokenizer tok = MarianTokenizer::load(FFN_MARIAN_TEXT_DIR);
  const auto texts = text_cases()["texts"].get<std::vector<std::string>>();
  const auto ids = text_cases()["ids"].get<Ids>();
  ASSERT_EQ(texts.size(), ids.size());
  ASSERT_GE(texts.size(), 10u);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(tok.encode(texts[i]), ids[i]) << "'" << texts[i] << "'";
  const auto dec = text_cases()["decode_ids"].get<Ids>();
  const auto want = text_cases()["decoded"].get<std::vector<std::string>>();
  for (size_t i = 0; i < dec.size(); ++i) EXPECT_EQ(tok.decode(dec[i]), want[i]);
  EXPECT_EQ(tok.eos_id(), 0);
  EXPECT_EQ(tok.unk_id(), 1);
  // The target side, as training labels are made (tokenizer(text_target=...)).
  const auto targets = text_cases()["target_texts"].get<std::vector<std::string>>();
  const auto target_ids = text_cases()["target_ids"].get<Ids>();
  ASSERT_EQ(targets.size(), target_ids.size());
  ASSERT_GE(targets.size(), 8u);
  for (size_t i = 0; i < targets.size(); ++i)
    EXPECT_EQ(tok.encode_target(targets[i]), target_ids[i]) << "'" << targets[i] << "'";
  EXPECT_NE(tok.encode_target(targets[0]), tok.encode(targets[0]));  // the two sides' models differ
  EXPECT_EQ(tok.piece(tok.eos_id(), true), "</s>");
}

TEST(MarianTokenizer, TextInTextOutAsTransformers) {
  const MarianTokenizer tok = MarianTokenizer::load(FFN_MARIAN_TEXT_DIR);
  const TranslationModel m = TranslationModel::load(FFN_MARIAN_TEXT_DIR);
  Ids sources;
  for (const auto& t : text_cases()["translated_texts"].get<std::vector<std::string>>()) sources.push_back(tok.encode(t));
  EXPECT_EQ(sources, text_cases()["sources"].get<Ids>());
  GenerateOptions g;
  g.beams = 1;
  const Ids greedy = m.generate(sources, g);
  EXPECT_EQ(greedy, text_cases()["greedy"].get<Ids>());
  const Ids beam = m.generate(sources);
  EXPECT_EQ(beam, text_cases()["beam"].get<Ids>());
  for (size_t i = 0; i < greedy.size(); ++i) {
    EXPECT_EQ(tok.decode(greedy[i]), text_cases()["greedy_text"][i].get<std::string>());
    EXPECT_EQ(tok.decode(beam[i]), text_cases()["beam_text"][i].get<std::string>());
  }
}

TEST(MarianTokenizer, BadFilesAreNamed) {
  const auto dir = test::scratch_dir("marian_tok_bad");
  const fs::path bad = dir / "t";
  auto fresh = [&] {
    fs::remove_all(bad);
    fs::copy(FFN_MARIAN_TEXT_DIR, bad, fs::copy_options::recursive);
  };
  auto message = [&] {
    try {
      MarianTokenizer::load(bad.string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  fresh();
  fs::remove(bad / "target.spm");
  EXPECT_NE(message().find("target.spm: missing"), std::string::npos) << message();
  fresh();
  std::ofstream(bad / "source.spm") << "not a model";
  EXPECT_NE(message().find("source.spm: not a SentencePiece model"), std::string::npos) << message();
  fresh();
  std::ofstream(bad / "vocab.json") << "{\"</s>\": 0, \"<pad>\": 2}";
  EXPECT_NE(message().find("vocab.json: no <unk> token"), std::string::npos) << message();
  fresh();
  std::ofstream(bad / "vocab.json") << "{\"</s>\": \"zero\"}";
  EXPECT_NE(message().find("vocab.json: the id of '</s>' is not a non-negative integer"), std::string::npos) << message();
  fresh();
  std::ofstream(bad / "vocab.json") << "[1, 2";
  EXPECT_NE(message().find("vocab.json: not valid JSON"), std::string::npos) << message();
}

}  // namespace
}  // namespace ffn
