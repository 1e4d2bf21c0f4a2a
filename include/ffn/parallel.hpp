// How ffn splits work so that every split gives the same bits: the d_ff
// shards of tensor parallelism (DffShards) and the rows a data-parallel
// process runs (RowPartition). The MPI code that uses them is in ffn/mpi.hpp
// (library ffn_dist); a program without MPI can use them too, e.g. to run one
// block of shards or one slice of a batch and add the results itself.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ffn {

// d_ff in shards (tensor parallelism, Megatron-LM's column- then row-parallel
// MLP): the hidden units are cut into `count` shards of whole 256-unit chunks
// (shard s: chunks [C·s/count, C·(s+1)/count) of C = ⌈d_ff/256⌉), each
// shard's W2 product is a partial sum of the output, and the partials are
// added over a fixed binary tree ((p₀ + p₁) + (p₂ + p₃) for 4). Every layer
// computes this way, so a process holding all shards and P processes each
// holding an aligned block of count/P of them (adding their sums over the
// same tree) get the same bits. A layer made from one block of the shards'
// weights (d_ff = the block's hidden units) records it here.
constexpr int64_t kDffShardChunk = 256;
struct DffShards {
  int64_t count = 4;              // a power of two; fixed, so results do not depend on how many hold them
  int64_t first = 0, last = 4;    // the shards this layer holds: [first, last)
  int64_t d_ff = 0;               // the global d_ff (0: the layer's own, all shards)
  bool whole() const { return first == 0 && last == count; }
  // Throws Error (prefixed by what) unless count is a power of two up to 64
  // and [first, last) an aligned block: a power-of-two size that divides
  // first — a subtree of the shards' tree, so blocks add up to its bits.
  void validate(const std::string& what) const;
  // The global hidden units of shards [a, b): [begin, end).
  static std::pair<int64_t, int64_t> units(int64_t d_ff, int64_t count, int64_t a, int64_t b);
};

// The rows of a batch this process runs, for data parallelism
// (Trainer::set_team, RunOptions::partition; default: the whole batch).
struct RowPartition {
  // A process that runs rows [a, b) of a batch passes position_offset = a,
  // so its dropout masks are the whole batch's rows' (every key global).
  // Added to every position in the keys only.
  int64_t position_offset = 0;
  // backward: the weight gradients (sums over tokens) summed per token slice,
  // in token order, and the slices' sums added over their binary tree (split
  // in the middle, as DffShards'): boundaries 0 = s_0 <= s_1 <= ... <= s_k =
  // the valid tokens (a slice may be empty). A process given a subtree's
  // slices computes that subtree's sum bit for bit, so ranks holding the
  // slices of one batch and adding their sums over the same tree
  // (dist::Comm::sum_tree) get the one-process result. Empty: one sum over
  // all tokens.
  std::vector<int64_t> token_slices;
};

}  // namespace ffn
