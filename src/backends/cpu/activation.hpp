// Scalar activation functions and their derivatives, as PyTorch defines them.
// Used by the reference path (T = float or double) and by the fast paths'
// scalar epilogues.
//   relu(z)      = max(0, z), NaN for NaN (torch.relu) relu'(z) = z > 0 ? 1 : 0
//   gelu(z)      = z/2 (1 + erf(z/√2))                 (exact, nn.GELU())
//   gelu_tanh(z) = z/2 (1 + tanh(√(2/π)(z + 0.044715 z³)))   (nn.GELU('tanh'))
//   silu(z)      = z σ(z)
// Gated: swiglu = silu(gate)·up, geglu = gelu(gate)·up, reglu = relu(gate)·up.
#pragma once

#include <cmath>

#include "ffn/types.hpp"

namespace ffn::nn {

// The elementwise function applied to the (gate) pre-activation.
enum class Unit { relu, gelu, gelu_tanh, silu };

inline Unit unit_of(Activation a) {
  switch (a) {
    case Activation::relu: case Activation::reglu: return Unit::relu;
    case Activation::gelu: case Activation::geglu: return Unit::gelu;
    case Activation::gelu_tanh: case Activation::geglu_tanh: return Unit::gelu_tanh;
    case Activation::silu: case Activation::swiglu: return Unit::silu;
  }
  return Unit::relu;
}

template <typename T>
inline T act(Unit u, T z) {
  switch (u) {
    case Unit::relu: return z < T(0) ? T(0) : z;  // NaN stays NaN, as torch.relu
    case Unit::gelu: return T(0.5) * z * (T(1) + std::erf(z * T(0.70710678118654752440)));
    case Unit::gelu_tanh: {
      const T k = T(0.79788456080286535588);  // √(2/π)
      return T(0.5) * z * (T(1) + std::tanh(k * (z + T(0.044715) * z * z * z)));
    }
    case Unit::silu: return z / (T(1) + std::exp(-z));
  }
  return z;
}

template <typename T>
inline T act_grad(Unit u, T z) {
  switch (u) {
    case Unit::relu: return z > T(0) ? T(1) : T(0);
    case Unit::gelu: {
      const T cdf = T(0.5) * (T(1) + std::erf(z * T(0.70710678118654752440)));
      const T pdf = std::exp(T(-0.5) * z * z) * T(0.39894228040143267794);  // 1/√(2π)
      return cdf + z * pdf;
    }
    case Unit::gelu_tanh: {
      const T k = T(0.79788456080286535588);
      const T inner = k * (z + T(0.044715) * z * z * z);
      const T t = std::tanh(inner);
      const T dinner = k * (T(1) + T(3) * T(0.044715) * z * z);
      return T(0.5) * (T(1) + t) + T(0.5) * z * (T(1) - t * t) * dinner;
    }
    case Unit::silu: {
      const T s = T(1) / (T(1) + std::exp(-z));
      return s * (T(1) + z * (T(1) - s));
    }
  }
  return T(1);
}

}  // namespace ffn::nn
