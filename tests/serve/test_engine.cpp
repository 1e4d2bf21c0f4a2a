// The serving engine (src/serve/engine.hpp): a request's tokens and
// logprobs among others are bitwise those it gets alone and those of
// CausalLM::generate (ffn generate), as vLLM's batch-invariance tests check:
// the request alone, then among 1, 7 and 31 others arriving at random
// steps, with greedy decoding and seeded sampling, on a K-quant GGUF and a
// float32 Hugging Face directory; with odd chunk sizes, 1 and 2 threads,
// cached prefixes, and (the directory, whose context is raised so that
// sequences cross pages) preemptions, which the test checks did happen.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <limits>
#include <random>
#include <thread>

#include "ffn/causal_lm.hpp"
#include "serve/engine.hpp"

namespace ffn::serve {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  std::vector<TokenOut> toks;
  Finish finish = Finish::running;
  Usage usage;
  std::string error;
};

Outcome drain(const std::shared_ptr<Job>& j) {
  Outcome o;
  while (!j->wait(o.toks, std::chrono::milliseconds(50))) {
  }
  o.finish = j->finish();
  o.usage = j->usage();
  o.error = j->error();
  return o;
}

std::vector<int32_t> ids_of(const Outcome& o) {
  std::vector<int32_t> ids;
  for (const auto& t : o.toks)
    if (t.id >= 0) ids.push_back(t.id);
  return ids;
}

// Bitwise: the same ids, logprob floats, top lists and text.
void expect_same_bits(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.finish, b.finish) << what << ": " << a.error << b.error;
  ASSERT_EQ(a.toks.size(), b.toks.size()) << what;
  for (size_t i = 0; i < a.toks.size(); ++i) {
    const TokenOut &x = a.toks[i], &y = b.toks[i];
    ASSERT_EQ(x.id, y.id) << what << ": token " << i;
    ASSERT_EQ(x.text, y.text) << what << ": token " << i;
    ASSERT_EQ(0, std::memcmp(&x.logprob, &y.logprob, sizeof(float))) << what << ": logprob " << i << " " << x.logprob << " vs " << y.logprob;
    ASSERT_EQ(x.top.size(), y.top.size()) << what;
    for (size_t k = 0; k < x.top.size(); ++k) {
      ASSERT_EQ(x.top[k].id, y.top[k].id) << what << ": top " << k << " of token " << i;
      ASSERT_EQ(0, std::memcmp(&x.top[k].logprob, &y.top[k].logprob, sizeof(float))) << what;
    }
  }
}

std::vector<int32_t> random_ids(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = int32_t(3 + rng() % uint64_t(vocab - 3));  // (not BOS/EOS: the lengths stay as asked)
  return v;
}

Request target(const CausalLM& m, bool sampled, int64_t prompt_len) {
  std::mt19937_64 rng(11);
  Request r;
  r.prompt = random_ids(rng, prompt_len, m.config().vocab);
  r.sampling.max_new_tokens = 20;
  r.sampling.stop_at_eos = false;  // 20 tokens, whatever they are
  if (sampled) {
    r.sampling.temperature = 0.9f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95f;
    r.sampling.min_p = 0.02f;
    r.sampling.frequency_penalty = 0.3f;
    r.sampling.seed = 1234567;
  }
  r.top_logprobs = 3;
  r.text = m.tokenizer() != nullptr;
  return r;
}

struct Crowd {
  int64_t others = 0, chunk = 256, parallel = 8, kv_pages = 0, context = 0;
  int threads = 2;
  uint64_t seed = 1;
  int64_t max_prompt = 100;
};

