// The BERT tokenizer and sentence embeddings against Hugging Face
// (tests/data/minilm_golden.safetensors, scripts/make_minilm_golden.py), on
// the all-MiniLM-L6-v2 that scripts/setup.sh installs (skipped, saying so,
// where it is not installed); the WordPiece rules on a small vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/io.hpp"
#include "ffn/sentence.hpp"
#include "test_util.hpp"
#include "io/safetensors.hpp"
#include "models/encoder_family.hpp"
#include "text/wordpiece.hpp"
#include "tolerances.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;

// ---- WordPiece on a small vocabulary ----------------------------------------

text::WordPiece small_vocab() {
  static const fs::path p = test::scratch_dir("wordpiece") / "vocab.txt";
  std::ofstream f(p);
  for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "un", "##aff", "##able", "cafe", "naive",
                        "!", ",", ".", "$", "\xe4\xb8\x80" /* 一 */, "\xe4\xba\x8c" /* 二 */, "a", "##a", "s", "##s",
                        "\xcf\x83" /* σ */})
    f << t << "\n";
  f.close();
  return text::WordPiece::load(p.string());
}

std::vector<std::string> pieces(const std::string& s) { return small_vocab().pieces(s); }
using V = std::vector<std::string>;

TEST(WordPiece, SplitsWordsIntoTheLongestPieces) {
  EXPECT_EQ(pieces("unaffable"), (V{"un", "##aff", "##able"}));
  EXPECT_EQ(pieces("Hello, WORLD!"), (V{"hello", ",", "world", "!"}));
  EXPECT_EQ(pieces("aaa"), (V{"a", "##a", "##a"}));
  EXPECT_EQ(pieces("unknownword hello"), (V{"[UNK]", "hello"})) << "no full match: the whole word is [UNK]";
  EXPECT_EQ(pieces(std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(pieces(std::string(101, 'a')), (V{"[UNK]"})) << "over 100 characters: [UNK]";
}

TEST(WordPiece, NormalizesAsBertDoes) {
  EXPECT_EQ(pieces("Caf\xc3\xa9 na\xc3\xafve"), (V{"cafe", "naive"})) << "accents stripped (NFD, then no Mn)";
  EXPECT_EQ(pieces("CAFE\xcc\x81"), (V{"cafe"})) << "a combining accent";
  EXPECT_EQ(pieces("\xe4\xb8\x80\xe4\xba\x8c"), (V{"\xe4\xb8\x80", "\xe4\xba\x8c"})) << "CJK ideographs are words";
  EXPECT_EQ(pieces("hello\tworld\r\nhello\xc2\xa0world"), (V{"hello", "world", "hello", "world"})) << "white space";
  EXPECT_EQ(pieces("hel\xe2\x80\x8blo"), (V{"hello"})) << "a zero-width space (Cf) is dropped";
  EXPECT_EQ(pieces(std::string("hel\x00lo", 7)), (V{"hello"})) << "NUL dropped";
  EXPECT_EQ(pieces("hel\x0blo"), (V{"hello"})) << "a vertical tab is a control character: dropped";
  EXPECT_EQ(pieces("$hello"), (V{"$", "hello"})) << "ASCII punctuation includes symbols";
  EXPECT_EQ(pieces("\xce\xa3"), (V{"\xcf\x83"})) << "Σ lower-cases to σ";
  EXPECT_EQ(pieces(""), V{});
  EXPECT_EQ(pieces(" \t\n"), V{});
}

TEST(WordPiece, FollowsTokenizersOnItsEdges) {
  EXPECT_EQ(pieces("hello\xcd\xb8"), (V{"[UNK]"})) << "an unassigned code point (U+0378) is kept, so the word is [UNK]";
  EXPECT_EQ(pieces("a\xf0\xab\xa0\xa0" "a"), (V{"[UNK]"})) << "U+2B820 is not one of tokenizers' CJK ranges";
  EXPECT_EQ(pieces("a\xf0\xab\xa4\xa0" "a"), (V{"a", "[UNK]", "a"})) << "U+2B920 is";
  EXPECT_EQ(pieces("[SEP]hello[MASK]"), (V{"[SEP]", "hello", "[UNK]", "[UNK]", "[UNK]"}))
      << "[SEP] written in the text is the special token; [MASK], not in this vocabulary, is text: [ mask ]";
  const fs::path p = test::scratch_dir("wordpiece_dup") / "vocab.txt";
  std::ofstream(p) << "[UNK]\n[CLS]\n[SEP]\nhello \t\nhello\n";
  const auto w = text::WordPiece::load(p.string());
  EXPECT_EQ(w.encode("hello", 8), (std::vector<int32_t>{1, 4, 2})) << "trailing white space trimmed, the last duplicate wins";
}

TEST(WordPiece, EncodeAddsClsSepAndTruncates) {
  const auto w = small_vocab();
  EXPECT_EQ(w.encode("hello world", 16), (std::vector<int32_t>{2, 4, 5, 3}));
  EXPECT_EQ(w.encode("", 16), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(w.encode("hello world hello", 3), (std::vector<int32_t>{2, 4, 3}));
  EXPECT_EQ(w.encode("unaffable", 4), (std::vector<int32_t>{2, 6, 7, 3})) << "truncation cuts inside a word, as tokenizers";
  EXPECT_THROW(w.encode("x", 1), Error);
  auto error = [&](const std::string& text, int64_t max_tokens) {
    try {
      w.encode(text, max_tokens, "line 3");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("ok \xff", 8), "line 3: not valid UTF-8 at byte 3");
  EXPECT_EQ(error("[CLS]\xff", 8), "line 3: not valid UTF-8 at byte 5") << "offsets count from the start of the text";
  EXPECT_EQ(error("hello world \xff", 3), "line 3: not valid UTF-8 at byte 12") << "also past the truncation";
  std::string huge;
  for (int i = 0; i < 200000; ++i) huge += "hello ";
  EXPECT_EQ(w.encode(huge, 5).size(), 5u) << "a 1.2 MB text, truncated";
}

// ---- a model directory's files, checked --------------------------------------

TEST(SentenceModelFiles, EachBadSettingIsNamed) {
  const fs::path base = test::scratch_dir("model_files");
  auto make = [&](const std::string& name, const nlohmann::json& config, const nlohmann::json& modules,
                  const nlohmann::json& tokenizer) {
    const fs::path d = base / name;
    fs::create_directories(d);
    std::ofstream(d / "config.json") << config.dump();
    if (!modules.is_null()) std::ofstream(d / "modules.json") << modules.dump();
    if (!tokenizer.is_null()) std::ofstream(d / "tokenizer_config.json") << tokenizer.dump();
    std::ofstream v(d / "vocab.txt");
    for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) v << t << "\n";
    v.close();
    SafetensorsFile w;
    w.tensors["embeddings.word_embeddings.weight"] = NamedTensor{{5, 7}, std::vector<float>(35, 0.0f)};
    write_safetensors((d / "model.safetensors").string(), w);
    return d.string();
  };
  const nlohmann::json good = {{"model_type", "bert"}, {"hidden_act", "gelu"}, {"hidden_size", 8},
                               {"num_attention_heads", 2}, {"intermediate_size", 16}, {"num_hidden_layers", 1},
                               {"max_position_embeddings", 16}, {"vocab_size", 5}, {"layer_norm_eps", 1e-12}};
  auto message = [&](const std::string& dir) {
    try {
      SentenceEncoder::load(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json c = good;
    c[key] = value;
    return c;
  };
  const nlohmann::json st = nlohmann::json::array(
      {{{"type", "sentence_transformers.models.Transformer"}, {"path", ""}},
       {{"type", "sentence_transformers.models.Dense"}, {"path", "2_Dense"}}});
  struct Case {
    std::string dir, expect;
  } cases[] = {
      {make("act", with("hidden_act", "swish"), nullptr, nullptr), "hidden_act 'swish' is not supported"},
      {make("pos", with("position_embedding_type", "relative_key"), nullptr, nullptr),
       "position_embedding_type 'relative_key' is not supported"},
      {make("eps", with("layer_norm_eps", "1e-12"), nullptr, nullptr), "\"layer_norm_eps\" has the wrong type"},
      {make("heads", with("num_attention_heads", 3), nullptr, nullptr), "heads must divide d_model"},
      {make("vocab", with("vocab_size", 4), nullptr, nullptr), "5 tokens, but"},  // more ids than embedding rows
      {make("dense", good, st, nullptr), "module sentence_transformers.models.Dense is not supported"},
      {make("cased", good, nullptr, {{"do_lower_case", false}}), "only the uncased BERT tokenizer"},
      {make("weights", good, nullptr, nullptr), "tensor embeddings.word_embeddings.weight has shape [5, 7], expected [5, 8]"},
  };
  for (const Case& c : cases) {
    const std::string m = message(c.dir);
    EXPECT_NE(m.find(c.expect), std::string::npos) << m;
    EXPECT_NE(m.find(c.dir), std::string::npos) << "the message names the file: " << m;
  }
  // A directory with pytorch_model.bin only: the .bin is named, never read,
  // and the message says how to convert it (issue 31, item 8).
  const fs::path bin = make("bin", good, nullptr, nullptr);
  fs::remove(bin / "model.safetensors");
  std::ofstream(bin / "pytorch_model.bin") << "PK\x03\x04 (never read)";
  const std::string m = message(bin.string());
  EXPECT_NE(m.find((bin / "model.safetensors").string() + ": not found; " + (bin / "pytorch_model.bin").string() +
                   " is a PyTorch checkpoint, which ffn does not read"), std::string::npos) << m;
  EXPECT_NE(m.find("AutoModel.from_pretrained('" + bin.string() + "').save_pretrained('" + bin.string() +
                   "', safe_serialization=True)"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// ---- all-MiniLM-L6-v2 against Hugging Face --------------------------------

const SafetensorsFile& golden() {
  static const SafetensorsFile f = read_safetensors(FFN_MINILM_GOLDEN);
  return f;
}
std::vector<std::string> sentences() {
  return nlohmann::json::parse(golden().metadata.at("sentences")).get<std::vector<std::string>>();
}
std::string id3(size_t i) {
  char b[24];
  std::snprintf(b, sizeof b, "%03zu", i);
  return b;
}

// The installed model, or null (the test then says it skipped and why).
// int8_outliers: SentenceLoadOptions::int8_outliers (int8 only).
const SentenceEncoder* model(WeightDtype dtype = WeightDtype::fp32, bool int8_outliers = true,
                             bool int8_attention = true) {
  static std::map<std::tuple<WeightDtype, bool, bool>, std::unique_ptr<SentenceEncoder>> cache;
  const std::string dir = SentenceEncoder::default_model_dir();
  if (!fs::exists(fs::path(dir) / "model.safetensors")) return nullptr;
  auto& m = cache[{dtype, int8_outliers, int8_attention}];
  if (!m) {
    SentenceLoadOptions o;
    o.dtype = dtype;
    o.int8_outliers = int8_outliers;
    o.int8_attention = int8_attention;
    m = std::make_unique<SentenceEncoder>(SentenceEncoder::load(dir, o));
  }
  return m.get();
}
#define REQUIRE_MODEL(m)                                                                                     \
  if (!(m)) GTEST_SKIP() << "all-MiniLM-L6-v2 is not installed at " << SentenceEncoder::default_model_dir() \
                         << " (scripts/setup.sh installs it; FFN_MODEL_DIR overrides)"

TEST(MiniLM, TokenIdsEqualHuggingFaces) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  const auto s = sentences();
  ASSERT_GE(s.size(), 60u);
  EXPECT_EQ(m->max_tokens(), std::stoll(golden().metadata.at("max_seq_length")));
  for (size_t i = 0; i < s.size(); ++i) {
    const auto& want = golden().tensors.at("ids." + id3(i)).data;
    const auto got = m->tokenize(s[i]);
    EXPECT_EQ(std::vector<float>(got.begin(), got.end()), want) << "sentence " << i << ": " << s[i];
  }
}

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t j = 0; j < n; ++j) {
    ab += double(a[j]) * b[j];
    aa += double(a[j]) * a[j];
    bb += double(b[j]) * b[j];
  }
  return ab / std::sqrt(aa * bb);
}

TEST(MiniLM, EachFfnSublayerMatchesTransformers) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  double worst = 0;
  const auto which = nlohmann::json::parse(golden().metadata.at("ffn_sentences")).get<std::vector<int>>();
  for (int64_t l = 0; l < m->encoder().config().layers; ++l)
    for (int si : which) {
      const auto& in = golden().tensors.at("ffn." + std::to_string(l) + ".input." + id3(size_t(si)));
      const auto& want = golden().tensors.at("ffn." + std::to_string(l) + ".output." + id3(size_t(si)));
      std::vector<float> y(in.data.size());
      RunOptions o;
      o.threads = 2;
      m->encoder().ffn_layer(l).forward(in.data.data(), y.data(), Shape::tokens(in.shape[0]), o);
      const Comparison c = compare(y.data(), want.data.data(), y.size());
      worst = std::max(worst, c.max_error);
      EXPECT_TRUE(c.ok(test::kVsTorchY)) << "layer " << l << " sentence " << si << ": " << c.describe();
    }
  std::printf("[ measured ] the six FFN sublayers against transformers: worst scaled error %.2e (tolerance %.0e)\n",
              worst, test::kVsTorchY);
}

TEST(MiniLM, EmbeddingsMatchSentenceTransformers) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  const auto s = sentences();
  const auto& want = golden().tensors.at("embeddings");
  const int64_t d = m->dim();
  ASSERT_EQ(want.shape, (std::vector<int64_t>{int64_t(s.size()), d}));
  EmbedOptions o;
  o.batch = 8;
  o.threads = 2;
  const Array e = m->embed(s, o);
  double worst_cos = 1, worst_abs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const float* g = e.data.data() + i * size_t(d);
    const float* w = want.data.data() + i * size_t(d);
    const double c = cosine(g, w, d);
    double mx = 0;
    for (int64_t j = 0; j < d; ++j) mx = std::max(mx, double(std::fabs(g[j] - w[j])));
    worst_cos = std::min(worst_cos, c);
    worst_abs = std::max(worst_abs, mx);
    EXPECT_GE(c, 0.99999) << "sentence " << i;
    EXPECT_LE(mx, 1e-5) << "sentence " << i;
  }
  std::printf("[ measured ] embeddings against sentence-transformers: worst cosine %.8f, max |difference| %.2e\n",
              worst_cos, worst_abs);
  // Padding has no effect: the same bits one text at a time.
  o.batch = 1;
  EXPECT_EQ(m->embed(s, o).data, e.data);
  // The ranking of the pairs' similarities is the reference's.
  const auto& pairs = golden().tensors.at("pairs");
  std::vector<std::pair<double, double>> sims;  // (ours, reference)
  for (int64_t p = 0; p < pairs.shape[0]; ++p) {
    const size_t a = size_t(pairs.data[size_t(2 * p)]), b = size_t(pairs.data[size_t(2 * p + 1)]);
    sims.push_back({cosine(e.data.data() + a * size_t(d), e.data.data() + b * size_t(d), d),
                    cosine(want.data.data() + a * size_t(d), want.data.data() + b * size_t(d), d)});
  }
  for (size_t i = 0; i < sims.size(); ++i)
    for (size_t j = 0; j < sims.size(); ++j)
      EXPECT_EQ(sims[i].first < sims[j].first, sims[i].second < sims[j].second) << "pairs " << i << " and " << j;
}

// int8 and bf16 FFN weights on real activations: each FFN sublayer and the
// embeddings against fp32 (rel RMS and cosine printed). bf16 meets the
// issue's target (worst cosine ≥ 0.9999). int8 does not (target 0.999): the
// worst texts are the shortest ("." is [CLS] . [SEP]), whose embedding is the
// mean of two or three tokens that carry BERT's outlier features (channels
// 99, 223, 63 at |x| ≈ 30 against a token RMS ≈ 1.5); the measured analysis
// and the fixes that reach 0.999 in simulation (per-256-column W2 scales plus
// the ~5 outlier input channels per layer in fp32) are in
// bench/results/2026-11-23-minilm-int8.md (bench/analysis/minilm_int8_analysis.py).
// What this test holds int8 to is what it measures today (worst 0.99526,
// mean 0.99921 on the AMX Xeon), less the ~2e-4 by which one flipped
// rounding moves a text on another ISA's float attention: worst ≥ 0.994,
// mean ≥ 0.9985; a broken int8 product is far below (cosine < 0.9).
// With the attention's projections in int8 too (the default since issue 34;
// on the int16 × int8 kernels: scalar, AVX2) the outlier variant measured
// worst 0.999033, mean 0.999609 on the Zen 3 (AVX2); FFN-only 0.999146 /
// 0.999696 (outliers by max |x| > 6; by |x| / rms(row) > 8 since 2026-11-29,
// 0.999042 / 0.999171 worst on the AMX Xeon), plain FFN-only 0.99526; plain with int8 attention 0.9943 / 0.99873
// is held to worst ≥ 0.993, mean ≥ 0.998 (the same ~1e-3 margin).
TEST(MiniLM, LowPrecisionFfnsOnRealActivations) {
  const SentenceEncoder* m32 = model();
  REQUIRE_MODEL(m32);
  const auto s = sentences();
  EmbedOptions o;
  o.threads = 2;
  const Array ref = m32->embed(s, o);
  const int64_t d = m32->dim();
  const auto which = nlohmann::json::parse(golden().metadata.at("ffn_sentences")).get<std::vector<int>>();
  // The targets: embedding cosine >= 0.9999 (bf16), >= 0.999 (int8,
  // with the outlier input channels kept in fp32; plain per-token int8 is
  // measured too, and held to what it reached before: worst 0.9953).
  struct Target {
    WeightDtype dtype;
    bool outliers, attention;
    double worst, mean;
  };
  for (const Target& t : {Target{WeightDtype::bf16, false, false, 0.9999, 0.9999},
                          Target{WeightDtype::int8, true, true, 0.999, 0.9995},
                          Target{WeightDtype::int8, true, false, 0.999, 0.9995},
                          Target{WeightDtype::int8, false, false, 0.995, 0.999},
                          Target{WeightDtype::int8, false, true, 0.993, 0.998}}) {
    const SentenceEncoder* m = model(t.dtype, t.outliers, t.attention);
    std::printf("[ measured ] FFN weights %s%s%s:", std::string(to_string(t.dtype)).c_str(),
                t.dtype != WeightDtype::int8 ? "" : t.outliers ? " (outlier input channels in fp32)" : " (plain)",
                t.attention ? ", attention projections int8" : "");
    if (t.dtype == WeightDtype::int8 && t.outliers)
      for (const auto& c : m->fp32_input_channels()) {
        std::printf(" {");
        for (size_t i = 0; i < c.size(); ++i) std::printf(i ? ",%lld" : "%lld", (long long)c[i]);
        std::printf("}");
      }
    for (int64_t l = 0; l < m->encoder().config().layers; ++l) {
      const auto& in = golden().tensors.at("ffn." + std::to_string(l) + ".input." + id3(size_t(which[0])));
      std::vector<float> y(in.data.size()), y32(in.data.size());
      m->encoder().ffn_layer(l).forward(in.data.data(), y.data(), Shape::tokens(in.shape[0]));
      m32->encoder().ffn_layer(l).forward(in.data.data(), y32.data(), Shape::tokens(in.shape[0]));
      const Agreement a = agreement(y.data(), y32.data(), y.size());
      std::printf(" layer %lld rel RMS %.1e cos %.6f;", (long long)l, a.rel_rms, a.cosine);
    }
    const Array e = m->embed(s, o);
    double worst = 1, mean = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      const double c = cosine(e.data.data() + i * size_t(d), ref.data.data() + i * size_t(d), d);
      worst = std::min(worst, c);
      mean += c / double(s.size());
    }
    std::printf(" embeddings: worst cosine %.6f, mean %.6f\n", worst, mean);
    EXPECT_GE(worst, t.worst) << to_string(t.dtype) << " outliers " << t.outliers << " attention " << t.attention;
    EXPECT_GE(mean, t.mean) << to_string(t.dtype) << " outliers " << t.outliers << " attention " << t.attention;
  }
  // Every layer of all-MiniLM-L6-v2 has outlier input channels (5–7 of 384
  // by |x| / rms(row) > 8; channel 99 in each), so none may come back empty.
  for (const auto& c : model(WeightDtype::int8)->fp32_input_channels()) {
    EXPECT_GE(c.size(), 2u);
    EXPECT_LE(c.size(), 16u);
    EXPECT_TRUE(std::find(c.begin(), c.end(), 99) != c.end());
  }
}

// EncoderRunOptions::ffn_input sees each FFN sublayer's input: the golden
// files' inputs of Hugging Face's BertOutput (intermediate's input), layer by layer.
TEST(MiniLM, FfnInputObserverSeesEachSublayerInput) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  const auto which = nlohmann::json::parse(golden().metadata.at("ffn_sentences")).get<std::vector<int>>();
  const std::vector<int32_t> ids = m->tokenize(sentences()[size_t(which[0])]);
  const std::vector<float> h = m->hidden(ids);  // for the embedding input, run the same way below
  int64_t calls = 0;
  EncoderRunOptions o;
  o.ffn_input = [&](int64_t l, const float* x, int64_t n) {
    EXPECT_EQ(l, calls++);
    const auto& want = golden().tensors.at("ffn." + std::to_string(l) + ".input." + id3(size_t(which[0])));
    ASSERT_EQ(n * m->dim(), int64_t(want.data.size()));
    const Comparison c = compare(x, want.data.data(), want.data.size());
    EXPECT_TRUE(c.ok(1e-5)) << "layer " << l << ": " << c.describe();
  };
  const std::vector<float> h2 = m->hidden(ids, 0, o);
  EXPECT_EQ(calls, m->encoder().config().layers);
  EXPECT_EQ(h2, h);
}

