// f32 fused FFN forward, avx2 build of src/nn/fused_forward_body.inc
// (-mavx2 -mfma -ffp-contract=fast: 256-bit FMA).
#define FFN_ISA_NS avx2
#include "nn/fused_forward_body.inc"