// The target among `c.others` requests that arrive at random steps (some
// sharing the target's first tokens, one the target's whole prompt), and
// the target itself again after all. Returns the target's two outcomes.
std::pair<Outcome, Outcome> among(const CausalLM& m, const Request& tgt, const Crowd& c, EngineStats* stats = nullptr) {
  EngineOptions eo;
  eo.parallel = c.parallel;
  eo.chunk = c.chunk;
  eo.kv_pages = c.kv_pages;
  eo.context = c.context;
  eo.threads = c.threads;
  eo.queue = 1000;
  Engine e(m, eo);
  std::mt19937_64 rng(c.seed);
  const int64_t V = m.config().vocab;
  struct Arrival {
    int64_t step;
    Request r;
  };
  std::vector<Arrival> plan;
  for (int64_t i = 0; i < c.others; ++i) {
    Request r;
    const int64_t len = 1 + int64_t(rng() % uint64_t(c.max_prompt));
    r.prompt = random_ids(rng, len, V);
    if (i % 3 == 1) {  // shares the target's start
      const size_t k = std::min(tgt.prompt.size(), size_t(1 + rng() % tgt.prompt.size()));
      std::copy_n(tgt.prompt.begin(), std::min(k, r.prompt.size()), r.prompt.begin());
    }
    r.sampling.max_new_tokens = 1 + int64_t(rng() % 30);
    if (int64_t(r.prompt.size()) + r.sampling.max_new_tokens > e.context())
      r.sampling.max_new_tokens = e.context() - int64_t(r.prompt.size());
    if (r.sampling.max_new_tokens < 1) r.prompt.resize(size_t(e.context() - 1)), r.sampling.max_new_tokens = 1;
    if (rng() % 2) {
      r.sampling.temperature = 1.0f;
      r.sampling.seed = rng();
    }
    r.top_logprobs = int64_t(rng() % 3) - 1;
    r.text = m.tokenizer() != nullptr;
    plan.push_back({int64_t(rng() % 24), std::move(r)});
  }
  const int64_t target_step = int64_t(rng() % 12);
  std::vector<std::shared_ptr<Job>> jobs;
  std::shared_ptr<Job> first;
  std::mutex mu;
  // Everything planned for `step` or earlier, not yet sent (under mu).
  auto arrive = [&](int64_t step) {
    for (auto& a : plan)
      if (a.step >= 0 && a.step <= step) jobs.push_back(e.submit(a.r)), a.step = -1;
    if (!first && step >= target_step) first = e.submit(tgt);
  };
  e.on_step = [&](int64_t step) {
    const std::lock_guard<std::mutex> l(mu);
    arrive(step);
  };
  {
    const std::lock_guard<std::mutex> l(mu);
    arrive(0);
  }
  // Steps run only while something is queued or running: when the engine idles, the rest arrive at once.
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const std::lock_guard<std::mutex> l(mu);
    const bool all = first && std::all_of(plan.begin(), plan.end(), [](const Arrival& a) { return a.step < 0; });
    if (all) break;
    const EngineStats s = e.stats();
    if (s.running == 0 && s.waiting == 0) arrive(std::numeric_limits<int64_t>::max());
  }
  Outcome once = drain(first);
  for (auto& j : jobs) drain(j);
  Outcome again = drain(e.submit(tgt));
  if (stats) *stats = e.stats();
  return {once, again};
}

Outcome alone(const CausalLM& m, const Request& r, int threads = 1, int64_t context = 0) {
  EngineOptions eo;
  eo.parallel = 1;
  eo.threads = threads;
  eo.context = context;
  eo.prefix_cache = 0;
  Engine e(m, eo);
  return drain(e.submit(r));
}

