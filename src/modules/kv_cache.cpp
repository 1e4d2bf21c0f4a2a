// The paged key/value cache (src/modules/kv_cache.hpp).
#include "modules/kv_cache.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "ffn/types.hpp"

namespace ffn::nn {

KvCache::KvCache(int64_t layers, int64_t kvd, int64_t capacity, int64_t sequences)
    : layers_(layers), kvd_(kvd), cap_(capacity), k_(size_t(std::max<int64_t>(layers, 0))),
      v_(size_t(std::max<int64_t>(layers, 0))) {
  if (layers < 1 || kvd < 1 || capacity < 1 || sequences < 0)
    throw Error("KV cache: layers, width and capacity must be at least 1, got " + std::to_string(layers) + ", " +
                std::to_string(kvd) + ", " + std::to_string(capacity));
  page_ = capacity < kPage ? (capacity + 15) / 16 * 16 : kPage;
  grow(sequences * pages_for(capacity));  // made up front, free until taken
}

int64_t KvCache::pages_for(int64_t len) const { return (len + page_ - 1) / page_; }

void KvCache::grow(int64_t more) {
  if (more <= 0) return;
  const int64_t total = allocated_ + more;
  const size_t floats = size_t(total * page_ * kvd_);
  for (int64_t l = 0; l < layers_; ++l) {
    k_[size_t(l)].resize(floats);
    v_[size_t(l)].resize(floats);
  }
  for (int64_t p = allocated_; p < total; ++p) free_.push_back(p);
  allocated_ = total;
}

int64_t KvCache::join() {
  pages_.emplace_back();
  len_.push_back(0);
  return live() - 1;
}

void KvCache::leave(int64_t i) {
  if (i < 0 || i >= live())
    throw Error("KV cache: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  free_.insert(free_.end(), pages_[size_t(i)].begin(), pages_[size_t(i)].end());
  pages_.erase(pages_.begin() + i);
  len_.erase(len_.begin() + i);
}

void KvCache::set_page_limit(int64_t pages) {
  if (pages < 0) throw Error("KV cache: the page limit must be 0 (none) or more, got " + std::to_string(pages));
  limit_ = pages;
}

int64_t KvCache::fork(int64_t i, int64_t len) {
  if (i < 0 || i >= live())
    throw Error("KV cache: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  if (len < 0 || len > len_[size_t(i)])
    throw Error("KV cache: sequence " + std::to_string(i) + " holds " + std::to_string(len_[size_t(i)]) +
                " positions, cannot copy " + std::to_string(len));
  const int64_t n = pages_for(len);
  std::vector<int64_t> mine = take_pages(n);  // (may move every layer's rows)
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t p = 0; p < n; ++p) {
      const int64_t rows = std::min(page_, len - p * page_);
      const size_t src = size_t(pages_[size_t(i)][size_t(p)] * page_ * kvd_), dst = size_t(mine[size_t(p)] * page_ * kvd_);
      std::copy_n(k_[size_t(l)].begin() + std::ptrdiff_t(src), rows * kvd_, k_[size_t(l)].begin() + std::ptrdiff_t(dst));
      std::copy_n(v_[size_t(l)].begin() + std::ptrdiff_t(src), rows * kvd_, v_[size_t(l)].begin() + std::ptrdiff_t(dst));
    }
  pages_.push_back(std::move(mine));
  len_.push_back(len);
  return live() - 1;
}

std::vector<int64_t> KvCache::take_pages(int64_t n) {
  if (n <= 0) return {};
  if (limit_ > 0 && pages_used() + n > limit_)
    throw Error("KV cache: " + std::to_string(n) + " more pages needed, " + std::to_string(limit_ - pages_used()) +
                " of the limit of " + std::to_string(limit_) + " free");
  // With a limit, the arrays never grow past it.
  // Short of free pages: every layer's arrays grow first, before any page is
  // handed out (by half again at least, so a growing cache copies its rows
  // a bounded number of times).
  if (int64_t(free_.size()) < n) {
    int64_t more = std::max(n - int64_t(free_.size()), allocated_ / 2);
    if (limit_ > 0) more = std::max(n - int64_t(free_.size()), std::min(more, limit_ - allocated_));
    grow(more);
  }
  // The lowest numbers first, so a cache that shrank and grew again stays compact.
  std::sort(free_.begin(), free_.end(), std::greater<>());
  std::vector<int64_t> out(free_.end() - n, free_.end());
  std::reverse(out.begin(), out.end());
  free_.resize(free_.size() - size_t(n));
  return out;
}

void KvCache::resize(int64_t i, int64_t len) {
  if (i < 0 || i >= live())
    throw Error("KV cache: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  if (len < 0 || len > cap_)
    throw Error("KV cache: sequence " + std::to_string(i) + " would hold " + std::to_string(len) +
                " positions, more than the capacity " + std::to_string(cap_));
  std::vector<int64_t>& mine = pages_[size_t(i)];
  const int64_t need = pages_for(len), have = int64_t(mine.size());
  if (need > have) {
    const std::vector<int64_t> more = take_pages(need - have);
    mine.insert(mine.end(), more.begin(), more.end());
  } else if (need < have) {
    free_.insert(free_.end(), mine.begin() + need, mine.end());
    mine.resize(size_t(need));
  }
  len_[size_t(i)] = len;
}

KvCache::Step::Step(KvCache& cache, const std::vector<int64_t>& counts) : cache_(cache) {
  for (size_t i = 0; i < counts.size(); ++i) old_.push_back(cache_.length(int64_t(i)));
  try {
    for (size_t i = 0; i < counts.size(); ++i) cache_.resize(int64_t(i), old_[i] + counts[i]);
  } catch (...) {  // (no destructor for a half-made Step)
    for (size_t i = 0; i < old_.size(); ++i) cache_.resize(int64_t(i), old_[i]);
    throw;
  }
}

KvCache::Step::~Step() {
  if (!done_)  // shrinking frees pages and allocates nothing
    for (size_t i = 0; i < old_.size(); ++i) cache_.resize(int64_t(i), old_[i]);
}

void KvCache::select(const std::vector<int64_t>& from) {
  for (int64_t f : from)
    if (f < 0 || f >= live())
      throw Error("select: sequence " + std::to_string(f) + " does not exist (" + std::to_string(live()) + " live)");
  // The pages the repeats need first (the only step that allocates): an
  // allocation failure leaves the cache as it was.
  std::vector<char> moved(size_t(live()), 0);
  int64_t copies = 0;
  for (int64_t f : from) {
    if (moved[size_t(f)]) copies += pages_for(len_[size_t(f)]);
    moved[size_t(f)] = 1;
  }
  std::vector<int64_t> spare = take_pages(copies);
  std::vector<std::vector<int64_t>> pages(from.size());
  std::vector<int64_t> len(from.size());
  std::fill(moved.begin(), moved.end(), 0);
  for (size_t i = 0; i < from.size(); ++i) {
    const size_t f = size_t(from[i]);
    len[i] = len_[f];
    if (!moved[f]) {  // the first use takes the pages (after every copy below has read them)
      moved[f] = 1;
      continue;
    }
    const int64_t n = pages_for(len_[f]);
    pages[i].assign(spare.end() - n, spare.end());
    spare.resize(spare.size() - size_t(n));
    for (int64_t l = 0; l < layers_; ++l)
      for (int64_t p = 0; p < n; ++p) {
        const int64_t rows = std::min(page_, len_[f] - p * page_);
        const size_t src = size_t(pages_[f][size_t(p)] * page_ * kvd_), dst = size_t(pages[i][size_t(p)] * page_ * kvd_);
        std::copy_n(k_[size_t(l)].begin() + std::ptrdiff_t(src), rows * kvd_, k_[size_t(l)].begin() + std::ptrdiff_t(dst));
        std::copy_n(v_[size_t(l)].begin() + std::ptrdiff_t(src), rows * kvd_, v_[size_t(l)].begin() + std::ptrdiff_t(dst));
      }
  }
  std::fill(moved.begin(), moved.end(), 0);
  for (size_t i = 0; i < from.size(); ++i) {
    const size_t f = size_t(from[i]);
    if (moved[f]) continue;
    moved[f] = 1;
    pages[i] = std::move(pages_[f]);
  }
  for (size_t f = 0; f < moved.size(); ++f)  // sequences not selected: their pages are free
    if (!moved[f]) free_.insert(free_.end(), pages_[f].begin(), pages_[f].end());
  pages_.swap(pages);
  len_.swap(len);
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (int64_t l = 0; l < layers_; ++l) b += (k_[size_t(l)].size() + v_[size_t(l)].size()) * sizeof(float);
  return b;
}

}  // namespace ffn::nn
