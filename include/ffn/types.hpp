// ffn's shared types: the layer's settings (Config), parameters (Weights),
// where they live in a file (TensorNames), the input's shape (Shape), what a
// call runs (RunOptions: path, ISA, compute mode, threads), and the error
// every bad input is reported with (Error), and the one a call stopped by
// its caller ends with (Interrupted).
//
// Weights use PyTorch nn.Linear layout (W1 is [d_ff, d_model], W2 is
// [d_model, d_ff]) and all tensors are float32, row-major (C order).
// Every error caused by the caller's input (shapes, files, options) is thrown
// as ffn::Error with a one-line message naming the file, tensor or option and
// what was expected.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ffn/parallel.hpp"

namespace ffn {

// Bad input (file, shape, option). The message is one line, suitable to show as is.
// Control characters (e.g. from a tensor name in a file) are escaped as \xNN so
// the message stays on one line.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message);
};

// A call stopped because its RunOptions::interrupted (EmbedOptions::interrupted)
// hook asked it to, e.g. for Ctrl-C in Python. Not an Error: nothing was
// wrong with the input, and code that adds context to an Error must not
// turn a stop into a bad-input message.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

enum class Activation { relu, gelu, gelu_tanh, silu, swiglu, geglu, reglu, geglu_tanh };
enum class NormPlacement { none, post, pre };
enum class NormType { layernorm, rmsnorm };
// tokens: input [T, d_model] or [B, S, d_model].  ncw: [B, d_model, S] (or
// [d_model, S]), the Conv1d(kernel_size=1) view; the output has the input's layout.
enum class Layout { tokens, ncw };

std::string_view to_string(Activation a);
std::string_view to_string(NormPlacement p);
std::string_view to_string(NormType t);
std::string_view to_string(Layout l);
// Parse the names above ("relu", "gelu_tanh", "post", "rmsnorm", "ncw", ...);
// throw Error naming `what` (e.g. "--activation") on an unknown value.
Activation parse_activation(std::string_view s, std::string_view what = "activation");
NormPlacement parse_norm_placement(std::string_view s, std::string_view what = "norm");
NormType parse_norm_type(std::string_view s, std::string_view what = "norm type");
Layout parse_layout(std::string_view s, std::string_view what = "layout");
// swiglu, geglu, reglu and geglu_tanh (Gemma's gelu_pytorch_tanh gate) have a gate projection Wg.
bool is_gated(Activation a);

// How the weight matrices (W1, Wg, W2) are stored and multiplied.
//   fp32  float32 (the default; training needs it)
//   bf16  bfloat16, round to nearest even; arithmetic in float32
//   fp16  IEEE binary16, round to nearest even; arithmetic in float32
//         (a weight beyond ±65504 is refused)
//   int8  symmetric int8 per output channel, scale = max|w| / 127; the
//         activations entering each matrix product are quantized per token
//         (asymmetric 8-bit, see src/backends/cpu/quantize.hpp), int32 accumulation,
//         dequantization + bias + activation fused.
enum class WeightDtype { fp32, bf16, fp16, int8 };
std::string_view to_string(WeightDtype t);
WeightDtype parse_weight_dtype(std::string_view s, std::string_view what = "dtype");

struct Config {
  int64_t d_model = 512;
  int64_t d_ff = 2048;
  Activation activation = Activation::relu;
  bool bias = true;  // false: no b1, bg, b2 (LLaMA style); norm β is unaffected
  NormPlacement norm = NormPlacement::post;
  NormType norm_type = NormType::layernorm;
  float eps = 1e-5f;
  float dropout_hidden = 0.0f;  // p after the activation, training mode only
  float dropout_output = 0.0f;  // p after W2, before the residual, training mode only

  // Throws Error if a field is out of range (dims < 1, eps <= 0, p outside [0, 1]).
  void validate() const;
};

// The layer's parameters, float32, PyTorch layout. Empty vectors for absent
// parameters (no bias, not gated, no norm, no β for RMSNorm).
struct Weights {
  std::vector<float> w1, b1;                   // linear1 (up_proj): [d_ff, d_model], [d_ff]
  std::vector<float> wg, bg;                   // gate (gate_proj):   [d_ff, d_model], [d_ff]
  std::vector<float> w2, b2;                   // linear2 (down_proj): [d_model, d_ff], [d_model]
  std::vector<float> norm_weight, norm_bias;   // γ, β: [d_model]

  // Zero-filled parameters of the right sizes for `cfg` (e.g. for gradients).
  static Weights zeros(const Config& cfg);
  // The eight in a fixed order (w1, b1, wg, bg, w2, b2, γ, β), that of
  // TensorNames::all(); one the layer lacks is empty.
  std::array<const std::vector<float>*, 8> all() const {
    return {&w1, &b1, &wg, &bg, &w2, &b2, &norm_weight, &norm_bias};
  }
  std::array<std::vector<float>*, 8> all() { return {&w1, &b1, &wg, &bg, &w2, &b2, &norm_weight, &norm_bias}; }
};

// Where each parameter lives in a safetensors file (full names, prefix
// included); empty for a parameter the layer does not have.
struct TensorNames {
  std::string w1, b1, wg, bg, w2, b2, norm_weight, norm_bias;
  // Names of this project's own format: linear1.*, gate.*, linear2.*, norm.*.
  static TensorNames native(const Config& cfg, const std::string& prefix = "");
  // In the order of Weights::all().
  std::array<const std::string*, 8> all() const {
    return {&w1, &b1, &wg, &bg, &w2, &b2, &norm_weight, &norm_bias};
  }
};

