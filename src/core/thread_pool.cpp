// The engine's threads (src/core/thread_pool.hpp).
//
// One job at a time, published in words that carry its generation g, so that
// a worker that arrives late (the OS ran it after the job was taken) fails its
// compare-exchange and touches nothing:
//   seats = g:taken          a worker takes slot taken + 1 while it is < threads
//   next  = g:front:back     units [front, back) unclaimed; the caller claims
//                            front -> front + 1, workers back -> back - 1
//   done                     units the workers finished (the caller waits for
//                            all it did not run itself)
// The job's function, argument and thread count are read by a worker only
// while its claim (or seat) of generation g can still succeed; the caller does
// not publish g + 1 before every unit of g is done, so a successful claim pins
// them. g has 24 bits: a worker stalled across 2^24 jobs whose claim word then
// matches exactly would take a unit of the current job with a seat of an old
// one; at ~15,000 jobs a second (generation) that is a stall of 18 minutes.
#include "core/thread_pool.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <sched.h>
#include <sys/resource.h>

namespace ffn::nn {

namespace {

using Call = void (*)(void*, int64_t, int);

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// The calling thread's CPU time and involuntary context switches (the OS
// took the core from it while it could run).
struct ThreadUsage {
  int64_t cpu = 0, preempted = 0;
};
ThreadUsage thread_usage() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  const auto ns = [](const timeval& t) { return int64_t(t.tv_sec) * 1'000'000'000 + int64_t(t.tv_usec) * 1000; };
  return {ns(ru.ru_utime) + ns(ru.ru_stime), int64_t(ru.ru_nivcsw)};
}

int64_t now_nanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

thread_local bool t_in_unit = false;  // this thread runs a unit (or is a worker): nested calls run in place

class Pool {
 public:
  ~Pool() {
    if (std::getenv("FFN_POOL_STATS"))
      std::fprintf(stderr,
                   "ffn thread pool: %lld jobs by the team, %lld by the caller alone, %lld spells alone "
                   "(%lld without trying the team; the caller running %.0f%% of their time)\n",
                   (long long)team_jobs_.load(), (long long)solo_jobs_.load(), (long long)solo_spells_.load(),
                   (long long)crowded_spells_.load(),
                   spell_wall_.load() > 0 ? 100.0 * double(spell_cpu_.load()) / double(spell_wall_.load()) : 100.0);
    stop_.store(true);
    gen_.fetch_add(1);
    gen_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int threads, int64_t units, Call call, void* fn) {
    std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
    if (!lock.owns_lock()) return serial(units, call, fn);
    const int64_t t0 = now_nanos();
    if (t0 < solo_until_) {
      solo_jobs_.fetch_add(1, std::memory_order_relaxed);
      return serial(units, call, fn);
    }
    if (solo_until_ != 0 && oversubscribed(t0)) {
      // The spell is over, but the caller alone was preempted for part of it:
      // other processes' threads outnumber the free cores, and a worker would
      // only take the caller's share of them. Another spell alone, without
      // trying the team.
      start_spell(t0);
      crowded_spells_.fetch_add(1, std::memory_order_relaxed);
      solo_jobs_.fetch_add(1, std::memory_order_relaxed);
      return serial(units, call, fn);
    }
    team_jobs_.fetch_add(1, std::memory_order_relaxed);
    if (solo_until_ != 0 || start_workers(threads - 1) || t0 - last_end_ > pool_spin_micros() * 1000) {
      // The first jobs after a spell alone or a pause (the workers asleep), or
      // after new workers started, find them waking up: not counted for or
      // against the team.
      warm_until_ = t0 + kWarmUp;
      solo_until_ = 0;
    }
    const uint64_t g = ++jobs_ & kGenMask;
    call_.store(call, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    threads_.store(threads, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    seats_.store(g << 32, std::memory_order_release);
    next_.store(make_word(g, 0, uint64_t(units)), std::memory_order_release);
    gen_.store(uint32_t(g), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) gen_.notify_all();

    t_in_unit = true;
    const int64_t mine = claim_and_run(g, 0);
    t_in_unit = false;
    const int64_t t1 = now_nanos();
    // Wait for the units workers claimed: pauses, then give the core away
    // (the worker may be waiting for it).
    if (mine < units) {
      for (int spins = 0; done_.load(std::memory_order_acquire) < units - mine; ++spins) {
        if (spins < 256 || now_nanos() - t1 < 20000) cpu_pause();
        else sched_yield();
      }
    }
    last_end_ = now_nanos();
    account(units, mine, t0, t1, last_end_);
  }

  // Whether the team pays: over windows of kWindow of job time, the time the
  // jobs took against what the caller alone would have taken at its own rate
  // per unit (its time over the units it ran, times all units). Where other
  // processes hold the cores, a worker joins late or is preempted holding a
  // unit, and the caller alone is faster (measured: generation beside one
  // busy loop, team 115 against alone 171 tokens/s): then jobs run on the
  // caller for a back-off that doubles while the team keeps losing (5 ms to
  // 1 s), and the idle workers go to sleep, leaving the cores to the others.
  static constexpr int64_t kWindow = 2'000'000, kMinBackoff = 5'000'000, kMaxBackoff = 1'000'000'000;
  static constexpr int64_t kWarmUp = 300'000;  // a worker's wake-up from its futex, with margin
  void account(int64_t units, int64_t mine, int64_t t0, int64_t t1, int64_t t2) {
    if (t0 < warm_until_) return;
    window_team_ += t2 - t0;
    window_alone_ += mine > 0 ? (t1 - t0) * units / mine : 2 * (t2 - t0);  // no unit of its own: the workers were quick
    if (window_team_ < kWindow) return;
    if (window_team_ * 4 > window_alone_ * 3) {  // the team saves less than a quarter: the caller alone
      start_spell(t2);
    } else {
      backoff_ = std::max(backoff_ / 2, kMinBackoff);  // one good window in a busy spell is luck as often as not
    }
    window_team_ = window_alone_ = 0;
  }

  // A spell alone from t, for the back-off (which then doubles); the
  // caller's CPU time and preemptions so far, for oversubscribed().
  void start_spell(int64_t t) {
    solo_until_ = t + backoff_;
    backoff_ = std::min(2 * backoff_, kMaxBackoff);
    ++solo_spells_;
    spell_start_ = t;
    spell_thread_ = std::this_thread::get_id();
    spell_usage_ = thread_usage();
  }

  // Whether the spell that ends at t found the cores oversubscribed: the
  // caller ran less than kShareBusyPercent of its time and the OS preempted
  // it at least twice (a caller that blocked, e.g. a server between
  // requests, is not preempted). Measured on the Zen 4 (2 vCPUs, autogroups),
  // generation alone: ~96 % idle and beside one busy loop, ~62 % at nice 19
  // beside two (three sessions' groups share two cores), where the team's
  // probes cost 3–10 % against --threads 1.
  static constexpr int64_t kShareBusyPercent = 85;
  bool oversubscribed(int64_t t) {
    if (spell_thread_ != std::this_thread::get_id()) return false;  // another caller: no measure
    const ThreadUsage u = thread_usage();
    const int64_t wall = t - spell_start_, cpu = u.cpu - spell_usage_.cpu;
    spell_cpu_.fetch_add(cpu, std::memory_order_relaxed);
    spell_wall_.fetch_add(wall, std::memory_order_relaxed);
    return wall > 0 && cpu * 100 < wall * kShareBusyPercent && u.preempted - spell_usage_.preempted >= 2;
  }

  int workers() {
    std::lock_guard<std::mutex> g(grow_);
    return int(workers_.size());
  }

  PoolStats stats() const {
    return {team_jobs_.load(), solo_jobs_.load(), solo_spells_.load(), crowded_spells_.load()};
  }

 private:
  static void serial(int64_t units, Call call, void* fn) {
    const bool outer = t_in_unit;
    t_in_unit = true;
    for (int64_t u = 0; u < units; ++u) call(fn, u, 0);
    t_in_unit = outer;
  }

  // Starts workers up to `want`; whether it started any.
  bool start_workers(int want) {
    std::lock_guard<std::mutex> g(grow_);
    if (int(workers_.size()) >= want) return false;
    while (int(workers_.size()) < want) workers_.emplace_back([this] { work(); });
    return true;
  }

  // The claim word: generation (24 bits) | front (20 bits) | back (20 bits);
  // units [front, back) are unclaimed. The caller takes them from the front,
  // workers from the back, so that with two threads each runs one contiguous
  // stretch (a unit's prefetches run into the next unit, which is then its own).
  static constexpr int kIndexBits = 20;
  static constexpr uint64_t kIndexMask = (uint64_t(1) << kIndexBits) - 1;
  static constexpr uint64_t kGenMask = (uint64_t(1) << (64 - 2 * kIndexBits)) - 1;
  static uint64_t word_gen(uint64_t w) { return w >> (2 * kIndexBits); }
  static uint64_t make_word(uint64_t g, uint64_t front, uint64_t back) {
    return (g << (2 * kIndexBits)) | (front << kIndexBits) | back;
  }

  // Claims and runs units of generation g as `slot` (from the front for the
  // caller, from the back for workers); returns how many it ran.
  int64_t claim_and_run(uint64_t g, int slot) {
    int64_t ran = 0;
    const bool from_back = slot != 0;
    uint64_t w = next_.load(std::memory_order_acquire);
    for (;;) {
      if (word_gen(w) != g) break;
      const uint64_t front = (w >> kIndexBits) & kIndexMask, back = w & kIndexMask;
      if (front >= back) break;
      const uint64_t claimed = from_back ? make_word(g, front, back - 1) : make_word(g, front + 1, back);
      if (!next_.compare_exchange_weak(w, claimed, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      call_.load(std::memory_order_relaxed)(fn_.load(std::memory_order_relaxed), int64_t(from_back ? back - 1 : front),
                                            slot);
      ++ran;
      w = next_.load(std::memory_order_acquire);
    }
    return ran;
  }

  void join(uint64_t g) {
    uint64_t s = seats_.load(std::memory_order_acquire);
    int slot = 0;
    for (;;) {
      if ((s >> 32) != g) return;
      const int taken = int(s & 0xffffffffu);
      if (taken + 1 >= threads_.load(std::memory_order_relaxed)) return;
      if (seats_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        slot = taken + 1;
        break;
      }
    }
    const int64_t ran = claim_and_run(g, slot);
    if (ran > 0) done_.fetch_add(ran, std::memory_order_release);
  }

  void work() {
    t_in_unit = true;
    const int64_t spin = pool_spin_micros();
    uint32_t seen = gen_.load(std::memory_order_acquire);
    int64_t idle_since = now_nanos();
    for (int spins = 0;; ++spins) {
      const uint32_t g = gen_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      if (g != seen) {
        seen = g;
        join(g);
        idle_since = now_nanos();
        spins = 0;
        continue;
      }
      if ((spins & 63) != 63 || now_nanos() - idle_since < spin * 1000) {
        cpu_pause();
        continue;
      }
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (gen_.load(std::memory_order_seq_cst) == seen) gen_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // Each word that one side writes while the other reads it has a cache line
  // of its own: the job (written once per job, read by every joiner), the
  // wake word (polled by idle workers), the claim counter, the done counter.
  static constexpr size_t kLine = 64;
  std::mutex busy_;  // one caller at a time (a second runs its units in place)
  std::mutex grow_;
  std::vector<std::thread> workers_;
  uint64_t jobs_ = 0;  // under busy_, as the fields below up to spell_usage_
  int64_t window_team_ = 0, window_alone_ = 0, solo_until_ = 0, warm_until_ = 0, last_end_ = 0;
  int64_t backoff_ = kMinBackoff;
  int64_t spell_start_ = 0;
  std::thread::id spell_thread_;
  ThreadUsage spell_usage_;
  std::atomic<int64_t> team_jobs_{0}, solo_jobs_{0}, solo_spells_{0}, crowded_spells_{0};
  std::atomic<int64_t> spell_cpu_{0}, spell_wall_{0};  // the ended spells: the caller's CPU time, their time
  alignas(kLine) std::atomic<Call> call_{nullptr};
  std::atomic<void*> fn_{nullptr};
  std::atomic<int> threads_{0};
  std::atomic<bool> stop_{false};
  alignas(kLine) std::atomic<uint32_t> gen_{0};
  alignas(kLine) std::atomic<int> sleepers_{0};
  alignas(kLine) std::atomic<uint64_t> seats_{0};
  alignas(kLine) std::atomic<uint64_t> next_{0};
  alignas(kLine) std::atomic<int64_t> done_{0};  // (the class's alignment pads the line after it)
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int64_t pool_spin_micros() {
  static const int64_t us = [] {
    const char* e = std::getenv("FFN_SPIN_US");
    if (!e || !*e) return int64_t(200);
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    return (end && *end == 0 && v >= 0 && v <= 1000000) ? int64_t(v) : int64_t(200);
  }();
  return us;
}

void parallel_units_erased(int threads, int64_t units, Call call, void* fn) {
  if (units <= 0) return;
  if (threads > units) threads = int(units);
  if (threads <= 1 || t_in_unit || units >= (int64_t(1) << 20)) {
    const bool outer = t_in_unit;
    t_in_unit = true;
    for (int64_t u = 0; u < units; ++u) call(fn, u, 0);
    t_in_unit = outer;
    return;
  }
  pool().run(threads, units, call, fn);
}

int pool_workers() { return pool().workers(); }

PoolStats pool_stats() { return pool().stats(); }

}  // namespace ffn::nn
