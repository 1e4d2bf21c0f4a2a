// The engine's threads: a pool of workers that take work units from a shared
// counter, so that a worker the OS has not scheduled holds nobody up.
//
// Why not OpenMP's teams: a team region ends at a barrier that every thread
// of the team must reach, and a static schedule gives each thread its share
// in advance. On a machine where other processes hold the cores, one team
// thread waits for a time slice at every region (a language model runs ~150
// regions a token), so two threads ran 1.8-2.1x slower than one beside one
// busy process and ~100x slower at nice 19 beside two (issue 45). Here the
// caller is one of the threads and takes units too; a worker joins the job
// only if it is running, and the caller waits only for units a worker has
// already claimed. A busy machine therefore costs at most the work that one
// preempted unit holds, and a machine with free cores gets every thread.
//
// Results: a unit's work is the same whoever runs it (`slot` only picks the
// caller's per-thread scratch), so outputs do not depend on which thread ran
// what; every op that uses the pool keeps that rule (tests/core/test_thread_pool.cpp,
// and the ops' thread-count tests).
//
// Waiting: an idle worker spins on the job word (a pause loop) for
// pool_spin_micros() after its last job, then sleeps on it (a futex, through
// std::atomic::wait); generation's back-to-back products therefore never pay
// a wake-up, and an idle process sleeps. The caller waits for claimed units
// with pauses, yielding the core after 20 us in case the worker it waits for
// shares it.
//
// A busy machine: the caller measures whether the team pays (the jobs' time
// against its own rate per unit times all units, over 2 ms windows); where it
// saves less than a quarter, the caller runs the jobs alone for a back-off
// (5 ms, doubling to 1 s while the team keeps losing) and the workers sleep.
// Measured in bench/results/2026-11-26-busy-machine.md.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace ffn::nn {

// How long an idle worker spins before it sleeps (microseconds). Overridable
// with FFN_SPIN_US (0: sleep at once, the passive policy).
int64_t pool_spin_micros();

// Runs fn(unit, slot) for every unit in [0, units) on at most `threads`
// threads, the caller included (slot 0; workers get slots 1 .. threads - 1,
// each slot on one thread at a time). Returns when every unit has run.
// threads <= 1, units <= 1, a call from inside a unit, or a second caller
// while the pool is busy run every unit on the calling thread, in order.
// fn must not throw (as in an OpenMP region).
void parallel_units_erased(int threads, int64_t units, void (*call)(void*, int64_t, int), void* fn);

template <typename Fn>
void parallel_units(int threads, int64_t units, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  parallel_units_erased(threads, units, [](void* f, int64_t u, int slot) { (*static_cast<F*>(f))(u, slot); },
                        const_cast<void*>(static_cast<const void*>(&fn)));
}

// fn(begin, end, slot) over [0, n) cut into pieces of `grain` (the last
// shorter): a parallel for loop whose iterations are independent.
template <typename Fn>
void parallel_range(int threads, int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  grain = grain < 1 ? 1 : grain;
  const int64_t pieces = (n + grain - 1) / grain;
  parallel_units(threads, pieces, [&](int64_t p, int slot) {
    const int64_t b = p * grain;
    fn(b, b + grain < n ? b + grain : n, slot);
  });
}

// A grain that cuts n iterations into about 4 pieces per thread (so that a
// thread the OS delays leaves most of its share to the others), at least `min`.
inline int64_t grain_for(int64_t n, int threads, int64_t min = 1) {
  const int64_t g = (n + 4 * int64_t(threads) - 1) / (4 * int64_t(threads > 0 ? threads : 1));
  return g < min ? min : g;
}

// Threads the pool has started (workers, not counting callers); for tests.
int pool_workers();
// Jobs the team ran, jobs the caller ran alone because the team did not pay
// (other processes held the cores), and the spells alone; for tests and
// diagnostics (FFN_POOL_STATS=1 prints them to stderr at exit).
struct PoolStats {
  int64_t team_jobs, alone_jobs, spells_alone;
  int64_t crowded_spells;  // spells alone begun without trying the team: the caller was preempted (oversubscribed cores)
};
PoolStats pool_stats();

}  // namespace ffn::nn
