// MPNet's relative position bias (src/models/relative_bias.hpp).
#include "models/relative_bias.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace ffn::models {

int64_t relative_bucket(int64_t rel, int64_t buckets, int64_t max_distance) {
  // transformers: n = −rel; half = buckets // 2; ret = (n < 0)·half; n = |n|;
  // exact = half // 2; small n itself, else exact + ⌊log(n / exact) / log(max / exact) · (half − exact)⌋
  // (float32 tensors, the Python scalar log taken as float32), at most half − 1.
  const int64_t half = buckets / 2, exact = half / 2;
  const int64_t n = -rel;
  int64_t ret = n < 0 ? half : 0;
  const int64_t a = std::llabs(n);
  if (a < exact) return ret + a;
  const float ratio = float(a) / float(exact);
  const float den = float(std::log(double(max_distance) / double(exact)));
  const float v = std::log(ratio) / den * float(half - exact);
  return ret + std::min<int64_t>(exact + int64_t(v), half - 1);
}

std::vector<float> relative_bias_table(const std::vector<float>& weight, int64_t buckets, int64_t heads,
                                       int64_t max_distance, int64_t span) {
  const int64_t width = 2 * span - 1;
  std::vector<float> t(size_t(heads * width));
  for (int64_t k = 0; k < width; ++k) {
    const int64_t bucket = relative_bucket(k - (span - 1), buckets, max_distance);
    for (int64_t h = 0; h < heads; ++h) t[size_t(h * width + k)] = weight[size_t(bucket * heads + h)];
  }
  return t;
}

}  // namespace ffn::models