// A model directory is trusted only as far as its files go (issue 31, item
// 8): copies of the installed model (model.safetensors linked, not copied)
// with one file edited or removed load with a note naming the file, in
// An embedding family is a name table (issue 63; src/models/encoder_family.hpp):
// a test-only family "toybert", whose file names every tensor otherwise,
// loads a renamed copy of all-MiniLM-L6-v2 and gives its embeddings bit for
// bit. The family took one edit: its row (model_type and table) below.
const models::EncoderNameTable kToyEncoderNames{{
    "tok", "pos", "seg", "emb_norm.w", "emb_norm.b",
    "blk{L}.wq", "blk{L}.bq", "blk{L}.wk", "blk{L}.bk", "blk{L}.wv", "blk{L}.bv", "blk{L}.wo", "blk{L}.bo",
    "blk{L}.ln1.w", "blk{L}.ln1.b", "blk{L}.up.w", "blk{L}.up.b", "blk{L}.down.w", "blk{L}.down.b",
    "blk{L}.ln2.w", "blk{L}.ln2.b",
}};

TEST(MiniLM, AToyEmbeddingFamilyIsANameTable) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  if (!models::find_encoder_family("toybert")) models::register_encoder_family({"toybert", &kToyEncoderNames, "", models::bert_config});
  EXPECT_THROW(models::register_encoder_family({"toybert", &kToyEncoderNames, "", models::bert_config}), Error);
  EXPECT_THROW(models::register_encoder_family({"toybert2", &kToyEncoderNames, ""}), Error);  // no config reader
  const fs::path src = SentenceEncoder::default_model_dir();
  const fs::path d = test::scratch_dir("toy_family");
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "model.safetensors" && e.path().filename() != "config.json")
      fs::copy(e.path(), d / e.path().filename(), fs::copy_options::recursive);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src / "config.json"));
  cfg["model_type"] = "toybert";
  std::ofstream(d / "config.json") << cfg.dump();
  // BERT's tensors under the toy names (the file's other tensors, the pooler's, left out).
  const io::SafetensorsReader bert((src / "model.safetensors").string());
  const models::EncoderNameTable& from = *models::find_encoder_family("bert")->names;
  const std::string pre = bert.has("bert." + from.name(models::EncTensor::word)) ? "bert." : "";
  SafetensorsFile toy;
  const int64_t layers = cfg["num_hidden_layers"].get<int64_t>();
  for (size_t t = 0; t < size_t(models::EncTensor::count); ++t) {
    if (!from.names[t]) continue;  // a tensor BERT does not have (MPNet's relative bias)
    const bool per_layer = std::string(from.names[t]).find("{L}") != std::string::npos;
    for (int64_t l = 0; l < (per_layer ? layers : 1); ++l) {
      const std::string name = pre + from.name(models::EncTensor(t), l);
      ASSERT_TRUE(bert.has(name)) << name;
      NamedTensor& x = toy.tensors[kToyEncoderNames.name(models::EncTensor(t), l)];
      x.shape = bert.info(name).shape;
      x.data = bert.read_f32(name);
    }
  }
  write_safetensors((d / "model.safetensors").string(), toy);
  const std::vector<std::string> texts = {"A toy family reads the same weights.", "under other names"};
  const Array want = m->embed(texts), got = SentenceEncoder::load(d.string()).embed(texts);
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_EQ(0, std::memcmp(got.data.data(), want.data.data(), want.data.size() * sizeof(float)))
      << "the toy family's embeddings differ from BERT's";
  // A model_type no family has is refused, naming the ones there are.
  cfg["model_type"] = "nosuchbert";
  std::ofstream(d / "config.json") << cfg.dump();
  try {
    SentenceEncoder::load(d.string());
    ADD_FAILURE() << "model_type nosuchbert was loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (d / "config.json").string() + ": model_type 'nosuchbert' is not supported (bert, mpnet, xlm-roberta, modernbert, toybert)");
  }
}

