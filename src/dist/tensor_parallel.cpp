#include "dist/tensor_parallel.hpp"

#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

namespace ffn::dist {

std::pair<int64_t, int64_t> rank_shards(int64_t count, int rank, int ranks) {
  if (ranks < 1 || count % ranks != 0)
    throw Error(std::to_string(ranks) + " ranks do not divide the " +
                std::to_string(count) + " shards of d_ff (run 1, 2 or 4 ranks: a divisor of " + std::to_string(count) +
                ")");
  return {count * rank / ranks, count * (rank + 1) / ranks};
}

ParallelFeedForward ParallelFeedForward::load(const Comm& comm, const std::string& path, LoadOptions opts) {
  const DffShards base = opts.shards.value_or(DffShards{});
  std::string error;
  std::optional<Layer> local;
  try {
    const auto [first, last] = rank_shards(base.count, comm.rank(), comm.size());
    opts.shards = DffShards{base.count, first, last, 0};
    local.emplace(Layer::load(path, opts));
  } catch (const std::exception& e) {
    error = e.what();
  }
  comm.agree(error);
  const Config& c = local->config();
  int32_t eps_bits;
  std::memcpy(&eps_bits, &c.eps, 4);
  comm.check_same({c.d_model, local->shards().d_ff, local->shards().count, int64_t(c.activation), int64_t(c.norm),
                   int64_t(c.norm_type), eps_bits, int64_t(c.bias), int64_t(local->weight_dtype())},
                  "the layer (d_model, d_ff, shards, activation, norm, norm type, eps, bias, dtype)");
  return ParallelFeedForward(Local{}, comm, std::move(*local));
}

ParallelFeedForward::ParallelFeedForward(const Comm& comm, const Layer& whole)
    : comm_(&comm), local_([&] {
        const auto [first, last] = rank_shards(whole.shards().count, comm.rank(), comm.size());
        return whole.shard(first, last);
      }()) {}

void ParallelFeedForward::forward(const float* x, float* y, const Shape& shape, const RunOptions& opts,
                                  ParallelTiming* timing) const {
  // Each step that can fail on one rank alone (bad input, memory) is agreed
  // before the next collective, so no rank waits in the sum for a failed one.
  auto agreed = [&](auto&& step) {
    std::string error;
    try {
      step();
    } catch (const std::exception& e) {
      error = e.what();
    }
    comm_->agree(error);
  };
  const int64_t d = local_.config().d_model;
  int64_t n = 0;
  std::vector<float> sum;
  double t0 = 0, t1 = 0;
  agreed([&] {
    n = valid_tokens(shape);
    sum.resize(size_t(n * d));
    t0 = omp_get_wtime();
    local_.forward_partial(x, shape, sum.data(), opts);
    t1 = omp_get_wtime();
  });
  agreed([&] { comm_->sum_tree(sum.data(), n, d, timing ? &timing->comm : nullptr); });
  const double t2 = omp_get_wtime();
  // The tail on every rank, on all rows: measured faster here than each rank
  // taking its slice of the rows and gathering the outputs (2026-11-23,
  // bench/results/2026-11-23-tensor-parallel.md).
  agreed([&] { local_.forward_tail(x, shape, sum.data(), y, opts); });
  if (timing) timing->compute_s += (t1 - t0) + (omp_get_wtime() - t2);
}

}  // namespace ffn::dist
