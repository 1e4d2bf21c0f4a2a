// Tensor-parallel FFN (Megatron-LM's MLP): rank r of P holds shards
// [count·r/P, count·(r+1)/P) of d_ff — W1, Wg, b1 by rows
// (column-parallel), W2 by columns (row-parallel) — runs the fused forward
// on them (Layer::forward_partial), the partial outputs are summed across
// ranks (Comm::sum_tree, "reduce from region"), and every rank applies b2,
// dropout, residual and norm to the sum (Layer::forward_tail). The result
// is bitwise the one process's (DffShards).
#pragma once

#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "ffn/ffn.hpp"

namespace ffn::dist {

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
  ParallelFeedForward(const Comm& comm, const Layer& whole);

  // Collective: y = layer(x), x and y as Layer::forward (every rank passes
  // the same x and gets all of y).
  void forward(const float* x, float* y, const Shape& shape, const RunOptions& opts = {},
               ParallelTiming* timing = nullptr, ForwardCache* cache = nullptr) const;
  // Collective, after forward with a cache: dx (all of it, on every rank),
  // and this rank's gradients: its shards' and b2's and the norm's (the
  // same on every rank). dIn is summed across ranks as the forward's outputs.
  void backward(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache, float* dx,
                Weights& grads, const RunOptions& opts = {}, ParallelTiming* timing = nullptr) const;
  const Layer& local() const { return local_; }
  const Comm& comm() const { return *comm_; }

 private:
  struct Local {};
  ParallelFeedForward(Local, const Comm& comm, Layer local) : comm_(&comm), local_(std::move(local)) {}
  const Comm* comm_;
  Layer local_;
  mutable std::vector<float> partial_;  // the [T, d_model] sum, kept between calls (no page faults per call)
};

// Collective: the whole layer's gradient file at `path` (which must not
// exist), each rank writing its own parts (Layer::gradient_shards; b2 and the
// norm by rank 0) into it: no gather. Byte-identical to save_gradients of the
// whole layer. Errors agreed.
void write_sharded_gradients(const Comm& comm, const std::string& path, const Layer& local, const Weights& grads);

// The block of shards rank r of P holds; Error if P does not divide count.
std::pair<int64_t, int64_t> rank_shards(int64_t count, int rank, int ranks);

}  // namespace ffn::dist
