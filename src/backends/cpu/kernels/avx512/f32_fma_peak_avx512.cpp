// The peak loops of AVX-512 CPUs, in inline assembly (register operands, no
// memory traffic; GCC 12 keeps intrinsic accumulators in registers for the
// FMA but not reliably for the integer forms). 24 independent chains
// (zmm0–23) — ≥ latency × issue width on every AVX-512 core (4–5 cycles × 2
// pipes) — and the operands in zmm24/25.
//   fma_loop      vfmadd231ps zmm: 16 lanes × 2 FLOP
//   dpbusd_loop   vpdpbusd zmm (AVX512_VNNI): 64 u8 × s8 products → 16 int32, 2 OP each
//   dpbf16_loop   vdpbf16ps zmm (AVX512_BF16): 32 bf16 pairs → 16 fp32, 2 FLOP each
// Each returns the operations done; the per-ISA config table names them.
#include <cstdint>

namespace ffn::nn::avx512 {

#define FFN_REP24(op)                                                                                      \
  op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11) op(12) op(13) op(14) op(15) \
      op(16) op(17) op(18) op(19) op(20) op(21) op(22) op(23)
#define FFN_CLOBBERS24                                                                                      \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
      "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",      \
      "xmm24", "xmm25", "cc"
#define FFN_FMA(i) "vfmadd231ps %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define FFN_DPBUSD(i) "vpdpbusd %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define FFN_DPBF16(i) "vdpbf16ps %%zmm24, %%zmm25, %%zmm" #i "\n\t"
#define FFN_LOOP(body)                                                                            \
  "vpxord %%zmm24, %%zmm24, %%zmm24\n\tvpxord %%zmm25, %%zmm25, %%zmm25\n\t"                    \
  "1:\n\t" FFN_REP24(body) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"

double fma_loop(int64_t iters, float) {
  int64_t n = iters;
  if (n > 0) asm volatile(FFN_LOOP(FFN_FMA) : "+r"(n) : : FFN_CLOBBERS24);
  return double(iters) * 24 * 16 * 2;
}

double dpbusd_loop(int64_t iters, float) {
  int64_t n = iters;
  if (n > 0) asm volatile(FFN_LOOP(FFN_DPBUSD) : "+r"(n) : : FFN_CLOBBERS24);
  return double(iters) * 24 * 64 * 2;
}

double dpbf16_loop(int64_t iters, float) {
  int64_t n = iters;
  if (n > 0) asm volatile(FFN_LOOP(FFN_DPBF16) : "+r"(n) : : FFN_CLOBBERS24);
  return double(iters) * 24 * 32 * 2;
}

}  // namespace ffn::nn::avx512
