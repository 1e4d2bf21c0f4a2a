// The causal LM families beside LLaMA, each a StackSpec and a name table
// (src/models/arch_*.cpp), against transformers 4.46.3 on random weights
// (tests/data/families, scripts/make_family_golden.py): LLaMA with
// attention_bias, Qwen2 (Q|K|V biases) with GQA 3 tied and MHA untied,
// Mistral with a sliding window of 5 keys (shorter than the prompts) and one
// key/value head, Llama 3.1's rotary scaling (config.json's rope_scaling, and
// a GGUF's rope_freqs.weight as llama.cpp's converter writes it), Gemma 2 (every field its spec sets: (1 + w) norms before
// and after each sublayer, GELU-tanh gating, the embedding scale, the query
// scale, attention and final soft-caps, windows on the even layers,
// head_dim ≠ d_model / heads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/io.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(FFN_FAMILIES_DIR) + "/cases.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}
const SafetensorsFile& golden() {
  static const SafetensorsFile f = read_safetensors(std::string(FFN_FAMILIES_DIR) + "/cases.safetensors");
  return f;
}
std::string model_dir(const std::string& name) { return std::string(FFN_FAMILIES_DIR) + "/" + name; }

// The largest |ffn − transformers| over each position's logits, as a share of
// that position's largest |logit| (the bound of the LLaMA tests: 2e-3).
float worst_share(const std::vector<float>& got, const NamedTensor& want, int64_t V) {
  float worst = 0;
  for (size_t p = 0; p * size_t(V) < want.data.size(); ++p) {
    float mx = 0, err = 0;
    for (int64_t v = 0; v < V; ++v) {
      mx = std::max(mx, std::fabs(want.data[p * V + v]));
      err = std::max(err, std::fabs(got[p * V + v] - want.data[p * V + v]));
    }
    worst = std::max(worst, err / mx);
  }
  return worst;
}

// Each prompt's logits within the bound of transformers' (`logits`, "NAME.K")
// and its greedy continuation `greedy[k]` token for token.
void expect_transformers(const CausalLM& m, const std::vector<std::vector<int32_t>>& prompts,
                         const std::vector<std::vector<int32_t>>& greedy, const SafetensorsFile& logits,
                         const std::string& name) {
  for (size_t k = 0; k < prompts.size(); ++k) {
    EXPECT_LE(worst_share(m.logits(prompts[k]), logits.tensors.at(name + "." + std::to_string(k)), m.config().vocab), 2e-3f)
        << "prompt " << k;
    SamplingOptions s;
    s.max_new_tokens = int64_t(greedy[k].size());
    EXPECT_EQ(m.generate(prompts[k], s), greedy[k]) << "prompt " << k;
  }
}

TEST(Families, LogitsMatchTransformers) {
  ASSERT_EQ(cases()["models"].size(), 9u);
  for (const auto& [name, c] : cases()["models"].items()) {
    SCOPED_TRACE(name);
    const CausalLM m = CausalLM::load(model_dir(name));
    const int64_t V = m.config().vocab;
    const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    for (size_t k = 0; k < prompts.size(); ++k) {
      const NamedTensor& want = golden().tensors.at(name + "." + std::to_string(k));
      ASSERT_EQ(want.shape, (std::vector<int64_t>{int64_t(prompts[k].size()), V}));
      for (Path path : {Path::automatic, Path::reference}) {
        RunOptions o;
        o.path = path;
        EXPECT_LE(worst_share(m.logits(prompts[k], o), want, V), 2e-3f)
            << "prompt " << k << (path == Path::reference ? " (reference)" : "");
      }
    }
  }
}

TEST(Families, GreedyMatchesTransformersGenerate) {
  for (const auto& [name, c] : cases()["models"].items()) {
    SCOPED_TRACE(name);
    const CausalLM m = CausalLM::load(model_dir(name));
    const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    const auto want = c["greedy"].get<std::vector<std::vector<int32_t>>>();
    for (size_t k = 0; k < prompts.size(); ++k) {
      SamplingOptions s;
      s.max_new_tokens = int64_t(want[k].size());
      EXPECT_EQ(m.generate(prompts[k], s), want[k]) << "prompt " << k;
    }
  }
}

