// The linear op on block-quantized weights (src/ops/qlinear.hpp).
#include "ops/qlinear.hpp"

#include <algorithm>

#include "core/thread_pool.hpp"
#include "ffn/types.hpp"

namespace ffn::nn {

void qlinear_forward(const Context& ctx, const QPanels& w, const float* x, int64_t n, float* y, QActs& acts) {
  const KernelConfig& kc = ctx.reference() ? scalar_kernels() : ctx.kernels();
  const int threads = ctx.threads();
  if (n == 0 || w.m == 0) return;
  const QGemmFn gemm = qgemm_kernel(kc, w.type);
  if (!gemm) throw Error("quantized product: no kernel for type " + ggml_type_name(uint32_t(w.type)));
  size_acts(n, w.k, acts);
  // Units: (group range, token range); tokens in pieces of 64 so that a
  // prompt's work spreads over threads even with few groups. Over 64 tokens,
  // the activations are quantized per piece in a job of their own before the
  // products; up to 64 (generation, short prompts) on this thread, which
  // saves a job per product (with passive OpenMP's inner barrier that cost
  // generation at 2 threads 68.8 -> 44.5 tokens/s).
  constexpr int64_t kGroupsPerUnit = 4, kTokensPerUnit = 64;
  const int64_t gu = (w.groups + kGroupsPerUnit - 1) / kGroupsPerUnit, tu = (n + kTokensPerUnit - 1) / kTokensPerUnit;
  const int64_t units = gu * tu;
  const int nt = int(std::min<int64_t>(threads, units));
  const auto products = [&](int64_t u) {
    const int64_t g0 = (u % gu) * kGroupsPerUnit, t0 = (u / gu) * kTokensPerUnit;
    gemm(w, acts, g0, std::min(w.groups, g0 + kGroupsPerUnit), t0, std::min(n, t0 + kTokensPerUnit), y, w.m);
  };
  if (tu == 1) {
    kc.qacts(x, 0, n, acts);
    parallel_units(nt, units, [&](int64_t u, int) { products(u); });
    return;
  }
  parallel_units(nt, tu, [&](int64_t u, int) {
    kc.qacts(x, u * kTokensPerUnit, std::min(n, (u + 1) * kTokensPerUnit), acts);
  });
  parallel_units(nt, units, [&](int64_t u, int) { products(u); });
}

}  // namespace ffn::nn
