// The linear op on block-quantized weights (src/ops/qlinear.hpp).
#include "ops/qlinear.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "ffn/types.hpp"

namespace ffn::nn {

void qlinear_forward(const Context& ctx, std::span<const QPanels> parts, const float* x, int64_t n, float* y,
                     QActs& acts) {
  const KernelConfig& kc = ctx.reference() ? scalar_kernels() : ctx.kernels();
  const int threads = ctx.threads();
  if (n == 0 || parts.empty()) return;
  const int64_t k = parts[0].k;
  // Each part's kernel, its first row in y, and its first unit.
  constexpr int64_t kGroupsPerUnit = 4, kTokensPerUnit = 64;
  struct Part {
    QGemmFn gemm;
    int64_t row0, unit0, units;
  };
  std::vector<Part> plan;
  int64_t m = 0, gu = 0;
  for (const QPanels& w : parts) {
    if (w.k != k) throw Error("quantized product: parts of k = " + std::to_string(k) + " and " + std::to_string(w.k));
    const QGemmFn gemm = qgemm_kernel(kc, w.type);
    if (!gemm) throw Error("quantized product: no kernel for type " + ggml_type_name(uint32_t(w.type)));
    const int64_t u = (w.groups + kGroupsPerUnit - 1) / kGroupsPerUnit;
    plan.push_back({gemm, m, gu, u});
    m += w.m;
    gu += u;
  }
  if (m == 0) return;
  size_acts(n, k, acts);
  // Units: (group range of a part, token range); tokens in pieces of 64 so
  // that a prompt's work spreads over threads even with few groups. Over 64
  // tokens, the activations are quantized per piece in a job of their own
  // before the products; up to 64 (generation, short prompts) on this
  // thread, which saves a job per product (with passive OpenMP's inner
  // barrier that cost generation at 2 threads 68.8 -> 44.5 tokens/s).
  const int64_t tu = (n + kTokensPerUnit - 1) / kTokensPerUnit;
  const int64_t units = gu * tu;
  const int nt = int(std::min<int64_t>(threads, units));
  const auto products = [&](int64_t u) {
    const int64_t g = u % gu, t0 = (u / gu) * kTokensPerUnit;
    size_t p = 0;
    while (g >= plan[p].unit0 + plan[p].units) ++p;
    const QPanels& w = parts[p];
    const int64_t g0 = (g - plan[p].unit0) * kGroupsPerUnit;
    plan[p].gemm(w, acts, g0, std::min(w.groups, g0 + kGroupsPerUnit), t0, std::min(n, t0 + kTokensPerUnit),
                 y + plan[p].row0, m);
  };
  const auto quantize = [&](int64_t t0, int64_t t1) {
    kc.qacts(x, t0, t1, acts);
    half_sums(t0, t1, acts);
  };
  if (tu == 1) {
    quantize(0, n);
    parallel_units(nt, units, [&](int64_t u, int) { products(u); });
    return;
  }
  parallel_units(nt, tu, [&](int64_t u, int) { quantize(u * kTokensPerUnit, std::min(n, (u + 1) * kTokensPerUnit)); });
  parallel_units(nt, units, [&](int64_t u, int) { products(u); });
}

void qlinear_forward(const Context& ctx, const QPanels& w, const float* x, int64_t n, float* y, QActs& acts) {
  qlinear_forward(ctx, std::span<const QPanels>(&w, 1), x, n, y, acts);
}

}  // namespace ffn::nn
