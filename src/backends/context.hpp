// The execution context that every op receives (issue 45), as a ggml op gets
// its backend and thread pool and a CTranslate2 op its device:
//   - the kernel set, chosen once: Isa::automatic is FFN_ISA or the best the
//     CPU has, resolved on the first call of the process; a named ISA (the
//     tests, --isa) is looked up in the registry (src/backends/cpu/kernel_config.cpp);
//   - the threads: how many a call may use, on the engine's pool
//     (src/core/thread_pool.hpp: units taken as they come, the caller alone
//     where other processes hold the cores);
//   - the path: the kernels, or the plain reference every kernel is tested
//     against (Path::reference);
//   - the interrupt hook (RunOptions::interrupted), asked on the calling
//     thread between pieces of work, never inside a parallel job.
// Scratch comes from the process's buffer pool (src/core/buffer_pool.hpp)
// through ScratchVector and Buffer, whichever thread asks.
//
// A context is made once per public call (FeedForward::forward,
// Encoder::forward, CausalLM::extend, ...) from its RunOptions and passed
// down; modules and ops never choose kernels or thread counts themselves. A
// second device would add its kernel set here and its op implementations
// under src/backends/<device>/ (CONTRIBUTING.md, "add an ISA or a backend").
#pragma once

#include <functional>
#include <utility>

#include "backends/cpu/kernel_config.hpp"
#include "core/thread_pool.hpp"
#include "ffn/types.hpp"

namespace ffn::nn {

class Context {
 public:
  // threads: 0 = all hardware threads (OpenMP's count: OMP_NUM_THREADS if set),
  // else 1..kMaxThreads (Error otherwise). interrupted may be null or empty.
  Context(Isa isa, int threads, Path path = Path::automatic, const std::function<bool()>* interrupted = nullptr);
  // On a kernel set given by itself (one of kernel_sets(), a registered set
  // included: tests/backends/test_backend_ops.cpp).
  Context(const KernelConfig& kernels, int threads, Path path = Path::automatic,
          const std::function<bool()>* interrupted = nullptr);
  // From a call's options: isa, threads, path and interrupted.
  explicit Context(const RunOptions& opts);

  const KernelConfig& kernels() const { return *kernels_; }
  Isa isa() const { return kernels_->isa; }
  int threads() const { return threads_; }
  bool reference() const { return reference_; }
  // The same context with another thread count (at least 1).
  Context with_threads(int threads) const;

  // Whether a caller may stop the call, and the question itself: true when
  // the hook says stop (callers throw Interrupted at a safe point).
  bool interruptible() const { return interrupted_ && *interrupted_; }
  bool stop_requested() const { return interruptible() && (*interrupted_)(); }
  const std::function<bool()>& interrupted() const;

  // fn(unit, slot) for every unit on this context's threads
  // (core/thread_pool.hpp); slot < threads() picks a thread's scratch.
  template <typename Fn>
  void parallel_units(int64_t units, Fn&& fn) const {
    nn::parallel_units(threads_, units, std::forward<Fn>(fn));
  }
  // fn(begin, end, slot) over [0, n) in pieces of grain.
  template <typename Fn>
  void parallel_range(int64_t n, int64_t grain, Fn&& fn) const {
    nn::parallel_range(threads_, n, grain, std::forward<Fn>(fn));
  }

 private:
  const KernelConfig* kernels_;
  int threads_;
  bool reference_;
  const std::function<bool()>* interrupted_;
};

// The kernel set of Isa::automatic, resolved once per process.
const KernelConfig& default_kernels();
// The scalar kernel set: the reference of the quantized product's integer rule.
const KernelConfig& scalar_kernels();

}  // namespace ffn::nn
