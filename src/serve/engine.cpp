// The generation engine of ffn serve (src/serve/engine.hpp).
#include "serve/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "decoding/decoding.hpp"

namespace ffn::serve {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::stop: return "stop";
    case Finish::length: return "length";
    case Finish::cancelled: return "cancelled";
    case Finish::error: return "error";
    case Finish::running: break;
  }
  return "running";
}

// ---------------------------------------------------------------- Job

Job::Job(Request r) : req_(std::move(r)) {}

bool Job::wait(std::vector<TokenOut>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait_for(lock, timeout, [&] { return !out_.empty() || finish_ != Finish::running; });
  for (auto& t : out_) out.push_back(std::move(t));
  out_.clear();
  return finish_ != Finish::running;
}

Finish Job::finish() const {
  const std::lock_guard<std::mutex> lock(m_);
  return finish_;
}

Usage Job::usage() const {
  const std::lock_guard<std::mutex> lock(m_);
  return usage_;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}
}  // namespace

GenerationTiming Job::timing() const {
  const std::lock_guard<std::mutex> lock(m_);
  return timing_;
}

void Job::push(TokenOut t) {
  {
    const std::lock_guard<std::mutex> lock(m_);
    if (t.id >= 0) {  // a token (not the text held back to the end)
      const auto now = std::chrono::steady_clock::now();
      if (timing_.first_token < 0) timing_.first_token = seconds_since(submitted_, now);
      else timing_.gaps.push_back(float(seconds_since(last_token_, now)));
      last_token_ = now;
    }
    out_.push_back(std::move(t));
  }
  cv_.notify_all();
}

void Job::end(Finish f, const std::string& error) {
  // The text held back (an incomplete character, a possible stop string's start) comes out last.
  if (stream_ && (f == Finish::stop || f == Finish::length)) {
    std::string rest = stream_->finish();
    if (!rest.empty()) {
      TokenOut t;
      t.text = std::move(rest);
      push(std::move(t));
    }
  }
  {
    const std::lock_guard<std::mutex> lock(m_);
    finish_ = f;
    error_ = error;
    timing_.total = seconds_since(submitted_, std::chrono::steady_clock::now());
    usage_.prompt_tokens = int64_t(req_.prompt.size());
    usage_.completion_tokens = made_;
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------- Engine

namespace {

// The length of the common start of a and b, at most `cap`.
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t cap) {
  const int64_t n = std::min<int64_t>({int64_t(a.size()), int64_t(b.size()), cap});
  int64_t i = 0;
  while (i < n && a[size_t(i)] == b[size_t(i)]) ++i;
  return i;
}

// The chosen token's log-probability and the `top` most likely, from the
// raw row: log_softmax as (x − max) − log Σ e^(x − max), the sum in double.
void logprobs(const float* row, int64_t V, int32_t chosen, int64_t top, TokenOut& t) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, row[v]);
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v] - mx));
  const float lse = float(std::log(sum));
  t.logprob = (row[chosen] - mx) - lse;
  if (top <= 0) return;
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = std::min(top, V);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  for (int64_t i = 0; i < k; ++i) t.top.push_back({idx[size_t(i)], (row[idx[size_t(i)]] - mx) - lse});
}

}  // namespace

