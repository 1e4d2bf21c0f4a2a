#include "core/buffer_pool.hpp"

#include <cstdlib>
#include <deque>
#include <mutex>
#include <utility>

namespace ffn::nn {
namespace {

struct Pool {
  std::mutex mutex;
  std::deque<std::pair<void*, size_t>> free;  // oldest first
  size_t bytes = 0;
};

// Never destroyed: a buffer may be given back during static destruction.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

void* pool_take(size_t bytes) {
  if (bytes == 0) bytes = 1;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    for (auto it = p.free.rbegin(); it != p.free.rend(); ++it) {
      if (it->second != bytes) continue;
      void* block = it->first;
      p.bytes -= bytes;
      p.free.erase(std::next(it).base());
      return block;
    }
  }
  void* block = ::operator new(bytes, std::align_val_t(64));
  return block;
}

void pool_give(void* block, size_t bytes) {
  if (!block) return;
  if (bytes == 0) bytes = 1;
  if (bytes > kBufferPoolKeepBytes) {
    ::operator delete(block, std::align_val_t(64));
    return;
  }
  std::deque<std::pair<void*, size_t>> dropped;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    p.free.emplace_back(block, bytes);
    p.bytes += bytes;
    while (p.bytes > kBufferPoolKeepBytes) {
      dropped.push_back(p.free.front());
      p.bytes -= p.free.front().second;
      p.free.pop_front();
    }
  }
  for (const auto& [b, n] : dropped) ::operator delete(b, std::align_val_t(64));
}

size_t pool_bytes() {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  return p.bytes;
}

}  // namespace ffn::nn
