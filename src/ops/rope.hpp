// Rotary position embedding (RoFormer, Su et al. 2021) as transformers'
// LLaMA applies it: head vector x of length dh at position p becomes
//   x'[i]        = x[i] cos(p f_i) − x[i + dh/2] sin(p f_i)
//   x'[i + dh/2] = x[i + dh/2] cos(p f_i) + x[i] sin(p f_i),   i < dh/2,
// f_i = 1 / θ^(2i/dh). The angles are formed in float32 as transformers
// forms them (inv_freq = 1/θ^(2i/dh) in float, then p · f_i in float), their
// cosine and sine rounded from double.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace ffn::nn {

struct RopeTable {
  int64_t half = 0;            // dh / 2
  std::vector<float> cos, sin; // [positions, half]
  // longrope (Phi-3): a second table for a forward pass that reaches past
  // `original` positions (empty: none).
  std::vector<float> long_cos, long_sin;
  int64_t original = 0;
  // Whether a forward pass whose last position is `last` rotates with the long table.
  bool long_for(int64_t last) const { return !long_cos.empty() && last + 1 > original; }

  // f_i = 1 / θ^(2i/dh) (transformers' default inv_freq, in float32).
  static std::vector<float> frequencies(int64_t dh, double theta) {
    std::vector<float> inv(static_cast<size_t>(dh / 2));
    for (int64_t i = 0; i < dh / 2; ++i) inv[size_t(i)] = 1.0f / std::pow(float(theta), float(2 * i) / float(dh));
    return inv;
  }
  static RopeTable make(int64_t positions, int64_t dh, double theta) {
    return make(positions, frequencies(dh, theta));
  }
  // From the frequencies f_i (dh / 2 of them; a scaling rule's, src/modules/spec.hpp).
  static RopeTable make(int64_t positions, const std::vector<float>& inv) {
    RopeTable t;
    t.half = int64_t(inv.size());
    t.cos.resize(size_t(positions * t.half));
    t.sin.resize(t.cos.size());
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t i = 0; i < t.half; ++i) {
        const float angle = float(p) * inv[size_t(i)];
        t.cos[size_t(p * t.half + i)] = float(std::cos(double(angle)));
        t.sin[size_t(p * t.half + i)] = float(std::sin(double(angle)));
      }
    return t;
  }
};

// Rotates `heads` consecutive head vectors of x (each 2·t.half floats) to
// position pos (with the long table: RopeTable::long_for).
inline void rope_apply(const RopeTable& t, float* x, int64_t heads, int64_t dh, int64_t pos, bool long_table = false) {
  const int64_t half = t.half;
  const float* c = (long_table ? t.long_cos : t.cos).data() + pos * half;
  const float* s = (long_table ? t.long_sin : t.sin).data() + pos * half;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * dh;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = b * c[i] + a * s[i];
    }
  }
}

}  // namespace ffn::nn
