// Vectors whose data start on a cache line. The kernels' operands must:
// an AMX tile row or a zmm load that straddles two lines costs two accesses,
// and AMX tile loads from packed operands 16 bytes off a line boundary (where
// glibc's large allocations start) ran at 1 030 GFLOP/s against 2 390 aligned
// (bf16 tile products, 160 x 256 x 512 on one core of the Xeon of
// bench/results/2026-11-23-amx.md).
#pragma once

#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>
#include <new>
#include <vector>

namespace ffn::nn {

constexpr size_t kCacheLine = 64;

template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine)));
  }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t(kCacheLine)); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

// An allocator's construct() that default-initializes: resize leaves the new
// elements as they are (trivial types: not zeroed). A base for the scratch
// allocators (this file's and PoolAllocator).
struct DefaultInitConstruct {
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(static_cast<Args&&>(args)...);
  }
};

// The same, but resize leaves the new elements default-initialized (not
// zeroed): for per-call scratch whose every element read is written first.
// Zeroing the fused forward's ~0.5 MB of buffers was 9.5 % of an int8 call
// at T = 64. Built with FFN_POISON_SCRATCH (CMake option of that name; the
// sanitizer build of scripts/sanitize.sh sets it), new blocks are filled
// with 0xff bytes (NaN, -1, 255), and users refill them with poison() where
// a buffer is reused (the fused forward: before every token block), so that
// reading an element not yet written for the current block changes a result
// and fails a test. (In the int8 products a poisoned padding byte meets a
// zero weight and changes nothing: there the padding is not checked.)
template <typename T>
struct UninitializedAllocator : AlignedAllocator<T>, DefaultInitConstruct {
  static_assert(!std::is_same_v<T, bool>, "vector<bool> is a bitset that zeroes its words: no scratch");
  using value_type = T;
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
#ifdef FFN_POISON_SCRATCH
  T* allocate(size_t n) {
    T* p = AlignedAllocator<T>::allocate(n);
    std::memset(static_cast<void*>(p), 0xff, n * sizeof(T));
    return p;
  }
#endif
  template <typename U>
  bool operator==(const UninitializedAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using ScratchVector = std::vector<T, UninitializedAllocator<T>>;

// FFN_POISON_SCRATCH: every element back to 0xff bytes; otherwise nothing.
template <typename T>
inline void poison([[maybe_unused]] ScratchVector<T>& v) {
#ifdef FFN_POISON_SCRATCH
  if (!v.empty()) std::memset(static_cast<void*>(v.data()), 0xff, v.size() * sizeof(T));  // (data() may be null)
#endif
}

}  // namespace ffn::nn
