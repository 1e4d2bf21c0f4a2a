// Small helpers shared by the test suites.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <gtest/gtest.h>
#include "ffn/ffn.hpp"
#include <random>
#include <vector>
#include <string>
#include <utility>

namespace ffn::test {

// n samples of N(0, scale²), reproducible from the seed.
inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& e : v) e = d(rng);
  return v;
}

// Max |Δ| and the worst cosine of embeddings a [N, D] against b, row by row
// (two zero rows count as cosine 1); a shape mismatch fails the test.
inline std::pair<double, double> compare_rows(const Array& a, const NamedTensor& b) {
  EXPECT_EQ(a.shape, b.shape);
  if (a.shape != b.shape || a.shape.size() != 2) return {1e30, -1};
  const int64_t N = a.shape[0], D = a.shape[1];
  double diff = 0, worst = 1;
  for (int64_t i = 0; i < N; ++i) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double x = a.data[size_t(i * D + j)], y = b.data[size_t(i * D + j)];
      diff = std::max(diff, std::abs(x - y));
      ab += x * y, aa += x * x, bb += y * y;
    }
    worst = std::min(worst, aa == 0 && bb == 0 ? 1.0 : ab / std::sqrt(aa * bb));
  }
  return {diff, worst};
}

// A scratch directory per suite and process: /tmp/ffn_test_<tag>_<pid>.
// The directory is removed (with its contents) when the test program exits.
inline std::filesystem::path scratch_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  struct Registry {
    std::vector<fs::path> dirs;
    ~Registry() {
      std::error_code ec;
      for (const auto& d : dirs) fs::remove_all(d, ec);
    }
  };
  static Registry registry;
  fs::path p = fs::temp_directory_path() / ("ffn_test_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  registry.dirs.push_back(p);
  return p;
}

// fn() must throw ffn::Error whose message contains needle.
template <class F>
void expect_error(F&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace ffn::test