// SentenceEncoder::load_notes (the library prints nothing); the installed
// model itself has none.
TEST(MiniLM, WhatTheFilesLeaveUnsaidIsNoted) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  EXPECT_TRUE(m->load_notes().empty()) << m->load_notes().front();
  const fs::path src = SentenceEncoder::default_model_dir();
  const fs::path base = test::scratch_dir("model_notes");
  auto copy = [&](const std::string& name) {
    const fs::path d = base / name;
    fs::remove_all(d);
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(src)) {
      const fs::path to = d / e.path().filename();
      if (e.path().filename() == "model.safetensors") fs::create_symlink(fs::absolute(e.path()), to);
      else fs::copy(e.path(), to, fs::copy_options::recursive);
    }
    return d;
  };
  auto notes = [](const fs::path& d) { return SentenceEncoder::load(d.string()).load_notes(); };
  auto expect_one = [](const std::vector<std::string>& got, const std::string& want) {
    ASSERT_EQ(got.size(), 1u) << (got.empty() ? "no note" : got[0] + " and more");
    EXPECT_EQ(got[0], want);
  };

  // num_hidden_layers 6 -> 4: runs 4 of the file's 6 layers, and says so.
  const fs::path layers = copy("layers");
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src / "config.json"));
  ASSERT_EQ(cfg["num_hidden_layers"], 6);
  cfg["num_hidden_layers"] = 4;
  std::ofstream(layers / "config.json") << cfg.dump();
  expect_one(notes(layers), (layers / "config.json").string() + ": num_hidden_layers is 4, but " +
                                (layers / "model.safetensors").string() +
                                " holds 6 layers; the tensors of layers 4..5 are not used");
  cfg["num_hidden_layers"] = 5;
  std::ofstream(layers / "config.json") << cfg.dump();
  expect_one(notes(layers), (layers / "config.json").string() + ": num_hidden_layers is 5, but " +
                                (layers / "model.safetensors").string() +
                                " holds 6 layers; the tensors of layer 5 are not used");

  // No 1_Pooling/config.json: mean pooling, noted; the embeddings are the
  // model's (which pools by the mean).
  const fs::path pooling = copy("pooling");
  fs::remove_all(pooling / "1_Pooling");
  expect_one(notes(pooling), (pooling / "1_Pooling" / "config.json").string() + ": not found; assumed mean pooling");
  const auto s = sentences();
  EXPECT_EQ(SentenceEncoder::load(pooling.string()).embed(s).data, m->embed(s).data);

  // modules.json without a Pooling module, and no modules.json at all.
  const fs::path modules = copy("modules");
  nlohmann::json mods = nlohmann::json::parse(std::ifstream(src / "modules.json"));
  mods.erase(1);  // {"type": "sentence_transformers.models.Pooling", ...}
  std::ofstream(modules / "modules.json") << mods.dump();
  expect_one(notes(modules), (modules / "modules.json").string() + ": no Pooling module; assumed mean pooling");
  fs::remove(modules / "modules.json");
  expect_one(notes(modules), (modules / "modules.json").string() +
                                 ": not found; assumed L2-normalized embeddings (a Normalize module)");
}

