// The generation engine of `ffn serve` (issue 61): continuous batching of
// requests over one CausalLM, vLLM's scheduler on ffn's paged KV cache.
//
// One thread runs steps. A step appends to every running sequence at once
// (CausalLM::extend: one product per layer matrix for all their rows):
//   - a decoding sequence its last token;
//   - a sequence reading its prompt the next chunk of it, the prompts of a
//     step sharing `chunk` tokens, so a long prompt holds the others back
//     for one chunk at most.
// Requests wait in a bounded queue and join at any step, at most `parallel`
// running; finished or cancelled ones leave at once. KV memory is one pool
// of pages (CausalLMState::set_page_limit). When a step needs more pages
// than are free, finished sequences kept for their prefixes go first, then
// the most recently admitted running sequence is preempted: its pages are
// freed and it waits at the head of the queue, to read its prompt and the
// tokens it made again (recomputation, as vLLM's default) and go on.
//
// Prefix cache: finished sequences stay in the state (parked, up to
// `prefix_cache` of them, least recently used dropped first). A new request
// takes over the parked sequence sharing the longest start with its prompt,
// or copies the start of a running one (CausalLMState::fork), and reads
// only the rest (usage's cached_tokens).
//
// Batch invariance: a position's keys, values and logits are bitwise the
// same whether its prefix was read in one call, in chunks, or one position
// at a time, beside any other sequences, on any thread count
// (include/ffn/causal_lm.hpp); a request's sampler draws from Philox(seed,
// step). So a request's tokens and logprobs are those it gets alone, and
// those of `ffn generate` with the same settings, whatever else runs, the
// chunk sizes, preemptions or cached prefixes (tests/serve/).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ffn/causal_lm.hpp"
#include "ffn/chat.hpp"
#include "serve/metrics.hpp"

namespace ffn::serve {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// One generated token as the client sees it.
struct TokenOut {
  int32_t id = -1;          // -1: no token, only the text held back until the end
  std::string text;         // the text that became final with it (may be empty: held back)
  float logprob = 0;        // log-softmax of the raw logits (before penalties and temperature)
  std::vector<TokenLogprob> top;  // the top_logprobs most likely, most likely first (ties: lower id)
};

enum class Finish { running, stop, length, cancelled, error };
const char* finish_name(Finish f);  // "stop", "length", "cancelled", "error"

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

struct Request {
  std::vector<int32_t> prompt;  // at least one token
  SamplingOptions sampling;     // beams must be 1
  std::vector<std::string> stop;
  int64_t top_logprobs = -1;    // -1: no logprobs; 0..20: the chosen token's and this many more
  bool text = true;             // decode the tokens to text (TextStream); false: ids only
};

// A request in the engine, shared with the thread that answers it.
class Job {
 public:
  // Waits until there are new tokens, the job has ended, or `timeout`
  // passes; moves the new tokens into `out` (appending). Returns whether it
  // has ended (then every token has been given out).
  bool wait(std::vector<TokenOut>& out, std::chrono::milliseconds timeout);
  // Ends the job at the engine's next step (its pages are freed): a client gone.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Valid once wait returned true.
  Finish finish() const;
  const std::string& error() const { return error_; }
  Usage usage() const;
  uint64_t seed() const { return req_.sampling.seed; }
  // Valid once wait returned true: seconds from submission to the first
  // token, between consecutive tokens, and to the end (ffn:*_seconds metrics).
  GenerationTiming timing() const;
  bool wants_logprobs() const { return req_.top_logprobs >= 0; }

 private:
  friend class Engine;
  explicit Job(Request r);
  void push(TokenOut t);
  void end(Finish f, const std::string& error = {});

  Request req_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<TokenOut> out_;
  Finish finish_ = Finish::running;
  std::string error_;
  const std::chrono::steady_clock::time_point submitted_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_token_;
  GenerationTiming timing_;
  Usage usage_;
  std::atomic<bool> cancelled_{false};
  // The engine thread's own.
  std::vector<int32_t> context_;  // prompt, then the tokens made
  int64_t made_ = 0;
  std::optional<TextStream> stream_;
  bool admitted_once_ = false;
  int64_t preempted_ = 0;
};

// The queue is full: the request was not taken (HTTP 503 with Retry-After).
class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EngineOptions {
  int64_t parallel = 4;       // running sequences at most
  int64_t queue = 64;         // waiting requests at most
  int64_t context = 0;        // positions per sequence; 0: the model's, at most 4096
  int64_t kv_pages = 0;       // the KV pool in pages; 0: room for `parallel` full contexts
  int64_t chunk = 256;        // prompt tokens per step at most, all prompts together, while some sequence decodes
  int64_t chunk_alone = 1024; // the same while none does
  int64_t prefix_cache = 16;  // finished sequences kept for their prefixes
  int threads = 0;            // 0: all cores
  Isa isa = Isa::automatic;
};

struct EngineStats {
  int64_t running = 0, waiting = 0, parked = 0;
  int64_t pages_used = 0, pages_total = 0, page_positions = 0;
  int64_t pages_cached = 0;  // of pages_used: held by parked sequences (freed first when pages are needed)
  int64_t steps = 0, preemptions = 0, prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0;
};

class Engine {
 public:
  // Starts the step thread. Error for options out of range (naming the flag).
  Engine(const CausalLM& lm, EngineOptions opts);
  ~Engine();  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Error (before anything is queued) for one that can
  // never run: no tokens, an id outside the vocabulary, prompt +
  // max_new_tokens past the context or the KV pool; QueueFull when
  // `queue` requests wait already.
  std::shared_ptr<Job> submit(Request r);
  EngineStats stats() const;
  const EngineOptions& options() const { return o_; }
  int64_t context() const { return o_.context; }
  // Ends every job (cancelled) and the thread.
  void stop();

  // The scheduler's own hook for tests: called at the start of each step, under no lock.
  std::function<void(int64_t step)> on_step;

 private:
  struct Slot {
    std::shared_ptr<Job> job;     // null: parked (finished, kept for its prefix)
    std::vector<int32_t> tokens;  // the tokens whose keys and values the state holds
    uint64_t stamp = 0;           // admission order (running) or last use (parked)
  };
  void loop();
  void step();
  void update_stats();
  void admit();
  void place(const std::shared_ptr<Job>& job, size_t best, int64_t& common, bool take_over);
  void end_jobs(const std::vector<std::pair<const Job*, Finish>>& ended);
  void drop_slot(size_t i);
  bool make_room(int64_t pages, size_t keep);  // frees parked pages until `pages` are free (never slot keep)
  void finish_slot(size_t i, Finish f, const std::string& error = {});
  void sample(size_t i, float* row);

  const CausalLM& lm_;
  EngineOptions o_;
  CausalLMState state_;
  std::vector<Slot> slots_;  // the state's sequences, in order
  std::vector<float> logits_;
  uint64_t clock_ = 0;
  double decode_s_ = 0, token_s_ = 0;  // moving averages: a decoding step's seconds, a prompt token's beside it

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  bool stopping_ = false;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace ffn::serve
