// The activation epilogue (src/backends/cpu/activation_simd.hpp) compiled for avx2.
#include "backends/cpu/activation_simd.hpp"

namespace ffn::nn::avx2 {
void activate(Unit u, float* z, const float* g, int64_t n, const float* bz, const float* bg) {
  simd::activate_rows(u, z, g, n, bz, bg);
}
void sum_rows(float* out, const float* a, const float* b, const float* c, int64_t n) {
  simd::sum_rows(out, a, b, c, n);
}
float exp_rows(const float* s, int64_t n, float scale, float shift, float* p) {
  return simd::exp_rows(s, n, scale, shift, p);
}
float softmax_step(float* s, int64_t n, float scale, float* m, float* l) {
  return simd::softmax_step(s, n, scale, m, l);
}
}  // namespace ffn::nn::avx2
