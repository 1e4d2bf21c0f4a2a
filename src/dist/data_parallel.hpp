// Data parallelism over MPI: the Team of src/train's Trainer (ffn/train.hpp)
// on a Comm. Every rank trains on its slices of each batch; the gradients
// are summed over the ranks' fixed tree (Comm::sum_tree: a reduce-scatter
// and an all-gather, the bytes of a ring all-reduce), one tensor a bucket,
// after the backward. Overlapping the sums with the backward would need a
// core left to drive MPI while the backward's threads compute; on one
// machine there is none to spare (bench/results/2026-11-23-data-parallel.md).
#pragma once

#include "dist/comm.hpp"
#include "ffn/train.hpp"

namespace ffn::dist {

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