// The tolerance catches a spec that drops a family's feature: the same
// directory read as plain LLaMA (no biases, no window) misses by far more
// than 2e-3.
TEST(Families, TheBoundCatchesAMissingFeature) {
  for (const std::string name : {"llama_bias", "qwen2_gqa3", "mistral_window", "llama3_rope"}) {  // (Gemma 2: below)
    SCOPED_TRACE(name);
    const fs::path dir = test::scratch_dir("families_" + name);
    for (const char* f : {"model.safetensors", "generation_config.json"}) fs::copy_file(fs::path(model_dir(name)) / f, dir / f);
    std::ifstream in(fs::path(model_dir(name)) / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["model_type"] = "llama";
    j["attention_bias"] = false;
    j.erase("use_sliding_window");
    j.erase("sliding_window");
    j.erase("rope_scaling");
    std::ofstream(dir / "config.json") << j.dump();
    const CausalLM m = CausalLM::load(dir.string());
    const auto prompt = cases()["models"][name]["prompts"][2].get<std::vector<int32_t>>();
    EXPECT_GT(worst_share(m.logits(prompt), golden().tensors.at(name + ".2"), m.config().vocab), 2e-2f);
    fs::remove_all(dir);
  }
}

// Llama 3.1's rule from a GGUF: llama.cpp's converter turns config.json's
// rope_scaling into a factor per frequency (rope_freqs.weight), which divides
// the frequency; the logits are transformers' (from the HF directory's
// rope_scaling) within the bound, and the greedy tokens the same.
TEST(Families, Llama3RopeFreqsFromGgufMatchTransformers) {
  const CausalLM m = CausalLM::load(std::string(FFN_FAMILIES_DIR) + "/llama3_rope.gguf");
  const auto& c = cases()["models"]["llama3_rope"];
  const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
  const auto want = c["greedy"].get<std::vector<std::vector<int32_t>>>();
  expect_transformers(m, prompts, want, golden(), "llama3_rope");
}

// Each of Gemma 2's settings moves its logits by more than the bound: its
// config with the setting taken out misses transformers' logits by over 2e-2
// somewhere, so the match above is not luck.
TEST(Families, EveryGemma2SettingCounts) {
  const std::vector<std::pair<const char*, nlohmann::json>> changes{
      {"attn_logit_softcapping", nullptr}, {"final_logit_softcapping", nullptr}, {"sliding_window", nullptr},
      {"query_pre_attn_scalar", 16}};
  for (const auto& [key, value] : changes) {
    SCOPED_TRACE(key);
    const fs::path dir = test::scratch_dir(std::string("families_gemma2_") + key);
    fs::copy_file(fs::path(model_dir("gemma2")) / "model.safetensors", dir / "model.safetensors");
    std::ifstream in(fs::path(model_dir("gemma2")) / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j[key] = value;
    std::ofstream(dir / "config.json") << j.dump();
    const CausalLM m = CausalLM::load(dir.string());
    const auto prompt = cases()["models"]["gemma2"]["prompts"][2].get<std::vector<int32_t>>();
    EXPECT_GT(worst_share(m.logits(prompt), golden().tensors.at("gemma2.2"), m.config().vocab), 2e-2f);
    fs::remove_all(dir);
  }
}

// What a family's config asks for and ffn does not run is refused, naming
// it, never run without it.
TEST(Families, UnsupportedSpecFeaturesAreRefusedByName) {
  const fs::path dir = test::scratch_dir("families_window");
  fs::copy_file(fs::path(model_dir("qwen2_gqa3")) / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(fs::path(model_dir("qwen2_gqa3")) / "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["use_sliding_window"] = true;
  j["sliding_window"] = 16;
  j["max_window_layers"] = 1;
  std::ofstream(dir / "config.json") << j.dump();
  expect_error([&] { CausalLM::load(dir.string()); }, "config.json: use_sliding_window is true, which transformers runs two ways");
  j["use_sliding_window"] = false;
  j["model_type"] = "llama";
  j["mlp_bias"] = true;
  std::ofstream(dir / "config.json") << j.dump();
  expect_error([&] { CausalLM::load(dir.string()); }, "mlp_bias is not supported");
  j["mlp_bias"] = false;
  j["rope_scaling"] = {{"rope_type", 3}};
  std::ofstream(dir / "config.json") << j.dump();
  expect_error([&] { CausalLM::load(dir.string()); }, "rope_scaling {\"rope_type\":3}: rope_type is not a string");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0}};
  std::ofstream(dir / "config.json") << j.dump();
  expect_error([&] { CausalLM::load(dir.string()); }, dir.string() + ": model spec: attention.rope: llama3 scaling needs");
  fs::remove_all(dir);
}

// The families as llama.cpp's own converter writes them
// (scripts/convert_family_golden.py: convert_hf_to_gguf.py of the
// llama-cpp-python sdist on the Hugging Face directories, with a small
// SentencePiece tokenizer.model each): LLaMA with biases, Llama 3.1's rope
// scaling, Gemma 2, Phi-3 and its longrope. transformers' logits within the
// bound and its greedy tokens; the converter's SentencePiece vocabulary is
// read (BOS before a text prompt).
TEST(Families, ConvertedByLlamaCppMatchTransformers) {
  for (const std::string name : {"llama_bias", "llama3_rope", "gemma2_gguf", "phi3", "phi3_longrope"}) {
    SCOPED_TRACE(name);
    const CausalLM m = CausalLM::load(model_dir(name) + ".converted.gguf");
    ASSERT_NE(m.tokenizer(), nullptr);
    EXPECT_EQ(m.tokenizer()->vocab_size(), m.config().vocab);
    EXPECT_TRUE(m.config().add_bos);
    EXPECT_EQ(m.encode_prompt("w0").front(), 1);
    const auto& c = cases()["models"][name];
    const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    const auto want = c["greedy"].get<std::vector<std::vector<int32_t>>>();
    expect_transformers(m, prompts, want, golden(), name);
  }
}

// The 4th token of prompt 2's greedy continuation, the first time it comes
// (as scripts/make_family_golden.py chose qwen2_mha.gguf's eot id).
int32_t fourth_new_token(const std::vector<int32_t>& cont) {
  for (size_t i = 3; i < cont.size(); ++i)
    if (cont[i] != 2 && std::find(cont.begin(), cont.begin() + std::ptrdiff_t(i), cont[i]) == cont.begin() + std::ptrdiff_t(i))
      return cont[i];
  return -1;
}

// Qwen2 and Gemma 2 from GGUF, as llama.cpp's converter writes them (their
// metadata; W_Q and W_K rows in transformers' order; Qwen2's Q|K|V biases,
// GQA 3 tied and MHA untied; Gemma 2's norms as 1 + w, head_dim as
// key_length, soft-caps and window as keys): transformers' logits within the
// bound and its greedy tokens.
TEST(Families, FromGgufMatchTransformers) {
  for (const std::string name : {"qwen2_gqa3", "qwen2_mha", "gemma2_gguf", "phi3", "phi3_longrope"}) {
    SCOPED_TRACE(name);
    const CausalLM m = CausalLM::load(std::string(FFN_FAMILIES_DIR) + "/" + name + ".gguf");
    const auto& c = cases()["models"][name];
    const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    auto want = c["greedy"].get<std::vector<std::vector<int32_t>>>();
    // qwen2_mha.gguf declares an eot id that the Hugging Face model does
    // not: its continuation ends there (EndIdsEndGeneration checks it).
    if (name == "qwen2_mha") want[2].resize(4);
    expect_transformers(m, prompts, want, golden(), name);
  }
}

// Every end id ends generation: a GGUF's EOS and eot ids, and config.json's
// and generation_config.json's eos_token_id lists (as transformers' generate
// stops at every id of generation_config's list).
TEST(Families, EndIdsEndGeneration) {
  const auto& c = cases()["models"];
  {
    const CausalLM m = CausalLM::load(std::string(FFN_FAMILIES_DIR) + "/qwen2_mha.gguf");
    const auto prompt = c["qwen2_mha"]["prompts"][2].get<std::vector<int32_t>>();
    const auto cont = c["qwen2_mha"]["greedy"][2].get<std::vector<int32_t>>();
    const int32_t eot = fourth_new_token(cont);
    ASSERT_GE(eot, 0);
    EXPECT_EQ(m.config().eos, 2);
    EXPECT_EQ(m.config().end_ids, (std::vector<int64_t>{2, eot}));
    SamplingOptions s;
    s.max_new_tokens = 12;
    EXPECT_EQ(m.generate(prompt, s), std::vector<int32_t>(cont.begin(), cont.begin() + 4));
    s.stop_at_eos = false;
    EXPECT_EQ(m.generate(prompt, s).size(), 12u);
  }
  {
    const fs::path dir = test::scratch_dir("families_end_ids");
    fs::copy_file(fs::path(model_dir("qwen2_gqa3")) / "model.safetensors", dir / "model.safetensors");
    fs::copy_file(fs::path(model_dir("qwen2_gqa3")) / "config.json", dir / "config.json");
    const auto prompt = c["qwen2_gqa3"]["prompts"][1].get<std::vector<int32_t>>();
    const auto cont = c["qwen2_gqa3"]["greedy"][1].get<std::vector<int32_t>>();
    ASSERT_GE(cont.size(), 3u);
    std::ofstream(dir / "generation_config.json") << nlohmann::json{{"eos_token_id", {2, cont[2], 2}}}.dump();
    const CausalLM m = CausalLM::load(dir.string());
    EXPECT_EQ(m.config().end_ids, (std::vector<int64_t>{2, cont[2]}));
    SamplingOptions s;
    s.max_new_tokens = 12;
    const auto got = m.generate(prompt, s);
    const auto end = std::find(cont.begin(), cont.end(), cont[2]) + 1;
    EXPECT_EQ(got, std::vector<int32_t>(cont.begin(), end));
    fs::remove_all(dir);
  }
}

// A checkpoint sharded as Hugging Face saves large models (model.safetensors
// .index.json and its files): the same bits as the one file; a bad index gets
// one line naming it and the entry.
TEST(Families, ShardedSafetensorsAreTheOneFile) {
  const std::string name = "llama_bias";
  const fs::path dir = test::scratch_dir("families_sharded");
  fs::copy_file(fs::path(model_dir(name)) / "config.json", dir / "config.json");
  const SafetensorsFile whole = read_safetensors((fs::path(model_dir(name)) / "model.safetensors").string());
  SafetensorsFile a, b;
  nlohmann::json map = nlohmann::json::object();
  size_t i = 0;
  for (const auto& [n, t] : whole.tensors) {
    (i++ % 2 ? b : a).tensors[n] = t;
    map[n] = i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors((dir / "model-00001-of-00002.safetensors").string(), a);
  write_safetensors((dir / "model-00002-of-00002.safetensors").string(), b);
  auto write_index = [&](const nlohmann::json& m) {
    std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", m}}.dump();
  };
  write_index(map);
  const auto prompt = cases()["models"][name]["prompts"][2].get<std::vector<int32_t>>();
  const std::vector<float> want = CausalLM::load(model_dir(name)).logits(prompt);
  const std::vector<float> got = CausalLM::load(dir.string()).logits(prompt);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
  const std::string index = (dir / "model.safetensors.index.json").string();
  const std::string first = whole.tensors.begin()->first;
  nlohmann::json bad = map;
  bad[first] = "model-00002-of-00002.safetensors";
  write_index(bad);
  expect_error([&] { CausalLM::load(dir.string()); },
               index + ": weight_map puts tensor " + first + " in model-00002-of-00002.safetensors, which does not hold it");
  bad[first] = "../model.safetensors";
  write_index(bad);
  expect_error([&] { CausalLM::load(dir.string()); }, index + ": weight_map[\"" + first + "\"] is \"../model.safetensors\"");
  bad[first] = "model-00003-of-00002.safetensors";
  write_index(bad);
  expect_error([&] { CausalLM::load(dir.string()); }, "model-00003-of-00002.safetensors, which is missing");
  bad = map;
  bad.erase(first);
  write_index(bad);
  expect_error([&] { CausalLM::load(dir.string()); }, "missing tensor " + first);
  fs::remove_all(dir);
}

// Qwen3 against transformers 4.51 (scripts/make_qwen3_golden.py, run in a
// developer-only torch 2 environment): per-head q/k norms before the
// rotation, head_dim ≠ d / heads, GQA 2 tied and GQA 3 untied; from the
// Hugging Face directory and from the GGUF as the converter writes it.
// Logits within the bound at every position, greedy tokens identical; the
// models without their q/k norms miss by far more.
TEST(Families, Qwen3MatchesTransformers) {
  std::ifstream in(std::string(FFN_FAMILIES_DIR) + "/qwen3_cases.json");
  const nlohmann::json q3 = nlohmann::json::parse(in);
  const SafetensorsFile want = read_safetensors(std::string(FFN_FAMILIES_DIR) + "/qwen3_cases.safetensors");
  ASSERT_EQ(q3["models"].size(), 2u);
  for (const auto& [name, c] : q3["models"].items()) {
    const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    const auto greedy = c["greedy"].get<std::vector<std::vector<int32_t>>>();
    for (const std::string path : {model_dir(name), model_dir(name) + ".gguf"}) {
      SCOPED_TRACE(path);
      const CausalLM m = CausalLM::load(path);
      expect_transformers(m, prompts, greedy, want, name);
    }
    // Without the q/k norms (γ = 1 and no normalization are not the same: γ
    // is drawn at random, so take the norms out of the config's model type).
    const fs::path dir = test::scratch_dir("families_" + name);
    fs::copy_file(fs::path(model_dir(name)) / "model.safetensors", dir / "model.safetensors");
    std::ifstream cin(fs::path(model_dir(name)) / "config.json");
    nlohmann::json j = nlohmann::json::parse(cin);
    j["model_type"] = "llama";
    std::ofstream(dir / "config.json") << j.dump();
    const CausalLM plain = CausalLM::load(dir.string());
    EXPECT_GT(worst_share(plain.logits(prompts[2]), want.tensors.at(name + ".2"), plain.config().vocab), 2e-2f);
    fs::remove_all(dir);
  }
}

// Native compute on each family's quantized GGUF
// (scripts/make_family_quant_golden.py: Q8_0, Q4_0 and Q5_0 matrices, a
// Q|K|V of two types, Phi-3's fused ones): the logits of ffn's float32
// compute on the same file within the K-quant issue's bound (5e-3 of each
// position's largest |logit|; 16-bit activations), the blocks kept (a third
// of the float32 bytes or less), the same bits on 1 and 2 threads and step by
// step. (Top-1 agreement on random weights measures only how flat their
// logits are, so it is not asked.)
TEST(Families, NativeComputeOnQuantizedFilesIsWithinTheBound) {
  for (const std::string name : {"qwen2_q", "qwen3_q", "gemma2_q", "phi3_q"}) {
    SCOPED_TRACE(name);
    const std::string path = model_dir(name) + ".gguf";
    const CausalLM native = CausalLM::load(path);
    CausalLMLoadOptions fp;
    fp.compute = LMCompute::fp32;
    const CausalLM ref = CausalLM::load(path, fp);
    ASSERT_TRUE(native.quantized());
    EXPECT_LT(native.weight_bytes() * 3, ref.weight_bytes());
    const int64_t V = native.config().vocab;
    std::vector<int32_t> ids;
    for (int i = 0; i < 23; ++i) ids.push_back(int32_t((i * 37 + 5) % V));
    RunOptions one, two;
    one.threads = 1;
    two.threads = 2;
    const std::vector<float> got = native.logits(ids, one), want = ref.logits(ids, one);
    float worst = 0.0f;
    for (size_t p = 0; p < ids.size(); ++p) {
      float mx = 0.0f, err = 0.0f;
      for (int64_t v = 0; v < V; ++v) {
        mx = std::max(mx, std::fabs(want[p * size_t(V) + size_t(v)]));
        err = std::max(err, std::fabs(got[p * size_t(V) + size_t(v)] - want[p * size_t(V) + size_t(v)]));
      }
      worst = std::max(worst, err / mx);
    }
    std::printf("[ INFO     ] %s: native against float32 compute: worst %.2e of the largest |logit|\n", name.c_str(), worst);
    EXPECT_LE(worst, 5e-3f);
    EXPECT_GT(worst, 0.0f);  // the blocks ran, not a float32 copy of them
    EXPECT_EQ(0, std::memcmp(native.logits(ids, two).data(), got.data(), got.size() * 4));
    CausalLMState st = native.start(1, int64_t(ids.size()));
    std::vector<float> lg(static_cast<size_t>(V));
    for (size_t i = 0; i < ids.size(); ++i) {
      native.extend(st, &ids[i], {1}, lg.data(), false, two);
      ASSERT_EQ(0, std::memcmp(lg.data(), got.data() + i * size_t(V), size_t(V) * 4)) << "step " << i;
    }
  }
}

}  // namespace
}  // namespace ffn
