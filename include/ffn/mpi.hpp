// Tensor and data parallelism over MPI (library ffn_dist, built with
// -DFFN_MPI=ON: `target_link_libraries(... ffn_dist)`), in three parts:
//   ffn::dist::Comm                 the communicator and its fixed-order sums
//   ffn::dist::ParallelFeedForward  the tensor-parallel feed-forward sublayer
//   ffn::dist::MpiTeam              data-parallel training (ffn::Trainer's Team)
// How the work is split so that every split gives the same bits (DffShards,
// RowPartition) is in ffn/parallel.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ffn/feed_forward.hpp"
#include "ffn/train.hpp"

namespace ffn::dist {

// ---- the communicator --------------------------------------------------------------
// The communicator of tensor parallelism (MPI; built with -DFFN_MPI=ON).
// Layers never see it: the two conjugate operators of Megatron-LM
// (shared/STYLE.md) carry the communication — here "reduce from region",
// the sum of every rank's partial output, with a fixed order of addition
// so that the result does not depend on the rank count (DffShards).
// Time and bytes of the sums of one rank.
struct CommStats {
  double seconds = 0;
  double bytes_sent = 0;  // by this rank
  int64_t calls = 0;
};

// An error every rank throws at the same step (Comm::agree, check_same):
// after it the ranks may still meet in a barrier. Any other error on one
// rank ends the job (MPI_Abort), since its peers may be inside a collective.
struct AgreedError : Error {
  using Error::Error;
};

class Comm {
 public:
  // MPI_COMM_WORLD, MPI initialized on first use (MPI_THREAD_FUNNELED: only
  // the calling thread communicates; OpenMP threads compute) and finalized at exit.
  static const Comm& world();
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Collective, after every step that can fail on some ranks only: each rank
  // passes its error ("" if none). If any rank failed, every rank throws
  // Error("rank R: ..."): its own message, or that the lowest failed rank
  // stopped it and why. So no rank is left waiting in a later collective.
  void agree(const std::string& error) const;
  // Runs step on this rank, then agree() on whatever it threw: the form
  // every step that can fail on one rank alone takes.
  template <class F>
  void agreed(F&& step) const {
    std::string error;
    try {
      step();
    } catch (const std::exception& e) {
      error = e.what();
    }
    agree(error);
  }
  // Collective: v must be equal on every rank, else every rank throws Error
  // naming `what`, this rank's value and the first rank's that differs.
  void check_same(const std::vector<int64_t>& v, const std::string& what) const;
  // Collective "reduce from region": data[rows, width] on every rank
  // becomes the sum over the ranks, added over the fixed binary tree of the
  // ranks (split [0, P) in the middle, sum each half, add the halves) —
  // the shards' tree when rank r holds shards [count·r/P, count·(r+1)/P).
  // A reduce-scatter (each rank adds one slice of the rows, the P partials
  // of it in tree order) and an all-gather: the bytes of a ring all-reduce.
  void sum_tree(float* data, int64_t rows, int64_t width, CommStats* stats = nullptr) const;
  // Its two halves. reduce_scatter_tree: this rank's rows [begin, end) =
  // [rows·rank/P, rows·(rank+1)/P) of the sum, added over the tree, into
  // `slice`; returns {begin, end}. allgather_rows: every rank's slice
  // (those rows) into out[rows, width] on every rank.
  std::pair<int64_t, int64_t> reduce_scatter_tree(const float* data, int64_t rows, int64_t width,
                                                  std::vector<float>& slice, CommStats* stats = nullptr) const;
  void allgather_rows(const float* slice, int64_t rows, int64_t width, float* out, CommStats* stats = nullptr) const;
  // Collective: every rank's values, on rank 0 (empty elsewhere), rank-major.
  std::vector<double> gather(const std::vector<double>& mine) const;
  // Collective: every rank's values (any count per rank), on every rank, rank-major.
  std::vector<double> all_gather(const std::vector<double>& mine) const;
  // Collective: whether any rank passed true.
  bool any(bool mine) const;
  void barrier() const;
  // Collective: root's s on every rank.
  std::string broadcast(const std::string& s, int root = 0) const;
  // Ends every rank's process with `status` (after a failure not agreed).
  [[noreturn]] void abort(int status) const;