void check_model(const CausalLM& m, const std::string& name, int64_t context, bool expect_preemption) {
  for (const bool sampled : {false, true}) {
    const std::string what = name + (sampled ? " sampled" : " greedy");
    const Request tgt = target(m, sampled, 37);
    const Outcome ref = alone(m, tgt, 1, context);
    ASSERT_EQ(ref.finish, Finish::length) << what;
    ASSERT_EQ(ref.toks.size() - (ref.toks.back().id < 0), 20u) << what;
    // As CausalLM::generate (ffn generate): the same tokens.
    EXPECT_EQ(ids_of(ref), m.generate(tgt.prompt, tgt.sampling)) << what << ": against generate";
    // Any thread count.
    expect_same_bits(ref, alone(m, tgt, 2, context), what + ", 2 threads alone");
    int64_t preemptions = 0, cached = 0;
    for (const int64_t others : {1, 7, 31}) {
      for (const int64_t chunk : {7, 64, 256}) {
        Crowd c;
        c.others = others;
        c.chunk = chunk;
        c.context = context;
        c.seed = uint64_t(others * 1000 + chunk);
        c.threads = others == 7 ? 1 : 2;
        if (expect_preemption && others >= 7) {
          c.kv_pages = 3;  // 3 pages of 256 positions for 8 sequences of up to 700: preempted
          c.max_prompt = 600;
        }
        EngineStats st;
        const auto [once, again] = among(m, tgt, c, &st);
        const std::string where = what + " among " + std::to_string(others) + ", chunk " + std::to_string(chunk);
        expect_same_bits(ref, once, where);
        expect_same_bits(ref, again, where + ", sent again");
        if (c.kv_pages == 0) {
          EXPECT_GT(again.usage.cached_tokens, 0) << where << ": the second time reuses the first's prefix";
        }
        preemptions += st.preemptions;
        cached += st.cached_tokens;
      }
    }
    EXPECT_GT(cached, 0) << what;
    if (expect_preemption) {
      EXPECT_GT(preemptions, 0) << what << ": the small KV pool must have preempted";
    }
  }
}

TEST(ServeEngine, BatchInvariantKQuantGguf) {
  const CausalLM m = CausalLM::load(std::string(FFN_GGUF_DIR) + "/llama_k.gguf");
  ASSERT_TRUE(m.quantized());
  check_model(m, "llama_k.gguf", 0, false);
}

TEST(ServeEngine, BatchInvariantFp32DirectoryWithPreemption) {
  // The random float32 directory with its context raised to 1024, so that sequences span pages of 256.
  const fs::path dir = fs::temp_directory_path() / ("ffn_serve_engine_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(fs::path(FFN_LLAMA_DIR) / "gqa2_untied", dir, fs::copy_options::recursive);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["max_position_embeddings"] = 1024;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  const CausalLM m = CausalLM::load(dir.string());
  fs::remove_all(dir);
  check_model(m, "gqa2_untied (fp32)", 1024, true);
}

TEST(ServeEngine, RefusesWhatCannotRunAndCancels) {
  const CausalLM m = CausalLM::load(std::string(FFN_GGUF_DIR) + "/llama_k.gguf");
  EngineOptions eo;
  eo.parallel = 1;
  eo.queue = 1;
  Engine e(m, eo);
  Request r = target(m, false, 10);
  r.sampling.max_new_tokens = 200;
  EXPECT_THROW(e.submit(r), Error);  // past the context of 128
  r.prompt = {int32_t(m.config().vocab)};
  r.sampling.max_new_tokens = 2;
  EXPECT_THROW(e.submit(r), Error);  // outside the vocabulary
  r = target(m, false, 10);
  r.sampling.max_new_tokens = 100;
  auto a = e.submit(r);
  // One runs, one waits; a third finds the queue full (unless the first ended already).
  std::shared_ptr<Job> b;
  for (int tries = 0; tries < 100 && !b; ++tries) {
    try {
      b = e.submit(r);
    } catch (const QueueFull&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ASSERT_TRUE(b);
  a->cancel();
  b->cancel();
  const Finish fa = drain(a).finish;
  EXPECT_TRUE(fa == Finish::cancelled || fa == Finish::length);
  drain(b);
  for (int i = 0; i < 200 && e.stats().running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(e.stats().running, 0);
}

}  // namespace
}  // namespace ffn::serve
