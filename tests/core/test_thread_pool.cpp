// The engine's thread pool (src/core/thread_pool.hpp): every unit runs exactly
// once, slots stay below the thread count and are never shared by two threads
// at a time, nested and concurrent callers run in place, and a worker the OS
// holds back does not hold up the caller.
#include <gtest/gtest.h>

#include <cstdio>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"

using namespace ffn::nn;

TEST(ThreadPool, EveryUnitOnceSlotsInRange) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t units : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> ran(static_cast<size_t>(units));
      std::vector<std::atomic<int>> in_slot(8);
      std::atomic<int> bad{0};
      parallel_units(threads, units, [&](int64_t u, int slot) {
        if (slot < 0 || slot >= threads) bad.fetch_add(1);
        else if (in_slot[size_t(slot)].fetch_add(1) != 0) bad.fetch_add(1);  // two threads in one slot
        ran[size_t(u)].fetch_add(1);
        if (slot >= 0 && slot < threads) in_slot[size_t(slot)].fetch_sub(1);
      });
      EXPECT_EQ(bad.load(), 0) << threads << " threads, " << units << " units";
      for (int64_t u = 0; u < units; ++u) ASSERT_EQ(ran[size_t(u)].load(), 1) << "unit " << u;
    }
  }
}

TEST(ThreadPool, ManyJobsBackToBack) {
  // Generation's pattern: thousands of small jobs in a row; a lost wake-up or a
  // late worker taking a unit of the next job shows up as a wrong sum.
  std::vector<int64_t> out(64);
  int64_t total = 0;
  for (int job = 0; job < 20000; ++job) {
    parallel_units(2, 64, [&](int64_t u, int) { out[size_t(u)] = job + u; });
    for (int64_t u = 0; u < 64; ++u) total += out[size_t(u)] - job - u;
  }
  EXPECT_EQ(total, 0);
}

