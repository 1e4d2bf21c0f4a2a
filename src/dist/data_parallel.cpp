#include "ffn/mpi.hpp"

#include <algorithm>
#include <cstdio>

namespace ffn::dist {

std::string MpiTeam::summary() const {
  const std::vector<double> all = comm_.all_gather({stats_.seconds, stats_.bytes_sent, double(stats_.calls)});
  double slowest = 0, bytes = 0, calls = 0;
  for (size_t r = 0; r < all.size(); r += 3) {
    slowest = std::max(slowest, all[r]);
    bytes = std::max(bytes, all[r + 1]);
    calls = std::max(calls, all[r + 2]);
  }
  char line[160];
  std::snprintf(line, sizeof line, "gradient sums across %d ranks: %.3f s in %.0f calls on the slowest rank, %.1f MB sent by each",
                comm_.size(), slowest, calls, bytes / 1e6);
  return line;
}

}  // namespace ffn::dist
