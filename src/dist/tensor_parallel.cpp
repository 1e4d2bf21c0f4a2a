#include "ffn/mpi.hpp"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <map>
#include <vector>

#include "io/file_util.hpp"
#include "io/safetensors.hpp"

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
  std::optional<FeedForward> local;
  comm.agreed([&] {
    const auto [first, last] = rank_shards(base.count, comm.rank(), comm.size());
    opts.shards = DffShards{base.count, first, last, 0};
    local.emplace(FeedForward::load(path, opts));
  });
  const Config& c = local->config();
  int32_t eps_bits;
  std::memcpy(&eps_bits, &c.eps, 4);
  comm.check_same({c.d_model, local->shards().d_ff, local->shards().count, int64_t(c.activation), int64_t(c.norm),
                   int64_t(c.norm_type), eps_bits, int64_t(c.bias), int64_t(local->weight_dtype())},
                  "the layer (d_model, d_ff, shards, activation, norm, norm type, eps, bias, dtype)");
  return ParallelFeedForward(Local{}, comm, std::move(*local));
}

ParallelFeedForward::ParallelFeedForward(const Comm& comm, const FeedForward& whole)
    : comm_(&comm), local_([&] {
        const auto [first, last] = rank_shards(whole.shards().count, comm.rank(), comm.size());
        return whole.shard(first, last);
      }()) {}

void ParallelFeedForward::forward(const float* x, float* y, const Shape& shape, const RunOptions& opts,
                                  ParallelTiming* timing, ForwardCache* cache) const {
  const int64_t d = local_.config().d_model;
  int64_t n = 0;
  std::vector<float>& sum = partial_;
  double t0 = 0, t1 = 0;
  comm_->agreed([&] {
    n = valid_tokens(shape);
    sum.resize(size_t(n * d));
    t0 = omp_get_wtime();
    local_.forward_partial(x, shape, sum.data(), opts, cache);
    t1 = omp_get_wtime();
  });
  comm_->agreed([&] { comm_->sum_tree(sum.data(), n, d, timing ? &timing->comm : nullptr); });
  const double t2 = omp_get_wtime();
  // The tail on every rank, on all rows: measured faster here than each rank
  // taking its slice of the rows and gathering the outputs (2026-11-23,
  // bench/results/2026-11-23-tensor-parallel.md).
  comm_->agreed([&] { local_.forward_tail(x, shape, sum.data(), y, opts, cache); });
  if (timing) timing->compute_s += (t1 - t0) + (omp_get_wtime() - t2);
}

void ParallelFeedForward::backward(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache,
                                   float* dx, Weights& grads, const RunOptions& opts, ParallelTiming* timing) const {
  const int64_t d = local_.config().d_model;
  int64_t n = 0;
  std::vector<float>& din = partial_;
  double t0 = omp_get_wtime(), t1 = 0;
  comm_->agreed([&] {
    n = valid_tokens(shape);
    din.resize(size_t(n * d));
    local_.backward_partial(x, dy, shape, cache, din.data(), grads, opts);
    t1 = omp_get_wtime();
  });
  comm_->agreed([&] { comm_->sum_tree(din.data(), n, d, timing ? &timing->comm : nullptr); });
  const double t2 = omp_get_wtime();
  comm_->agreed([&] { local_.backward_finish(x, dy, shape, cache, din.data(), dx, grads, opts); });
  if (timing) timing->compute_s += (t1 - t0) + (omp_get_wtime() - t2);
}

void write_sharded_gradients(const Comm& comm, const std::string& path, const FeedForward& local, const Weights& grads) {
  std::map<std::string, std::string> metadata;
  std::map<std::string, FeedForward::ShardedGradient> parts;
  io::SafetensorsLayout layout;
  comm.agreed([&] {
    parts = local.gradient_shards(grads, comm.rank() == 0, metadata);
    std::map<std::string, io::TensorSpec> specs;
    for (const auto& [name, p] : parts) specs[name] = io::TensorSpec{"F32", p.shape};
    layout = io::safetensors_layout(path, specs, metadata);
    if (comm.rank() != 0) return;
    // Rank 0 makes the file: its header, and its full size for the others' parts.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(path + ": cannot create: " + io::errno_text());
    const bool ok = ::pwrite(fd, layout.head.data(), layout.head.size(), 0) == ssize_t(layout.head.size()) &&
                    ::ftruncate(fd, off_t(layout.size)) == 0;
    const std::string why = io::errno_text();
    ::close(fd);
    if (!ok) throw Error(path + ": cannot write: " + why);
  });
  comm.agreed([&] {  // every rank its own pieces, each at its place
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot open for writing: " + io::errno_text());
    bool ok = true;
    for (const auto& [name, p] : parts)
      for (const FeedForward::GradientPiece& piece : p.pieces) {
        const size_t bytes = size_t(piece.count) * 4;
        const off_t at = off_t(layout.offset.at(name) + uint64_t(piece.offset) * 4);
        ok = ok && ::pwrite(fd, piece.data, bytes, at) == ssize_t(bytes);
      }
    ok = ok && ::fsync(fd) == 0;
    const std::string why = io::errno_text();
    ::close(fd);
    if (!ok) throw Error(path + ": cannot write: " + why);
  });
}

}  // namespace ffn::dist