// Describes the input buffer.
struct Shape {
  int64_t batch = 1;              // B (0 allowed: nothing to do)
  int64_t seq = 0;                // S, positions per sequence
  Layout layout = Layout::tokens; // tokens: [B, S, d_model]; ncw: [B, d_model, S]
  // Optional B valid lengths (0 <= len <= S). Positions s >= lengths[b] are
  // padding: never computed, never read, written as zeros in y and dx.
  std::vector<int64_t> lengths;

  static Shape tokens(int64_t t) { return Shape{1, t, Layout::tokens, {}}; }
  int64_t positions() const { return batch * seq; }
};
// The valid (non-padding) positions of shape; Error for bad lengths.
int64_t valid_tokens(const Shape& shape);

// Which implementation runs. `automatic` is the fastest available path; the
// reference is the scalar oracle every fast path is tested against.
enum class Path { automatic, reference };

constexpr int kMaxThreads = 1024;

// The one rule for a thread count: 0 is every hardware thread OpenMP gives,
// 1..kMaxThreads as asked; anything else is an Error. Contexts, the library's
// entry points and the commands all resolve through it.
int resolve_threads(int threads);

// Instruction set of the fast path. automatic: the environment variable
// FFN_ISA (auto, scalar, avx2, avx512, amx) if set, else the best the CPU
// supports, in the order amx, avx512, avx2, scalar. amx is avx512 with the
// bf16-compute and int8 products on AMX tiles (fp32 products stay AVX-512).
enum class Isa { automatic, scalar, avx2, avx512, amx };
std::string_view to_string(Isa i);
Isa parse_isa(std::string_view s, std::string_view what = "isa");
bool isa_supported(Isa i);  // by this CPU and this build
Isa best_isa();

// The arithmetic of the two matrix products (inference), apart from how the
// weights are stored (WeightDtype):
//   fp32  float32 operands and sums (the default; the only mode for training)
//   bf16  the operands of both products rounded to bfloat16 (the FFN input
//         after a pre-norm, the weights, the hidden activation), exact
//         products summed in float32 (vdpbf16ps, AMX tdpbf16ps); bias,
//         activation, residual and norm in float32: what PyTorch's bf16
//         autocast does on CPU. Weights stored as fp32, bf16 or fp16 (not
//         int8). Without AVX512_BF16 or AMX it runs a portable kernel.
//         Encoder::forward (inference) takes it for every projection too:
//         attention's Q|K|V and output projections and the FFN's products;
//         attention's own products (scores, values) stay float32.
enum class Compute { fp32, bf16 };
std::string_view to_string(Compute c);
Compute parse_compute(std::string_view s, std::string_view what = "compute");

// A setting a load took from neither the caller's options nor the file's
// __metadata__ but from a default or a guess from the tensors (a PyTorch
// state_dict records none): {"activation relu", "--activation"}, so that a
// program can say what it assumed. Only settings that change results.
struct AssumedSetting {
  std::string what;  // "activation relu"
  std::string flag;  // the CLI flag that sets it: "--activation"
};

struct RunOptions {
  bool training = false;  // dropout active (and a ForwardCache may be filled)
  uint64_t seed = 0;      // dropout mask seed
  int threads = 0;        // 0: all hardware threads; at most kMaxThreads
  Path path = Path::automatic;
  Isa isa = Isa::automatic;  // fast path only; throws Error if unsupported
  Compute compute = Compute::fp32;  // bf16: inference only (throws Error with training or a cache)
  // Data parallelism only (Trainer::set_team): which rows of a batch this
  // process runs and how the weight gradients are summed (ffn/parallel.hpp).
  RowPartition partition;
  // Asked at safe points of a long call, so that a caller can stop it (the
  // Python module runs Python's signal handlers here, for Ctrl-C): called
  // on the calling thread only, never inside a parallel region; true stops
  // the call by throwing Interrupted. The safe points: FeedForward::forward
  // runs the rows in pieces of a few milliseconds' work and asks before
  // each (the same bits as one piece: a token's result does not depend on
  // the others); backward asks between its stages and between pieces of its
  // row blocks and weight gradients (the same bits); Encoder asks before
  // each sublayer (and inside the FFN sublayers) and in inference runs a
  // large batch's sequences in groups (the same bits). An attention
  // sublayer is not cut: on a very long sequence it is the longest wait.
  // After a stop the outputs are partly written and a cache passed to the
  // call is left unfilled (backward refuses it); the layer itself is
  // unchanged. Unset: nothing is asked and every call runs in one piece.
  std::function<bool()> interrupted;
};

// ---- text for messages ------------------------------------------------------------
// Shapes as "[2, 3]", numbers as printf's %g, durations as "850 ms", "42 s",
// "7.5 min" or "3.2 h".


inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

inline std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

inline std::string duration_str(double seconds) {
  char b[32];
  if (seconds < 1.0)
    std::snprintf(b, sizeof b, "%.0f ms", seconds * 1e3);
  else if (seconds < 120.0)
    std::snprintf(b, sizeof b, "%.0f s", seconds);
  else if (seconds < 7200.0)
    std::snprintf(b, sizeof b, "%.1f min", seconds / 60.0);
  else
    std::snprintf(b, sizeof b, "%.1f h", seconds / 3600.0);
  return b;
}

}  // namespace ffn
