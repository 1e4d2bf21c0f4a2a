// The execution context (src/backends/context.hpp).
#include "backends/context.hpp"

#include <omp.h>

#include <string>

#include "backends/cpu/isa.hpp"

namespace ffn::nn {

const KernelConfig& default_kernels() {
  static const KernelConfig& kc = kernel_config(resolve_isa(Isa::automatic));
  return kc;
}

const KernelConfig& scalar_kernels() { return kernel_config(Isa::scalar); }

Context::Context(Isa isa, int threads, Path path, const std::function<bool()>* interrupted)
    : kernels_(isa == Isa::automatic ? &default_kernels() : &kernel_config(resolve_isa(isa))),
      threads_(resolve_threads(threads)),
      reference_(path == Path::reference),
      interrupted_(interrupted) {}

Context::Context(const KernelConfig& kernels, int threads, Path path, const std::function<bool()>* interrupted)
    : kernels_(&kernels),
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
