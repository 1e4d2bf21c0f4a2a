// Large float buffers kept for reuse between calls, for the process: a
// training step's forward cache ([T, d_ff] pre-activations, ~40 MB at
// T = 4096, 512 -> 2048) and backward's scratch (~90 MB) are freed at the end
// of the step and asked for again, the same sizes, at the next one; taking
// them back from the pool spares the fresh pages (page faults and the
// kernel's zeroing), ~10 ms and 8 % of fwd+bwd a step. The pool keeps at most
// kBufferPoolKeepBytes in all (oldest dropped first), matches sizes exactly,
// and is shared by all threads (a mutex).
#pragma once

#include <cstddef>
#include <new>

#include "core/aligned.hpp"

namespace ffn::nn {

// Room for one T = 4096 training step at 512 -> 2048 (cache and scratch).
constexpr size_t kBufferPoolKeepBytes = size_t(256) << 20;

void* pool_take(size_t bytes);          // a block of exactly `bytes`, reused or new
void pool_give(void* p, size_t bytes);  // back to the pool (or freed past the bound)
size_t pool_bytes();                    // bytes the pool keeps now

// An allocator for std::vector that draws from the pool and leaves elements
// default-initialized (resize does not zero them: every user writes each
// element before reading it).
template <typename T>
struct PoolAllocator : DefaultInitConstruct {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(pool_take(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { pool_give(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace ffn::nn