Engine::Engine(const CausalLM& lm, EngineOptions opts) : lm_(lm), o_(std::move(opts)) {
  const CausalLMConfig& c = lm.config();
  if (o_.parallel < 1 || o_.parallel > 1024) throw Error("--parallel: expected 1..1024, got " + std::to_string(o_.parallel));
  if (o_.queue < 0) throw Error("--queue: expected 0 or more, got " + std::to_string(o_.queue));
  if (o_.chunk < 1) throw Error("--chunk: expected 1 or more, got " + std::to_string(o_.chunk));
  if (o_.prefix_cache < 0) throw Error("--prefix-cache: expected 0 or more, got " + std::to_string(o_.prefix_cache));
  if (o_.context < 0) throw Error("--context: expected a positive number of positions, got " + std::to_string(o_.context));
  if (o_.context == 0) o_.context = c.context > 0 ? std::min<int64_t>(c.context, 4096) : 4096;
  if (c.context > 0 && o_.context > c.context)
    throw Error("--context: " + std::to_string(o_.context) + " positions is past the model's " + std::to_string(c.context));
  state_ = lm.start(0, o_.context);
  const int64_t per_sequence = state_.pages_for(o_.context);
  if (o_.kv_pages == 0) o_.kv_pages = o_.parallel * per_sequence;
  if (o_.kv_pages < 1) throw Error("--kv-memory: expected room for at least one page");
  state_.set_page_limit(o_.kv_pages);
  stats_.pages_total = o_.kv_pages;
  stats_.page_positions = state_.page_positions();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

void Engine::stop() {
  {
    const std::lock_guard<std::mutex> lock(m_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Every job still here ends, cancelled.
  std::deque<std::shared_ptr<Job>> left;
  {
    const std::lock_guard<std::mutex> lock(m_);
    left.swap(waiting_);
  }
  for (auto& j : left) j->end(Finish::cancelled);
  for (auto& s : slots_)
    if (s.job) s.job->end(Finish::cancelled);
  slots_.clear();
}

std::shared_ptr<Job> Engine::submit(Request r) {
  const CausalLMConfig& c = lm_.config();
  const SamplingOptions& s = r.sampling;
  s.validate();
  if (s.beams != 1) throw Error("beams: the server generates with greedy search or sampling (beams 1)");
  if (r.prompt.empty()) throw Error("prompt: the prompt has no tokens");
  for (int32_t id : r.prompt)
    if (id < 0 || id >= c.vocab)
      throw Error("prompt: token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(c.vocab - 1) + ")");
  const int64_t n = int64_t(r.prompt.size());
  if (s.max_new_tokens > o_.context - n)
    throw Error("max_tokens: " + std::to_string(n) + " prompt tokens + " + std::to_string(s.max_new_tokens) +
                " new tokens is past the context of " + std::to_string(o_.context) + " positions, by " +
                std::to_string(s.max_new_tokens - (o_.context - n)));
  if (state_.pages_for(n + s.max_new_tokens) > o_.kv_pages)
    throw Error("max_tokens: " + std::to_string(n) + " prompt tokens + " + std::to_string(s.max_new_tokens) +
                " new tokens need " + std::to_string(state_.pages_for(n + s.max_new_tokens)) + " KV pages, and --kv-memory holds " +
                std::to_string(o_.kv_pages));
  if (r.top_logprobs > 20) throw Error("top_logprobs: expected 0..20, got " + std::to_string(r.top_logprobs));
  if ((r.text || !r.stop.empty()) && !lm_.tokenizer()) throw Error("the model has no tokenizer: give token ids");
  auto job = std::shared_ptr<Job>(new Job(std::move(r)));
  job->context_ = job->req_.prompt;
  if (job->req_.text) job->stream_.emplace(*lm_.tokenizer(), job->req_.stop);
  if (job->req_.sampling.max_new_tokens == 0) {
    job->end(Finish::length);
    return job;
  }
  {
    const std::lock_guard<std::mutex> lock(m_);
    if (stopping_) throw QueueFull("the server is shutting down");
    // The queue's limit counts the requests beyond those free slots will take at the next step.
    const int64_t free_slots = std::max<int64_t>(0, o_.parallel - stats_.running);
    if (int64_t(waiting_.size()) >= o_.queue + free_slots) throw QueueFull("the queue is full (" + std::to_string(o_.queue) + " waiting)");
    waiting_.push_back(job);
    stats_.waiting = int64_t(waiting_.size());
  }
  cv_.notify_all();
  return job;
}

EngineStats Engine::stats() const {
  const std::lock_guard<std::mutex> lock(m_);
  return stats_;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(m_);
      const bool running = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return bool(s.job); });
      if (!running) cv_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
      if (stopping_) return;
    }
    if (on_step) on_step(stats_.steps);
    try {
      step();
    } catch (const std::exception& e) {
      // A step that fails (out of memory, non-finite logits are per job) ends every running job with its error.
      for (size_t i = slots_.size(); i-- > 0;)
        if (slots_[i].job) finish_slot(i, Finish::error, e.what());
    }
    update_stats();
  }
}

