// f32 fused FFN forward, scalar build of src/nn/fused_forward_body.inc
// (baseline x86-64 flags).
#define FFN_ISA_NS scalar
#include "nn/fused_forward_body.inc"
