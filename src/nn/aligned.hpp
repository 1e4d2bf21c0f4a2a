// Vectors whose data start on a cache line. The kernels' operands must:
// an AMX tile row or a zmm load that straddles two lines costs two accesses,
// and AMX tile loads from packed operands 16 bytes off a line boundary (where
// glibc's large allocations start) ran at 1 030 GFLOP/s against 2 390 aligned
// (bf16 tile products, 160 x 256 x 512 on one core of the Xeon of
// bench/results/2026-11-23-amx.md).
#pragma once

#include <cstddef>
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
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine))); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t(kCacheLine)); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace ffn::nn