void Engine::drop_slot(size_t i) {
  state_.leave(int64_t(i));
  slots_.erase(slots_.begin() + std::ptrdiff_t(i));
}

bool Engine::make_room(int64_t pages, size_t keep) {
  // Parked sequences, least recently used first, until `pages` pages are free.
  while (o_.kv_pages - state_.pages_used() < pages) {
    size_t lru = slots_.size();
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!slots_[i].job && i != keep && (lru == slots_.size() || slots_[i].stamp < slots_[lru].stamp)) lru = i;
    if (lru == slots_.size()) return false;
    drop_slot(lru);
    if (keep != size_t(-1) && keep > lru) --keep;
  }
  return true;
}

void Engine::finish_slot(size_t i, Finish f, const std::string& error) {
  Slot& s = slots_[i];
  s.job->end(f, error);  // (before the slot lets go of it: if end throws, the job is still running there)
  std::shared_ptr<Job> job = std::move(s.job);
  if (f == Finish::error || o_.prefix_cache == 0) {
    drop_slot(i);
    return;
  }
  // Parked: its keys and values stay for a later request's prefix.
  s.stamp = ++clock_;
  int64_t parked = 0;
  for (const Slot& t : slots_) parked += !t.job;
  while (parked > o_.prefix_cache) {
    size_t lru = slots_.size();
    for (size_t k = 0; k < slots_.size(); ++k)
      if (!slots_[k].job && (lru == slots_.size() || slots_[k].stamp < slots_[lru].stamp)) lru = k;
    drop_slot(lru);
    --parked;
  }
}

void Engine::end_jobs(const std::vector<std::pair<const Job*, Finish>>& ended) {
  // By job, not by index: finishing one may drop a parked slot and move the others.
  for (const auto& [job, f] : ended)
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].job.get() == job) {
        finish_slot(i, f, f == Finish::error ? job->error_ : std::string());
        break;
      }
}

void Engine::admit() {
  for (;;) {
    int64_t running = 0;
    for (const Slot& s : slots_) running += bool(s.job);
    if (running >= o_.parallel) return;
    std::shared_ptr<Job> job;
    {
      const std::lock_guard<std::mutex> lock(m_);
      if (waiting_.empty()) return;
      job = waiting_.front();
    }
    if (job->cancelled()) {
      {
        const std::lock_guard<std::mutex> lock(m_);
        waiting_.pop_front();
      }
      job->end(Finish::cancelled);
      continue;
    }
    const std::vector<int32_t>& ctx = job->context_;
    const int64_t n = int64_t(ctx.size());
    // The sequence sharing the longest start (at least the last token is read again: its logits choose the next).
    size_t best = slots_.size();
    int64_t common = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const int64_t l = common_prefix(slots_[i].tokens, ctx, n - 1);
      if (l > common || (l == common && l > 0 && !slots_[i].job && slots_[best].job)) best = i, common = l;
    }
    const bool take_over = best < slots_.size() && !slots_[best].job;
    const int64_t need = state_.pages_for(n + 1) - (take_over ? state_.pages_for(common) : 0);
    int64_t parked_pages = 0;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!slots_[i].job && i != best) parked_pages += state_.pages_for(state_.length(int64_t(i)));
    if (take_over) parked_pages += state_.pages_for(state_.length(int64_t(best))) - state_.pages_for(common);
    if (need > o_.kv_pages - state_.pages_used() + parked_pages) return;  // waits for running ones to end
    {
      const std::lock_guard<std::mutex> lock(m_);
      waiting_.pop_front();
    }
    const uint64_t id = best < slots_.size() ? slots_[best].stamp : 0;
    const bool had_best = best < slots_.size();
    if (take_over) {  // its pages past the common start are free first
      state_.truncate(int64_t(best), common);
      slots_[best].tokens.resize(size_t(common));
    }
    make_room(need, take_over ? best : size_t(-1));
    // (make_room may have dropped parked slots before `best`: find it again by its stamp.)
    if (had_best) {
      best = slots_.size();
      for (size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].stamp == id && (take_over ? !slots_[i].job : bool(slots_[i].job))) best = i;
      if (best == slots_.size()) common = 0;  // (cannot happen: it was kept)
    }
    try {
      place(job, best, common, take_over);
    } catch (const std::exception& e) {
      job->end(Finish::error, e.what());
      continue;
    }
    const std::lock_guard<std::mutex> lock(m_);
    if (!job->admitted_once_) {
      job->admitted_once_ = true;
      const std::lock_guard<std::mutex> jl(job->m_);
      job->usage_.cached_tokens = common;
      stats_.cached_tokens += common;
      stats_.prompt_tokens += int64_t(job->req_.prompt.size());
    }
  }
}

