// Packing, and dispatch of the fused forward to the kernel of the chosen ISA.
#include "nn/fused_forward.hpp"

#include "nn/isa.hpp"

namespace ffn::nn {

PackedWeights PackedWeights::pack(const Config& cfg, const Weights& w) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  PackedWeights p;
  auto transpose = [](const std::vector<float>& src, int64_t rows, int64_t cols) {
    std::vector<float> t(src.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = src[r * cols + c];
    return t;
  };
  p.w1t = transpose(w.w1, F, d);
  if (is_gated(cfg.activation)) p.wgt = transpose(w.wg, F, d);
  p.w2t = transpose(w.w2, d, F);
  return p;
}

void fused_forward(const Config& cfg, const Weights& w, const PackedWeights& pw, const float* x, int64_t n,
                   const int64_t* pos, bool training, uint64_t seed, int threads, Isa isa, float* y,
                   const FusedSaved* saved) {
  switch (resolve_isa(isa)) {
    case Isa::avx2:
      avx2::fused_forward_kernel(cfg, w, pw, x, n, pos, training, seed, threads, y, saved);
      return;
    default:
      scalar::fused_forward_kernel(cfg, w, pw, x, n, pos, training, seed, threads, y, saved);
      return;
  }
}

}  // namespace ffn::nn
