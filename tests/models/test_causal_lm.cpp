// LLaMA-architecture models against transformers 4.46.3 (tests/data/llama,
// scripts/make_llama_golden.py): logits after every prompt position, greedy
// continuations token for token, tokenizer ids; the KV cache's bitwise
// guarantees; hostile directories.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"
#include "ffn/io.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::scratch_dir;

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(FFN_LLAMA_DIR) + "/cases.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}
const SafetensorsFile& golden() {
  static const SafetensorsFile f = read_safetensors(std::string(FFN_LLAMA_DIR) + "/cases.safetensors");
  return f;
}
std::string model_dir(const std::string& name) { return std::string(FFN_LLAMA_DIR) + "/" + name; }

int32_t argmax(const float* v, int64_t n) { return int32_t(std::max_element(v, v + n) - v); }

// Greedy continuation of `prompt` by one extend of the prompt, then one
// position at a time.
std::vector<int32_t> greedy(const CausalLM& m, const std::vector<int32_t>& prompt, int new_tokens,
                            const RunOptions& o = {}) {
  const int64_t V = m.config().vocab;
  CausalLMState st = m.start(1, int64_t(prompt.size()) + new_tokens);
  std::vector<float> lg(static_cast<size_t>(V));
  m.extend(st, prompt.data(), {int64_t(prompt.size())}, lg.data(), false, o);
  std::vector<int32_t> out;
  for (int t = 0; t < new_tokens; ++t) {
    const int32_t next = argmax(lg.data(), V);
    out.push_back(next);
    if (t + 1 < new_tokens) m.extend(st, &next, {1}, lg.data(), false, o);
  }
  return out;
}

TEST(CausalLM, LogitsMatchTransformers) {
  ASSERT_EQ(cases()["models"].size(), 3u);
  for (const auto& [name, c] : cases()["models"].items()) {
    SCOPED_TRACE(name);
    const CausalLM m = CausalLM::load(model_dir(name));
    const int64_t V = m.config().vocab;
    const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    for (size_t k = 0; k < prompts.size(); ++k) {
      SCOPED_TRACE("prompt " + std::to_string(k) + " (" + std::to_string(prompts[k].size()) + " tokens)");
      const NamedTensor& want = golden().tensors.at(name + "." + std::to_string(k));
      ASSERT_EQ(want.shape, (std::vector<int64_t>{int64_t(prompts[k].size()), V}));
      for (Path path : {Path::automatic, Path::reference}) {
        RunOptions o;
        o.path = path;
        const std::vector<float> got = m.logits(prompts[k], o);
        // Tolerance: 2e-3 of each position's largest |logit| (the issue's
        // bound). float32 products summed in another order through a few
        // layers differ from torch's by ~1e-6 relative; 2e-3 still catches a
        // wrong rotary order, head grouping or norm (each moves logits by
        // O(1)), as the mutation test below shows.
        for (size_t p = 0; p < prompts[k].size(); ++p) {
          float mx = 0, err = 0;
          for (int64_t v = 0; v < V; ++v) {
            mx = std::max(mx, std::fabs(want.data[p * V + v]));
            err = std::max(err, std::fabs(got[p * V + v] - want.data[p * V + v]));
          }
          ASSERT_LE(err, 2e-3f * mx) << "position " << p << (path == Path::reference ? " (reference)" : "");
        }
      }
    }
  }
}

TEST(CausalLM, GreedyMatchesTransformersGenerate) {
  for (const auto& [name, c] : cases()["models"].items()) {
    SCOPED_TRACE(name);
    const CausalLM m = CausalLM::load(model_dir(name));
    const auto prompts = c["prompts"].get<std::vector<std::vector<int32_t>>>();
    const auto want = c["greedy"].get<std::vector<std::vector<int32_t>>>();
    for (size_t k = 0; k < prompts.size(); ++k)
      EXPECT_EQ(greedy(m, prompts[k], int(want[k].size())), want[k]) << "prompt " << k;
  }
}

TEST(CausalLM, TokenizerMatchesTransformers) {
  for (const auto& [name, c] : cases()["models"].items()) {
    SCOPED_TRACE(name);
    const CausalLM m = CausalLM::load(model_dir(name));
    ASSERT_NE(m.tokenizer(), nullptr);
    const auto texts = c["texts"].get<std::vector<std::string>>();
    const auto ids = c["text_ids"].get<std::vector<std::vector<int32_t>>>();
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(m.tokenizer()->encode(texts[i]), ids[i]) << texts[i];
      EXPECT_EQ(m.tokenizer()->decode(ids[i]), texts[i]);
    }
  }
}