// The job's slot: the parked sequence `best` taken over, a copy of the first
// `common` positions of running sequence `best`, or a new empty sequence.
void Engine::place(const std::shared_ptr<Job>& job, size_t best, int64_t& common, bool take_over) {
    if (take_over && best < slots_.size()) {
      slots_[best].job = job;
      slots_[best].stamp = ++clock_;
    } else {
      Slot s;
      s.job = job;
      s.stamp = ++clock_;
      if (common > 0 && best < slots_.size()) {
        state_.fork(int64_t(best), common);
        s.tokens.assign(slots_[best].tokens.begin(), slots_[best].tokens.begin() + common);
      } else {
        state_.join();
        common = 0;
      }
      slots_.push_back(std::move(s));
    }
}

void Engine::sample(size_t i, float* row) {
  Slot& slot = slots_[i];
  Job& job = *slot.job;
  const CausalLMConfig& c = lm_.config();
  const int64_t V = c.vocab;
  const SamplingOptions& so = job.req_.sampling;
  decoding::check_finite_logits(row, V, job.made_);
  TokenOut out;
  std::vector<float> raw;
  if (job.req_.top_logprobs >= 0) raw.assign(row, row + V);
  // As the decoding engine chooses for sequence 0 (src/decoding/decoding.cpp).
  const auto tok = int32_t(decoding::choose_next(row, V, job.context_, int64_t(job.req_.prompt.size()), so, job.made_));
  out.id = tok;
  if (!raw.empty()) logprobs(raw.data(), V, tok, job.req_.top_logprobs, out);
  job.context_.push_back(tok);
  ++job.made_;
  if (job.stream_) out.text = job.stream_->push(tok);
  job.push(std::move(out));
  const std::lock_guard<std::mutex> lock(m_);
  ++stats_.generated_tokens;
}