TEST(ThreadPool, RangeCoversEachIndexOnce) {
  for (int64_t n : {1, 5, 63, 64, 65, 1001}) {
    std::vector<int> hit(static_cast<size_t>(n), 0);
    parallel_range(2, n, grain_for(n, 2), [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ++hit[size_t(i)];
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hit[size_t(i)], 1) << "n " << n << " index " << i;
  }
  EXPECT_EQ(grain_for(100, 2), 13);
  EXPECT_EQ(grain_for(3, 2, 8), 8);
}

TEST(ThreadPool, NestedCallsRunInPlace) {
  std::atomic<int> inner{0};
  parallel_units(2, 4, [&](int64_t, int) {
    const auto me = std::this_thread::get_id();
    parallel_units(2, 3, [&](int64_t, int slot) {
      EXPECT_EQ(slot, 0);
      EXPECT_EQ(std::this_thread::get_id(), me);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 12);
}

TEST(ThreadPool, ConcurrentCallersBothFinish) {
  std::atomic<int64_t> sum{0};
  auto job = [&] {
    for (int r = 0; r < 200; ++r) parallel_units(2, 16, [&](int64_t u, int) { sum.fetch_add(u); });
  };
  std::thread a(job), b(job);
  a.join();
  b.join();
  EXPECT_EQ(sum.load(), 2 * 200 * (15 * 16 / 2));
}

// A unit that stalls on a worker (as if the OS had preempted it) delays only
// that unit: the caller runs the rest meanwhile. With a static split the caller
// would have waited for the stalled thread's whole share (100 of 200 units).
TEST(ThreadPool, CallerTakesTheUnitsAStalledWorkerLeaves) {
  const auto caller = std::this_thread::get_id();
  const auto busy = [](std::chrono::microseconds us) {
    const auto end = std::chrono::steady_clock::now() + us;
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  // Until the worker joins a job (a busy machine, or the pool going on alone
  // after an earlier test's stalls, can keep it out for up to a second).
  bool exercised = false;
  const auto start = std::chrono::steady_clock::now();
  while (!exercised && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    parallel_units(2, 2, [&](int64_t, int) { busy(std::chrono::microseconds(200)); });  // the worker is awake
    std::atomic<int> by_caller{0};
    std::atomic<bool> stalled{false};
    parallel_units(2, 200, [&](int64_t, int) {
      if (std::this_thread::get_id() == caller) {
        by_caller.fetch_add(1);
        busy(std::chrono::microseconds(20));
      } else if (!stalled.exchange(true)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    if (!stalled.load()) continue;  // the worker did not join this job (the machine is busy): again
    exercised = true;
    EXPECT_GE(by_caller.load(), 150);
  }
  EXPECT_TRUE(exercised) << "the worker never joined a job in 10 s";
}

// The caller goes on alone when the team does not pay (here: a worker's unit
// takes 3 ms, as if the OS had preempted it, against 20 us on the caller), and
// takes the workers back once they keep up again. Without the adaptation
// every job would wait 3 ms for the worker's unit.
TEST(ThreadPool, GoesOnAloneWhileTheTeamLosesAndComesBack) {
  const auto caller = std::this_thread::get_id();
  const auto busy = [](std::chrono::microseconds us) {
    const auto end = std::chrono::steady_clock::now() + us;
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  const PoolStats before = pool_stats();
  for (int job = 0; job < 60; ++job)
    parallel_units(2, 8, [&](int64_t, int) {
      if (std::this_thread::get_id() == caller) busy(std::chrono::microseconds(20));
      else std::this_thread::sleep_for(std::chrono::milliseconds(3));
    });
  // Most of the 60 jobs ran on the caller alone (whether this test's stalls
  // began the spell or an earlier test's had).
  const PoolStats slow = pool_stats();
  EXPECT_GE(slow.alone_jobs - before.alone_jobs, 30);
  // Workers as fast as the caller: within a few back-offs (at most 1 s each,
  // here far less) the team runs the jobs again.
  // (Where other processes keep this one's cores busy, e.g. ctest -j beside
  // it, the caller is preempted in its spells and rightly stays alone: the
  // pool counts those spells as crowded.)
  std::atomic<int64_t> by_workers{0};
  const auto start = std::chrono::steady_clock::now();
  while (by_workers.load() == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    parallel_units(2, 8, [&](int64_t, int) {
      busy(std::chrono::microseconds(50));
      if (std::this_thread::get_id() != caller) by_workers.fetch_add(1);
    });
  const int64_t crowded = pool_stats().crowded_spells - slow.crowded_spells;
  if (by_workers.load() == 0 && crowded > 0)
    std::printf("[ INFO     ] the team did not come back in 10 s: the caller was preempted in %lld spells "
                "(other processes held the cores)\n", (long long)crowded);
  EXPECT_TRUE(by_workers.load() > 0 || crowded > 0) << "the team never came back";
}

// Where the caller itself is preempted while it runs alone (more runnable
// threads than cores: here 2 per core spin in this process), a spell's end
// starts the next without trying the team (PoolStats::crowded_spells); when
// the cores are free again, the team comes back.
TEST(ThreadPool, StaysAloneWhileTheCallerIsPreempted) {
  const auto busy = [](std::chrono::microseconds us) {
    const auto end = std::chrono::steady_clock::now() + us;
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  const PoolStats before = pool_stats();
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  const unsigned cores = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  for (unsigned i = 0; i < 2 * cores; ++i)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  const auto start = std::chrono::steady_clock::now();
  while (pool_stats().crowded_spells == before.crowded_spells &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    parallel_units(2, 8, [&](int64_t, int) { busy(std::chrono::microseconds(50)); });
  stop.store(true);
  for (std::thread& t : spinners) t.join();
  EXPECT_GT(pool_stats().crowded_spells, before.crowded_spells)
      << "the caller shared " << cores << " cores with " << 2 * cores << " spinning threads for 10 s and always tried the team";
}
