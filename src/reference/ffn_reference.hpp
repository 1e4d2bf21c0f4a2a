// The reference FFN sublayer: plain loops, one token at a time, every dot
// product and every sum over tokens accumulated in double. It is never
// optimized; it is the oracle every fast path is tested against and, in
// double, the function the finite-difference checks differentiate.
//
// Inputs are the valid tokens only, contiguous: x is [n, d_model]; pos[i] is
// token i's global position (b * S + s), the key of its dropout masks.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cpu/norm_row.hpp"
#include "ffn/types.hpp"

namespace ffn::reference {

// Pointers to parameters (nullptr where the layer has none), PyTorch layout.
template <typename T>
struct Params {
  const T* w1 = nullptr;  // [d_ff, d_model]
  const T* b1 = nullptr;  // [d_ff]
  const T* wg = nullptr;  // [d_ff, d_model]
  const T* bg = nullptr;  // [d_ff]
  const T* w2 = nullptr;  // [d_model, d_ff]
  const T* b2 = nullptr;  // [d_model]
  const T* gamma = nullptr;  // [d_model]
  const T* beta = nullptr;   // [d_model]
};

// out = Norm(v) for one row of the low-precision references: statistics in
// double, the result in T (float or double).
template <typename T>
void norm_row(const Config& cfg, const T* v, const Params<float>& p, T* out) {
  nn::normalize_row<double>(cfg.norm_type, v, cfg.d_model, cfg.eps, p.gamma, p.beta, out, nullptr, nullptr, nullptr);
}

template <typename T>
struct Grads {
  T* w1 = nullptr; T* b1 = nullptr; T* wg = nullptr; T* bg = nullptr;
  T* w2 = nullptr; T* b2 = nullptr; T* gamma = nullptr; T* beta = nullptr;
};

// What forward saves for backward (see ForwardCache in ffn/forward_cache.hpp).
template <typename T>
struct Saved {
  T* z1 = nullptr;    // [n, d_ff]
  T* zg = nullptr;    // [n, d_ff], gated only
  T* mean = nullptr;  // [n], pre only
  T* rstd = nullptr;  // [n], norm != none
  T* xhat = nullptr;  // [n, d_model], post only
};

struct DropoutState {
  bool training = false;
  uint64_t seed = 0;
};

// y[n, d_model] = sublayer(x). saved may be null (inference).
template <typename T>
void forward(const Config& cfg, const Params<T>& p, const T* x, int64_t n, const int64_t* pos,
             const DropoutState& drop, T* y, const Saved<T>* saved);

// dx[n, d_model] and every gradient (overwritten) from dy[n, d_model] and
// what forward saved.
template <typename T>
void backward(const Config& cfg, const Params<T>& p, const T* x, int64_t n, const int64_t* pos,
              const DropoutState& drop, const Saved<T>& saved, const T* dy, T* dx,
              const Grads<T>& g);

}  // namespace ffn::reference