// One position at a time, all at once, in a batch beside other sequences,
// and on 1 or 2 threads: the same bits.
TEST(CausalLM, CacheStepsAreBitwiseTheWholePrefix) {
  const CausalLM m = CausalLM::load(model_dir("gqa3_tied"));
  const int64_t V = m.config().vocab;
  const auto prompts = cases()["models"]["gqa3_tied"]["prompts"].get<std::vector<std::vector<int32_t>>>();
  const std::vector<int32_t>& ids = prompts[3];  // 33 tokens
  const int64_t n = int64_t(ids.size());
  RunOptions one;
  one.threads = 1;
  const std::vector<float> whole = m.logits(ids, one);
  // Step by step.
  CausalLMState st = m.start(1, n);
  std::vector<float> lg(static_cast<size_t>(V));
  for (int64_t i = 0; i < n; ++i) {
    m.extend(st, &ids[size_t(i)], {1}, lg.data(), false, one);
    ASSERT_EQ(0, std::memcmp(lg.data(), whole.data() + i * V, size_t(V) * 4)) << "position " << i;
  }
  // In pieces of 5, 2 threads.
  RunOptions two;
  two.threads = 2;
  CausalLMState st2 = m.start(1, n);
  std::vector<float> piece(size_t(5 * V));
  for (int64_t i = 0; i < n; i += 5) {
    const int64_t k = std::min<int64_t>(5, n - i);
    m.extend(st2, &ids[size_t(i)], {k}, piece.data(), true, two);
    ASSERT_EQ(0, std::memcmp(piece.data(), whole.data() + i * V, size_t(k * V) * 4)) << "piece at " << i;
  }
  // Batched with two other sequences of other lengths.
  const std::vector<int32_t>& other = prompts[2];
  std::vector<int32_t> all(other);
  all.insert(all.end(), ids.begin(), ids.end());
  all.insert(all.end(), prompts[1].begin(), prompts[1].end());
  CausalLMState st3 = m.start(3, 64);
  std::vector<float> last(size_t(3 * V));
  m.extend(st3, all.data(), {int64_t(other.size()), n, int64_t(prompts[1].size())}, last.data(), false, two);
  EXPECT_EQ(0, std::memcmp(last.data() + V, whole.data() + (n - 1) * V, size_t(V) * 4));
  // select(): sequence 1 copied twice, both continue as it would.
  st3.select({1, 1});
  const int32_t next[2] = {5, 5};
  m.extend(st3, next, {1, 1}, last.data(), false, one);
  std::vector<int32_t> longer(ids);
  longer.push_back(5);
  const std::vector<float> want = m.logits(longer, one);
  EXPECT_EQ(0, std::memcmp(last.data(), want.data() + n * V, size_t(V) * 4));
  EXPECT_EQ(0, std::memcmp(last.data() + V, want.data() + n * V, size_t(V) * 4));
}

TEST(CausalLM, RefusesBadInput) {
  const CausalLM m = CausalLM::load(model_dir("mha_odd"));
  CausalLMState st = m.start(1, 4);
  std::vector<float> lg(size_t(m.config().vocab) * 8);
  const int32_t bad = int32_t(m.config().vocab);
  expect_error([&] { m.extend(st, &bad, {1}, lg.data(), false); }, "outside the vocabulary");
  const int32_t five[5] = {1, 2, 3, 4, 5};
  expect_error([&] { m.extend(st, five, {5}, lg.data(), false); }, "capacity");
  EXPECT_EQ(st.length(0), 0);  // nothing was appended
  expect_error([&] { m.extend(st, five, {1, 1}, lg.data(), false); }, "2 counts for 1 live");

  // Hostile directories: each names the file and what it expected.
  const fs::path dir = scratch_dir("causal_lm_bad");
  fs::copy(model_dir("mha_odd"), dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  auto config = [&] {
    std::ifstream f(dir / "config.json");
    return nlohmann::json::parse(f);
  };
  auto write = [&](const nlohmann::json& j) { std::ofstream(dir / "config.json") << j.dump(); };
  const nlohmann::json orig = config();
  nlohmann::json j = orig;
  j["model_type"] = "gpt2";
  write(j);
  expect_error([&] { CausalLM::load(dir.string()); }, "model_type is \"gpt2\"");
  j = orig;
  j["num_key_value_heads"] = 2;  // 3 heads do not share 2
  write(j);
  expect_error([&] { CausalLM::load(dir.string()); }, "cannot share 2 key/value heads");
  j = orig;
  j["hidden_size"] = 48;
  write(j);
  expect_error([&] { CausalLM::load(dir.string()); }, "has shape [293, 36], expected [293, 48]");
  j = orig;
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  write(j);
  expect_error([&] { CausalLM::load(dir.string()); }, "rope_scaling");
  write(orig);
  fs::remove(dir / "model.safetensors");
  expect_error([&] { CausalLM::load(dir.string()); }, "model.safetensors: missing");
  fs::remove_all(dir);
}

// The tolerance bites: swapping the halves of one rotary pair in W_K (what
// reading GGUF rows without transformers' order would do) fails it.
TEST(CausalLM, ToleranceCatchesAWrongRotaryOrder) {
  const fs::path dir = scratch_dir("causal_lm_rope");
  fs::copy(model_dir("gqa2_untied"), dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  SafetensorsFile f = read_safetensors((dir / "model.safetensors").string());
  auto& k = f.tensors.at("model.layers.0.self_attn.k_proj.weight");
  const int64_t d = k.shape[1];
  for (int64_t c = 0; c < d; ++c) std::swap(k.data[size_t(0 * d + c)], k.data[size_t(8 * d + c)]);  // head_dim 16
  write_safetensors((dir / "model.safetensors").string(), f);
  const CausalLM m = CausalLM::load(dir.string());
  const auto& c = cases()["models"]["gqa2_untied"];
  const auto ids = c["prompts"][3].get<std::vector<int32_t>>();
  const std::vector<float> got = m.logits(ids);
  const NamedTensor& want = golden().tensors.at("gqa2_untied.3");
  const int64_t V = m.config().vocab;
  float worst = 0;
  for (size_t p = 1; p < ids.size(); ++p) {
    float mx = 0, err = 0;
    for (int64_t v = 0; v < V; ++v) {
      mx = std::max(mx, std::fabs(want.data[p * V + v]));
      err = std::max(err, std::fabs(got[p * V + v] - want.data[p * V + v]));
    }
    worst = std::max(worst, err / mx);
  }
  EXPECT_GT(worst, 2e-3f);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ffn
