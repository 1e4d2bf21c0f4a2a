// The engine's threads (src/core/thread_pool.hpp).
//
// One job at a time, published in three words that carry its generation g in
// their high 32 bits, so that a worker that arrives late (the OS ran it after
// the job was taken) fails its compare-exchange and touches nothing:
//   seats = g:taken   a worker takes slot taken + 1 while it is < threads
//   next  = g:i       the next unclaimed unit; a claim is i -> i + 1
//   done              units finished (the caller waits for all of them)
// The job's function, argument, unit count and thread count are read by a
// worker only while its claim (or seat) of generation g can still succeed; the
// caller does not publish g + 1 before every unit of g is done, so a
// successful claim pins them.
#include "core/thread_pool.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <sched.h>

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

int64_t now_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

thread_local bool t_in_unit = false;  // this thread runs a unit (or is a worker): nested calls run in place

class Pool {
 public:
  ~Pool() {
    stop_.store(true);
    gen_.fetch_add(1);
    gen_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int threads, int64_t units, Call call, void* fn) {
    std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
    if (!lock.owns_lock()) return serial(units, call, fn);
    start_workers(threads - 1);
    const uint64_t g = ++jobs_ & 0xffffffffu;
    call_.store(call, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    units_.store(units, std::memory_order_relaxed);
    threads_.store(threads, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    seats_.store(g << 32, std::memory_order_release);
    next_.store(g << 32, std::memory_order_release);
    gen_.store(uint32_t(g), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) gen_.notify_all();

    t_in_unit = true;
    const int64_t mine = claim_and_run(g, 0);
    t_in_unit = false;
    // Wait for the units workers claimed: pauses, then give the core away
    // (the worker may be waiting for it).
    if (mine < units) {
      const int64_t t0 = now_micros();
      for (int spins = 0; done_.load(std::memory_order_acquire) < units - mine; ++spins) {
        if (spins < 256 || now_micros() - t0 < 20) cpu_pause();
        else sched_yield();
      }
    }
  }

  int workers() {
    std::lock_guard<std::mutex> g(grow_);
    return int(workers_.size());
  }

 private:
  static void serial(int64_t units, Call call, void* fn) {
    const bool outer = t_in_unit;
    t_in_unit = true;
    for (int64_t u = 0; u < units; ++u) call(fn, u, 0);
    t_in_unit = outer;
  }

  void start_workers(int want) {
    std::lock_guard<std::mutex> g(grow_);
    while (int(workers_.size()) < want) workers_.emplace_back([this] { work(); });
  }

  // Claims and runs units of generation g as `slot`; returns how many it ran.
  int64_t claim_and_run(uint64_t g, int slot) {
    int64_t ran = 0;
    uint64_t w = next_.load(std::memory_order_acquire);
    for (;;) {
      if ((w >> 32) != g) break;
      const int64_t i = int64_t(w & 0xffffffffu);
      if (i >= units_.load(std::memory_order_relaxed)) break;
      if (!next_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      call_.load(std::memory_order_relaxed)(fn_.load(std::memory_order_relaxed), i, slot);
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
    int64_t idle_since = now_micros();
    for (int spins = 0;; ++spins) {
      const uint32_t g = gen_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      if (g != seen) {
        seen = g;
        join(g);
        idle_since = now_micros();
        spins = 0;
        continue;
      }
      if ((spins & 63) != 63 || now_micros() - idle_since < spin) {
        cpu_pause();
        continue;
      }
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (gen_.load(std::memory_order_seq_cst) == seen) gen_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  std::mutex busy_;  // one caller at a time (a second runs its units in place)
  std::mutex grow_;
  std::vector<std::thread> workers_;
  uint64_t jobs_ = 0;  // under busy_
  std::atomic<uint32_t> gen_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> seats_{0}, next_{0};
  std::atomic<int64_t> done_{0}, units_{0};
  std::atomic<int> threads_{0};
  std::atomic<Call> call_{nullptr};
  std::atomic<void*> fn_{nullptr};
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
  if (threads <= 1 || t_in_unit || units >= (int64_t(1) << 31)) {
    const bool outer = t_in_unit;
    t_in_unit = true;
    for (int64_t u = 0; u < units; ++u) call(fn, u, 0);
    t_in_unit = outer;
    return;
  }
  pool().run(threads, units, call, fn);
}

int pool_workers() { return pool().workers(); }

}  // namespace ffn::nn
