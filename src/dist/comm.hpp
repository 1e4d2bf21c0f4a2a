// The communicator of tensor parallelism (MPI; built with -DFFN_MPI=ON).
// Layers never see it: the two conjugate operators of Megatron-LM
// (shared/STYLE.md) carry the communication — here "reduce from region",
// the sum of every rank's partial output, with a fixed order of addition
// so that the result does not depend on the rank count (DffShards).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ffn/ffn.hpp"

namespace ffn::dist {

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

}  // namespace ffn::dist