 private:
  int rank_ = 0, size_ = 1;
  // The sums' buffers, kept between calls: fresh [T, d] buffers cost their
  // page faults at every call (≈ 1 ms per 8 MB here). Only the calling
  // thread communicates (MPI_THREAD_FUNNELED).
  mutable std::vector<float> parts_, slice_;
  Comm() = default;
};

// ---- tensor parallelism -------------------------------------------------------------
// Tensor-parallel FFN (Megatron-LM's MLP): rank r of P holds shards
// [count·r/P, count·(r+1)/P) of d_ff — W1, Wg, b1 by rows
// (column-parallel), W2 by columns (row-parallel) — runs the fused forward
// on them (FeedForward::forward_partial), the partial outputs are summed across
// ranks (Comm::sum_tree, "reduce from region"), and every rank applies b2,
// dropout, residual and norm to the sum (FeedForward::forward_tail). The result
// is bitwise the one process's (DffShards).
struct ParallelTiming {
  double compute_s = 0;  // this rank's shards and the tail
  CommStats comm;        // the sums
};

class ParallelFeedForward {
 public:
  // Collective: every rank reads only its shards' bytes of the file
  // (LoadOptions::shards, count = opts.shards's or 4). Errors are agreed
  // (Comm::agree): every rank throws, naming its rank and the cause. The
  // rank count must divide the shard count.
  static ParallelFeedForward load(const Comm& comm, const std::string& path, LoadOptions opts);
  // The same from a whole layer in memory (each rank keeps its shards).
  ParallelFeedForward(const Comm& comm, const FeedForward& whole);

  // Collective: y = layer(x), x and y as FeedForward::forward (every rank passes
  // the same x and gets all of y).
  void forward(const float* x, float* y, const Shape& shape, const RunOptions& opts = {},
               ParallelTiming* timing = nullptr, ForwardCache* cache = nullptr) const;
  // Collective, after forward with a cache: dx (all of it, on every rank),
  // and this rank's gradients: its shards' and b2's and the norm's (the
  // same on every rank). dIn is summed across ranks as the forward's outputs.
  void backward(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache, float* dx,
                Weights& grads, const RunOptions& opts = {}, ParallelTiming* timing = nullptr) const;
  const FeedForward& local() const { return local_; }
  const Comm& comm() const { return *comm_; }

 private:
  struct Local {};
  ParallelFeedForward(Local, const Comm& comm, FeedForward local) : comm_(&comm), local_(std::move(local)) {}
  const Comm* comm_;
  FeedForward local_;
  mutable std::vector<float> partial_;  // the [T, d_model] sum, kept between calls (no page faults per call)
};

// Collective: the whole layer's gradient file at `path` (which must not
// exist), each rank writing its own parts (FeedForward::gradient_shards; b2 and the
// norm by rank 0) into it: no gather. Byte-identical to save_gradients of the
// whole layer. Errors agreed.
void write_sharded_gradients(const Comm& comm, const std::string& path, const FeedForward& local, const Weights& grads);

// The block of shards rank r of P holds; Error if P does not divide count.
std::pair<int64_t, int64_t> rank_shards(int64_t count, int rank, int ranks);

// ---- data parallelism ----------------------------------------------------------------
// Data parallelism over MPI: the Team of src/train's Trainer (ffn/train.hpp)
// on a Comm. Every rank trains on its slices of each batch; the gradients
// are summed over the ranks' fixed tree (Comm::sum_tree: a reduce-scatter
// and an all-gather, the bytes of a ring all-reduce), one tensor a bucket,
// after the backward. Overlapping the sums with the backward would need a
// core left to drive MPI while the backward's threads compute; on one
// machine there is none to spare (bench/results/2026-11-23-data-parallel.md).
class MpiTeam final : public Team {
 public:
  explicit MpiTeam(const Comm& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void sum_tree(float* data, int64_t n) const override { comm_.sum_tree(data, n, 1, &stats_); }
  std::vector<double> all_gather(const std::vector<double>& mine) const override { return comm_.all_gather(mine); }
  bool any(bool mine) const override { return comm_.any(mine); }
  // "gradient sums: S s in C calls on the slowest rank, B MB sent per rank".
  std::string summary() const override;
  // Time in and bytes sent by this rank's gradient sums so far.
  const CommStats& stats() const { return stats_; }

 private:
  const Comm& comm_;
  mutable CommStats stats_;
};

}  // namespace ffn::dist
