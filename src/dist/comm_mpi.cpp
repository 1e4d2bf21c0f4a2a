#include "ffn/mpi.hpp"

#include <mpi.h>
#include <omp.h>

#include <climits>
#include <cstdlib>

#include "ffn/ffn.hpp"

namespace ffn::dist {

const Comm& Comm::world() {
  static const Comm c = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    Comm w;
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
    return w;
  }();
  return c;
}

void Comm::agree(const std::string& error) const {
  const int mine = error.empty() ? size_ : rank_;
  int first = size_;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size_) return;
  int len = rank_ == first ? int(std::min<size_t>(error.size(), 4096)) : 0;
  MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD);
  std::string msg = rank_ == first ? error.substr(0, size_t(len)) : std::string(size_t(len), '\0');
  MPI_Bcast(msg.data(), len, MPI_CHAR, first, MPI_COMM_WORLD);
  if (!error.empty()) throw AgreedError("rank " + std::to_string(rank_) + ": " + error);
  throw AgreedError("rank " + std::to_string(rank_) + ": stopped, rank " + std::to_string(first) + " failed: " + msg);
}

void Comm::check_same(const std::vector<int64_t>& v, const std::string& what) const {
  // Lengths first, then the values, so every rank takes part in the same calls.
  const int64_t n = int64_t(v.size());
  std::vector<int64_t> ns(static_cast<size_t>(size_));
  MPI_Allgather(&n, 1, MPI_INT64_T, ns.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  int64_t longest = 0;
  for (int64_t k : ns) longest = std::max(longest, k);
  std::vector<int64_t> mine(static_cast<size_t>(longest + 1), -1), all(static_cast<size_t>((longest + 1) * size_));
  mine[0] = n;
  std::copy(v.begin(), v.end(), mine.begin() + 1);
  MPI_Allgather(mine.data(), int(longest + 1), MPI_INT64_T, all.data(), int(longest + 1), MPI_INT64_T, MPI_COMM_WORLD);
  auto text = [&](int r) {
    std::string t = "[";
    const int64_t* p = all.data() + r * (longest + 1);
    for (int64_t i = 0; i < p[0]; ++i) t += (i ? ", " : "") + std::to_string(p[1 + i]);
    return t + "]";
  };
  for (int r = 0; r < size_; ++r)
    if (!std::equal(all.begin(), all.begin() + longest + 1, all.begin() + r * (longest + 1)))
      throw AgreedError("rank " + std::to_string(rank_) + ": " + what + " differs across ranks: rank 0 has " + text(0) +
                  ", rank " + std::to_string(r) + " has " + text(r));
}

namespace {

// MPI counts and displacements (ints) of the row slices, rows·q/P, in floats.
struct Slices {
  std::vector<int> count, displ;
  Slices(int64_t rows, int64_t width, int P) : count(static_cast<size_t>(P)), displ(static_cast<size_t>(P)) {
    if (rows * width > INT_MAX)
      throw Error("sum across ranks: " + std::to_string(rows * width) + " floats, more than one MPI call takes (" +
                  std::to_string(INT_MAX) + ")");
    for (int q = 0; q < P; ++q) {
      displ[size_t(q)] = int(rows * q / P * width);
      count[size_t(q)] = int(rows * (q + 1) / P * width) - displ[size_t(q)];
    }
  }
};

}  // namespace

std::pair<int64_t, int64_t> Comm::reduce_scatter_tree(const float* data, int64_t rows, int64_t width,
                                                      std::vector<float>& slice, CommStats* stats) const {
  const double t0 = omp_get_wtime();
  const int P = size_;
  const std::pair<int64_t, int64_t> mine_rows{rows * rank_ / P, rows * (rank_ + 1) / P};
  const Slices sl(rows, width, P);
  const int mine = sl.count[size_t(rank_)];
  if (P == 1) {
    slice.assign(data, data + mine);
  } else {
    if (int64_t(mine) * P > INT_MAX)
      throw Error("sum across ranks: " + std::to_string(int64_t(mine) * P) + " floats received, more than one MPI "
                  "call takes (" + std::to_string(INT_MAX) + ")");
    const size_t np = static_cast<size_t>(P);
    std::vector<int> rcount(np, mine), rdispl(np);
    for (int q = 0; q < P; ++q) rdispl[size_t(q)] = q * mine;
    std::vector<float>& parts = parts_;
    parts.resize(np * size_t(mine));
    MPI_Alltoallv(data, sl.count.data(), sl.displ.data(), MPI_FLOAT, parts.data(), rcount.data(), rdispl.data(),
                  MPI_FLOAT, MPI_COMM_WORLD);
    // This rank's rows of the sum: the P partials added over the ranks' tree,
    // each half in place, the last addition straight into `slice`.
    auto tree = [&](auto& self, int lo, int hi, float* out) -> void {
      float* a = parts.data() + size_t(lo) * size_t(mine);
      if (hi - lo < 2) return;
      const int mid = (lo + hi) / 2;
      self(self, lo, mid, a);
      self(self, mid, hi, parts.data() + size_t(mid) * size_t(mine));
      const float* b = parts.data() + size_t(mid) * size_t(mine);
      for (int i = 0; i < mine; ++i) out[i] = a[i] + b[i];
    };
    slice.resize(size_t(mine));
    tree(tree, 0, P, slice.data());
    if (stats) stats->bytes_sent += 4.0 * double(rows * width - mine);
  }
  if (stats) stats->seconds += omp_get_wtime() - t0;
  return mine_rows;
}

void Comm::allgather_rows(const float* slice, int64_t rows, int64_t width, float* out, CommStats* stats) const {
  const double t0 = omp_get_wtime();
  const Slices sl(rows, width, size_);
  const int mine = sl.count[size_t(rank_)];
  if (size_ == 1) {
    std::copy(slice, slice + mine, out);
  } else {
    MPI_Allgatherv(slice, mine, MPI_FLOAT, out, sl.count.data(), sl.displ.data(), MPI_FLOAT, MPI_COMM_WORLD);
    if (stats) stats->bytes_sent += 4.0 * double(mine) * (size_ - 1);
  }
  if (stats) {
    stats->seconds += omp_get_wtime() - t0;
    ++stats->calls;
  }
}

void Comm::sum_tree(float* data, int64_t rows, int64_t width, CommStats* stats) const {
  reduce_scatter_tree(data, rows, width, slice_, stats);
  allgather_rows(slice_.data(), rows, width, data, stats);
}

std::vector<double> Comm::gather(const std::vector<double>& mine) const {
  std::vector<double> all(rank_ == 0 ? mine.size() * size_t(size_) : 0);
  MPI_Gather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return all;
}

std::vector<double> Comm::all_gather(const std::vector<double>& mine) const {
  const int n = int(mine.size());
  std::vector<int> count(static_cast<size_t>(size_)), displ(static_cast<size_t>(size_));
  MPI_Allgather(&n, 1, MPI_INT, count.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int q = 0; q < size_; ++q) displ[size_t(q)] = total, total += count[size_t(q)];
  std::vector<double> all(static_cast<size_t>(total));
  MPI_Allgatherv(mine.data(), n, MPI_DOUBLE, all.data(), count.data(), displ.data(), MPI_DOUBLE, MPI_COMM_WORLD);
  return all;
}

bool Comm::any(bool mine) const {
  int v = mine ? 1 : 0, out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return out != 0;
}

void Comm::barrier() const { MPI_Barrier(MPI_COMM_WORLD); }

std::string Comm::broadcast(const std::string& s, int root) const {
  int64_t len = rank_ == root ? int64_t(s.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT64_T, root, MPI_COMM_WORLD);
  std::string out = rank_ == root ? s : std::string(size_t(len), '\0');
  MPI_Bcast(out.data(), int(len), MPI_CHAR, root, MPI_COMM_WORLD);
  return out;
}

void Comm::abort(int status) const {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // not reached
}

}  // namespace ffn::dist
