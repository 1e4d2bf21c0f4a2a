// The execution context (src/backends/context.hpp).
#include "backends/context.hpp"

#include <omp.h>

#include <atomic>
#include <string>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "ffn/diagnostics.hpp"

namespace ffn::nn {

namespace {
// One bit per Isa value: the kernel sets contexts were made on (the kernel report).
std::atomic<uint32_t> g_isas_run{0};
const KernelConfig* noted(const KernelConfig* kc) {
  const uint32_t bit = 1u << unsigned(kc->isa);
  // A load first: every call makes a context, and the bit is set after the first.
  if (!(g_isas_run.load(std::memory_order_relaxed) & bit)) g_isas_run.fetch_or(bit, std::memory_order_relaxed);
  return kc;
}
}  // namespace

const KernelConfig& default_kernels() {
  static const KernelConfig& kc = kernel_config(resolve_isa(Isa::automatic));
  return kc;
}

const KernelConfig& scalar_kernels() { return *noted(&kernel_config(Isa::scalar)); }


Context::Context(Isa isa, int threads, Path path, const std::function<bool()>* interrupted)
    : kernels_(noted(isa == Isa::automatic ? &default_kernels() : &kernel_config(resolve_isa(isa)))),
      threads_(resolve_threads(threads)),
      reference_(path == Path::reference),
      interrupted_(interrupted) {}

Context::Context(const KernelConfig& kernels, int threads, Path path, const std::function<bool()>* interrupted)
    : kernels_(noted(&kernels)),
      threads_(resolve_threads(threads)),
      reference_(path == Path::reference),
      interrupted_(interrupted) {}

Context::Context(const RunOptions& opts) : Context(opts.isa, opts.threads, opts.path, &opts.interrupted) {}

Context Context::with_threads(int threads) const {
  Context c = *this;
  c.threads_ = threads < 1 ? 1 : threads;
  return c;
}

const std::function<bool()>& Context::interrupted() const {
  static const std::function<bool()> none;
  return interrupted_ ? *interrupted_ : none;
}

}  // namespace ffn::nn

namespace ffn {

std::vector<Isa> isas_run() {
  const uint32_t bits = nn::g_isas_run.load(std::memory_order_relaxed);
  std::vector<Isa> v;
  for (Isa i : all_isas())
    if (bits & (1u << unsigned(i))) v.push_back(i);
  return v;
}

}  // namespace ffn