// EmbedOptions::interrupted (issue 31, item 3: Ctrl-C in Python): asked before
// each batch and inside the encoder; a stop at the second question throws
// Interrupted there and the next call gives the same bits.
TEST(MiniLM, EmbedStopsWhenAskedAndGivesTheSameBitsAfter) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  const auto s = sentences();
  EmbedOptions o;
  o.batch = 8;
  const Array want = m->embed(s, o);
  int asked = 0, stop_at = 0;
  o.interrupted = [&] { return ++asked == stop_at; };
  EXPECT_EQ(m->embed(s, o).data, want.data);
  const int batches = int((s.size() + 7) / 8);
  EXPECT_GE(asked, batches * (1 + 2 * int(m->encoder().config().layers)));
  for (stop_at = 1; stop_at <= 3; ++stop_at) {
    asked = 0;
    EXPECT_THROW(m->embed(s, o), Interrupted);
    EXPECT_EQ(asked, stop_at);
  }
  o.interrupted = nullptr;
  EXPECT_EQ(m->embed(s, o).data, want.data);
}

// ---- ffn embed ---------------------------------------------------------------

TEST(EmbedCli, FileAndSimilarityAgreeWithTheLibrary) {
  const SentenceEncoder* m = model();
  REQUIRE_MODEL(m);
  const fs::path dir = test::scratch_dir("embed_cli");
  const std::vector<std::string> texts{"A man is eating food.", "", "Caf\xc3\xa9 \xe4\xb8\x80 \xf0\x9f\x98\x80!"};
  {
    std::ofstream f(dir / "in.txt", std::ios::binary);
    f << texts[0] << "\r\n" << texts[1] << "\n" << texts[2];  // CRLF, an empty line, no final newline
  }
  const auto r = test::run_ffn("embed --input-file " + (dir / "in.txt").string() + " --output " + (dir / "e.npy").string() +
                                   " --batch 2 --threads 2",
                               dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const Array e = read_npy((dir / "e.npy").string());
  EXPECT_EQ(e.shape, (std::vector<int64_t>{3, m->dim()}));
  EXPECT_EQ(e.data, m->embed(texts).data);
  const auto s = test::run_ffn("embed --similarity \"A man is eating food.\" \"A man is eating a piece of bread.\"", dir);
  ASSERT_EQ(s.status, 0) << s.err;
  const Array two = m->embed({"A man is eating food.", "A man is eating a piece of bread."});
  EXPECT_NEAR(std::stod(s.out), cosine(two.data.data(), two.data.data() + m->dim(), m->dim()), 1e-6);
  const auto p = test::run_ffn("embed hello", dir);  // no --output: one line of dim numbers
  ASSERT_EQ(p.status, 0);
  EXPECT_EQ(std::count(p.out.begin(), p.out.end(), ' '), m->dim() - 1);
}

TEST(EmbedCli, BadInputIsOneLineExitTwoAndNothingWritten) {
  const fs::path dir = test::scratch_dir("embed_bad");
  std::ofstream(dir / "bad.txt", std::ios::binary) << "fine\nnot \xff utf-8\n";
  const std::string out = (dir / "e.npy").string();
  const bool have = model() != nullptr;
  struct Bad {
    std::string args, expect;
    bool needs_model;
  } cases[] = {
      {"embed --model " + (dir / "none").string() + " x --output " + out, "not a model directory", false},
      {"embed --input-file " + (dir / "bad.txt").string() + " --output " + out, "line 2: text: not valid UTF-8 at byte 4", true},
      {"embed x --input-file " + (dir / "bad.txt").string(), "not both", false},
      {"embed --output " + out, "give the texts", false},
      {"embed --similarity a", "--similarity", false},
      {"embed --similarity a b --output " + out, "--similarity", false},
      {"embed x --max-tokens 600 --output " + out, "--max-tokens", true},
      {"embed x --dtype fp16 --output " + out, "--dtype", false},
      {"embed x --batch 0 --output " + out, "--batch", false},
      {"embed x --dtype int8 --int8-outliers maybe --output " + out, "--int8-outliers: expected on or off", false},
      {"embed x --int8-outliers off --output " + out, "--int8-outliers: only with --dtype int8", false},
      {"embed x --dtype int8 --int8-attention maybe --output " + out, "--int8-attention: expected on or off", false},
      {"embed x --int8-attention on --output " + out, "--int8-attention: only with --dtype int8", false},
      {"embed --input-file " + (dir / "bad.txt").string() + " --output " + (dir / "bad.txt").string(), "refusing to overwrite", false},
      {"embed --input-file " + (dir / "missing.txt").string() + " --output " + out, "missing.txt", true},
  };
  for (const Bad& b : cases) {
    if (b.needs_model && !have) {
      std::printf("[ skipped  ] %s: all-MiniLM-L6-v2 not installed\n", b.args.c_str());
      continue;
    }
    const auto r = test::run_ffn(b.args, dir);
    EXPECT_EQ(r.status, 2) << b.args << "\n" << r.err;
    EXPECT_NE(r.err.find(b.expect), std::string::npos) << b.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out)) << b.args;
  }
  EXPECT_EQ(test::slurp(dir / "bad.txt"), "fine\nnot \xff utf-8\n") << "the input is untouched";
}

}  // namespace
}  // namespace ffn
