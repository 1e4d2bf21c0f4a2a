// Tolerances of the tests, in the scaled error of ffn::compare (ffn/diagnostics.hpp):
// |got − want| / (|want| + rms(want)). Justification in tests/README.md;
// test_compare.cpp checks that the comparison itself accepts and rejects
// what these numbers promise.
#pragma once

namespace ffn::test {

// Our float32 results against PyTorch's float32 results, per quantity. Both
// sides round every product and sum to float32 (unit roundoff u = 6e-8). A sum
// of K terms of random sign has a rounding error ~√K·u relative to the size
// of its terms (the worst case, K·u, needs every rounding to go the same
// way). Measured worst over the golden cases (2026-11-21; the golden test
// prints them): y 6.7e-7, dL/dx 1.2e-6, dW 1.9e-6 (dW sums over tokens as
// well as over d_ff). 1e-5 is 5x or more above each, and a real mistake (a
// wrong sign, a missing term, a wrong mask element) is an error of 1e-2 or more.
constexpr double kVsTorchY = 1e-5;   // output: K = d_ff (W2) after K = d_model (W1)
constexpr double kVsTorchDx = 1e-5;  // input gradient: K = d_ff, then d_model (norm backward)
constexpr double kVsTorchDw = 1e-5;  // parameter gradients: K = tokens (and d_model for dh)

// The fused float32 path against the reference path (double accumulation).
constexpr double kFusedVsReference = 1e-5;

// The int8 fast path against the int8 reference (src/reference/ffn_int8_reference.cpp):
// every quantized value and int32 sum is the same (the kernels are tested bit
// for bit); what differs is the order of the float sums of W2's partial
// products (the fast path adds four shards of d_ff over a tree, ~2·u) and the norm's
// statistics (float here, double there) — rounding differences of a few
// float32 ulps, as for the fp32 path.
constexpr double kInt8VsReference = 1e-5;

// bf16 compute (RunOptions::compute = bf16) against its reference
// (src/reference/ffn_bf16_reference.cpp: the same bf16 operands, double
// sums). The fp32 sums differ by a few float32 ulps, as above; in addition a
// hidden value lying within those ulps of a bf16 rounding boundary rounds one
// bf16 step (≤ 2^-8 of its size) the other way and moves the outputs by up
// to 2^-8·|h·w2|. Measured worst over tests/backends/cpu/test_bf16.cpp's cases
// (2026-11-23, printed by the test) ≈ 2e-4; a real mistake (a dropped k step,
// a wrong panel, an unrounded operand) is 1e-2 or more, and the exact-data
// test (small integers: every rounding exact) allows no difference at all.
constexpr double kBf16VsReference = 1e-3;
// The bf16 product kernels against double sums of the same bf16 operands:
// elementwise |c − Σ a·b| ≤ k·u·Σ|a·b| (u = 2^-24, the worst case of k fp32
// additions of exact products), with a factor 2 for the accumulate form.
constexpr double kBf16SumUlps = 2.0;
// A two-layer encoder in the bf16 compute mode (every projection rounded)
// against its reference: kBf16VsReference's flips, carried through the next
// layer's attention and norms. Measured worst 1.15e-3 (pre-LN; post-LN below
// 1e-3; tests/modules/test_encoder.cpp, 2026-12-07, AMX; 4.6e-4 on AVX-512
// BF16 and the scalar set), 4x below the allowance (bf16 against fp32 is
// 5.3e-3 on the same data).
constexpr double kBf16EncoderVsReference = 5e-3;

// The tiled attention (src/ops/attention.cpp) against the reference attention
// (whole score rows, double sums). Forward: a context vector is an average of
// up to S value vectors (fp32 sums over key tiles, e^x from exp_approx), and
// with random values it is several times smaller than the values it
// averages, so the float rounding of the sum, ~√S·u of the terms' size,
// weighs more against the result than in the FFN: measured worst 7.1e-6 at
// S = 4096 and at lengths around the 256-key tiles (2026-11-23, printed by
// the test). 5e-5 is 7x above; one wrongly masked key at S = 4096 moves its
// row by ~|v|/S ≈ 4e-4, 4e-3 scaled. Backward: dS = P (dP − D) takes the
// difference of two float dot products over dh of similar size, so its
// relative error grows where they nearly cancel, and dQ, dK then sum it over
// up to S keys or queries: measured worst 1.33e-5 (S = 1500, causal, dropout,
// AVX2; 1.24e-5 on AVX-512, 1.11e-5 scalar). 1e-4 is 7x above; a wrong mask element, a dropped tile or a stale running
// maximum moves whole rows by 1e-2 or more.
constexpr double kAttentionForwardVsReference = 5e-5;
constexpr double kAttentionBackwardVsReference = 1e-4;

// Finite differences in double, central, step h = 1e-6: truncation ~h² ≈ 1e-12
// and cancellation ~1e-16/h ≈ 1e-10, far below 1e-6.
constexpr double kFiniteDifference = 1e-6;

// Training against torch.optim (tests/train/test_train.cpp): the loss of each of 20
// steps, absolute, as the issue asks. Each step's gradients differ from
// PyTorch's by ~1e-6 relative (above); SGD and Adam carry such differences
// forward without amplifying them over 20 steps (measured worst 2026-11-21:
// printed by the test). A wrong update rule (bias correction, momentum's
// first step, L2 against decoupled decay) moves the losses by 1e-3 or more.
constexpr double kLossCurve = 1e-4;
// The parameters after those 20 steps, scaled error as above.
constexpr double kTrainedWeights = 1e-4;

}  // namespace ffn::test