void Engine::step() {
  // Cancelled jobs still waiting end now (their clients are gone: they must not hold places in the queue).
  std::vector<std::shared_ptr<Job>> gone;
  {
    const std::lock_guard<std::mutex> lock(m_);
    for (auto it = waiting_.begin(); it != waiting_.end();)
      if ((*it)->cancelled()) gone.push_back(*it), it = waiting_.erase(it);
      else ++it;
  }
  for (auto& j : gone) j->end(Finish::cancelled);
  // Cancelled jobs leave (their keys and values stay parked for a prefix).
  std::vector<std::pair<const Job*, Finish>> ended;
  for (const Slot& s : slots_)
    if (s.job && s.job->cancelled()) ended.emplace_back(s.job.get(), Finish::cancelled);
  end_jobs(ended);
  admit();
  const int64_t V = lm_.config().vocab;
  std::vector<int64_t> counts;
  for (;;) {
    counts.assign(slots_.size(), 0);
    // Prompts in admission order share the chunk; decoding sequences take one token each.
    std::vector<size_t> order;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].job) order.push_back(i);
    if (order.empty()) return;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slots_[a].stamp < slots_[b].stamp; });
    // While some sequence decodes, the prompts' tokens a step cost about one
    // decoding step's time (Sarathi-Serve's token budget: the inter-token
    // gap at most doubles), at most `chunk`; while none decodes, nobody
    // waits on the step: `chunk_alone`. (The chunk sizes change no bits.)
    bool decoding = false;
    for (size_t i : order) decoding = decoding || slots_[i].job->context_.size() - slots_[i].tokens.size() == 1;
    int64_t budget = std::max(o_.chunk, o_.chunk_alone);
    if (decoding) {
      budget = o_.chunk;
      if (decode_s_ > 0 && token_s_ > 0)
        budget = std::clamp(int64_t(decode_s_ / token_s_), std::min<int64_t>(8, o_.chunk), o_.chunk);
    }
    for (size_t i : order) {
      const int64_t rest = int64_t(slots_[i].job->context_.size() - slots_[i].tokens.size());
      if (rest == 1) counts[i] = 1;
      else {
        counts[i] = std::min(rest, budget);
        budget -= counts[i];
      }
    }
    int64_t need = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const int64_t len = int64_t(slots_[i].tokens.size());
      need += state_.pages_for(len + counts[i]) - state_.pages_for(len);
    }
    if (need <= o_.kv_pages - state_.pages_used()) break;
    const size_t before = slots_.size();
    if (make_room(need, size_t(-1)) || slots_.size() != before) continue;  // (dropped slots move the indices)
    // Preempt the most recently admitted running sequence: it waits at the head of the queue.
    size_t last = order.back();
    std::shared_ptr<Job> job = slots_[last].job;
    drop_slot(last);
    {
      const std::lock_guard<std::mutex> lock(m_);
      waiting_.push_front(job);
      ++stats_.preemptions;
    }
    ++job->preempted_;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto& ctx = slots_[i].job ? slots_[i].job->context_ : slots_[i].tokens;
    const size_t from = slots_[i].tokens.size();
    ids.insert(ids.end(), ctx.begin() + std::ptrdiff_t(from), ctx.begin() + std::ptrdiff_t(from + size_t(counts[i])));
  }
  logits_.resize(slots_.size() * size_t(V));
  RunOptions ro;
  ro.threads = o_.threads;
  ro.isa = o_.isa;
  const auto t0 = std::chrono::steady_clock::now();
  lm_.extend(state_, ids.data(), counts, logits_.data(), false, ro);
  {  // The costs the budget above weighs: a decoding step, and a prompt token beside it.
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t prompt = 0, decoders = 0;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (counts[i] > 0 && slots_[i].job->context_.size() - slots_[i].tokens.size() == 1) ++decoders;
      else prompt += counts[i];
    auto ema = [](double& v, double x) { v = v > 0 ? 0.8 * v + 0.2 * x : x; };
    if (prompt == 0 && decoders > 0) ema(decode_s_, dt);
    else if (prompt > 0 && dt > (decoders > 0 ? decode_s_ : 0)) ema(token_s_, (dt - (decoders > 0 ? decode_s_ : 0)) / double(prompt));
  }
  ended.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (counts[i] == 0) continue;
    Slot& s = slots_[i];
    Job& job = *s.job;
    const size_t from = s.tokens.size();
    s.tokens.insert(s.tokens.end(), job.context_.begin() + std::ptrdiff_t(from),
                    job.context_.begin() + std::ptrdiff_t(from + size_t(counts[i])));
    if (s.tokens.size() != job.context_.size()) continue;  // more of the prompt to read
    try {
      sample(i, logits_.data() + i * size_t(V));
    } catch (const std::exception& e) {
      ended.emplace_back(&job, Finish::error);
      job.error_ = e.what();
      continue;
    }
    const int32_t tok = job.context_.back();
    const CausalLMConfig& c = lm_.config();
    const bool end_id =
        job.req_.sampling.stop_at_eos && std::find(c.end_ids.begin(), c.end_ids.end(), int64_t(tok)) != c.end_ids.end();
    if ((job.stream_ && job.stream_->stopped()) || end_id) ended.emplace_back(&job, Finish::stop);
    else if (job.made_ >= job.req_.sampling.max_new_tokens) ended.emplace_back(&job, Finish::length);
  }
  end_jobs(ended);
  const std::lock_guard<std::mutex> lock(m_);
  ++stats_.steps;
}

void Engine::update_stats() {
  const std::lock_guard<std::mutex> lock(m_);
  stats_.running = 0;
  stats_.parked = 0;
  stats_.pages_cached = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    (slots_[i].job ? stats_.running : stats_.parked)++;
    if (!slots_[i].job) stats_.pages_cached += state_.pages_for(state_.length(int64_t(i)));
  }
  stats_.waiting = int64_t(waiting_.size());
  stats_.pages_used = state_.pages_used();
}

}  // namespace ffn::serve
