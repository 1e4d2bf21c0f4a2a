// One key/value cache, paged (issue 46, part 3; vLLM's PagedAttention on a
// CPU): per layer, K and V rows of `kvd` floats in pages of kPage positions.
// Each live sequence holds a list of pages, the same page numbers in every
// layer, so its memory grows a page at a time, up to `capacity` positions,
// and sequences join and leave between any two steps; the pages a sequence
// leaves are reused. select() reorders and copies sequences (beams), moving
// page lists and copying only repeats.
//
// A page holds kPage positions, the fast attention's key tile (256 keys,
// src/ops/attention.cpp), or, when the capacity is smaller, the capacity
// rounded up to 16: its online softmax counts tiles from position 0, and a
// tile never spans two pages, so a paged sequence's outputs are bitwise
// those of the same sequence in one contiguous cache
// (AttentionShape::kv_pages). The rows come from the buffer pool
// (core/buffer_pool.hpp), not zeroed: a cache made again at every call
// (translate, generate) takes the same blocks back instead of new pages
// from the kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer_pool.hpp"

namespace ffn::nn {

class KvCache {
 public:
  static constexpr int64_t kPage = 256;

  KvCache() = default;
  // No sequences yet, room for `sequences` of `capacity` positions made up
  // front (more pages come as needed); Error for non-positive sizes.
  KvCache(int64_t layers, int64_t kvd, int64_t capacity, int64_t sequences = 0);

  int64_t layers() const { return layers_; }
  int64_t kvd() const { return kvd_; }
  int64_t capacity() const { return cap_; }  // the most positions a sequence may hold
  int64_t page() const { return page_; }      // positions per page
  int64_t live() const { return int64_t(len_.size()); }
  int64_t length(int64_t i) const { return len_.at(size_t(i)); }

  // A new empty sequence after the others; returns its index.
  int64_t join();
  // Drops sequence i (its pages are free again); the later ones move down one.
  void leave(int64_t i);
  // A new sequence after the others holding a copy of sequence i's first
  // len positions (≤ length(i)): its own pages, the rows copied; returns its index.
  int64_t fork(int64_t i, int64_t len);
  // New sequence i is old sequence from[i] (any order, repeats allowed).
  void select(const std::vector<int64_t>& from);
  // Room for sequence i to hold len positions (len ≤ capacity, else Error),
  // then its length is len. K and V rows past the old length are the
  // caller's to write. May move every layer's rows: take k()/v() after.
  void resize(int64_t i, int64_t len);

  // One step's new positions: live sequence i grows by counts[i] (resize);
  // unless done() is called, the destructor gives the old lengths back, so
  // an error during the step leaves every sequence as it was.
  class Step {
   public:
    Step(KvCache& cache, const std::vector<int64_t>& counts);
    ~Step();
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;
    void done() { done_ = true; }

   private:
    KvCache& cache_;
    std::vector<int64_t> old_;
    bool done_ = false;
  };

  // The row of K and V (k(layer) + row · kvd) holding position pos of sequence i.
  int64_t row(int64_t i, int64_t pos) const { return pages_[size_t(i)][size_t(pos / page_)] * page_ + pos % page_; }
  float* k(int64_t layer) { return k_[size_t(layer)].data(); }
  float* v(int64_t layer) { return v_[size_t(layer)].data(); }
  // Each live sequence's pages, for AttentionShape::kv_pages.
  const std::vector<std::vector<int64_t>>& pages() const { return pages_; }
  // Bytes of K and V held (every page allocated, used or free).
  size_t bytes() const;
  // The pages a sequence of len positions holds.
  int64_t pages_for(int64_t len) const;
  // Pages held by live sequences, and the most there may be (0: no limit).
  // With a limit, a step or fork that would need more throws Error before
  // anything changes (a server keeps its KV memory to --kv-memory).
  int64_t pages_used() const { return allocated_ - int64_t(free_.size()); }
  int64_t page_limit() const { return limit_; }
  void set_page_limit(int64_t pages);
  // Bytes of one page in every layer, K and V.
  size_t page_bytes() const { return size_t(2 * layers_ * page_ * kvd_) * sizeof(float); }

 private:
  // n free page numbers, growing every layer's arrays when the free list is short.
  std::vector<int64_t> take_pages(int64_t n);
  void grow(int64_t pages);  // `pages` more pages in every layer, free

  int64_t layers_ = 0, kvd_ = 0, cap_ = 0, page_ = kPage, allocated_ = 0, limit_ = 0;  // allocated_: pages in each layer's arrays
  std::vector<int64_t> free_;
  std::vector<std::vector<int64_t>> pages_;  // per live sequence
  std::vector<int64_t> len_;
  std::vector<std::vector<float, PoolAllocator<float>>> k_, v_;  // per layer [allocated_ · page_, kvd]
};

}  // namespace ffn::nn
