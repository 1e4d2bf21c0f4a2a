// The position-wise feed-forward sublayer (ffn::FeedForward):
//
//   FFN(x) = f(x W1ᵀ + b1) W2ᵀ + b2                      (plain:  relu, gelu, gelu_tanh, silu)
//   FFN(x) = (act(x Wgᵀ + bg) ⊙ (x W1ᵀ + b1)) W2ᵀ + b2   (gated:  swiglu, geglu, reglu)
//
// applied to every token independently with the same weights, wrapped in
//   norm none:  y = Dropout(FFN(x))
//   norm post:  y = Norm(x + Dropout(FFN(x)))     (the paper)
//   norm pre:   y = x + Dropout(FFN(Norm(x)))
// where Norm is LayerNorm (γ, β; biased variance, as PyTorch) or RMSNorm (γ).
// Dropout applies to the hidden activation (p = dropout_hidden) and to the
// FFN output (p = dropout_output), in training mode only, with inverted
// scaling 1/(1-p). Its mask is a pure function of (seed, element position), so
// it is the same for any thread count or blocking and backward regenerates it.
//
// Low precision (inference only; see WeightDtype): the three weight matrices
// may be stored as bf16 or fp16 (fp32 arithmetic) or int8 (integer
// arithmetic with activations quantized per token); biases and the norm stay
// float32.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ffn/forward_cache.hpp"
#include "ffn/io.hpp"
#include "ffn/parallel.hpp"
#include "ffn/types.hpp"

namespace ffn::nn {
class Context;  // the execution context (src/backends/context.hpp)
}
namespace ffn::detail {
struct FfnAccess;  // the library's calls with their own context (src/modules/ffn_access.hpp)
}

namespace ffn {

// ForwardCache (what forward saves for backward): ffn/forward_cache.hpp.

struct LoadOptions {
  std::string prefix;  // e.g. "encoder.layers.0." (a trailing '.' is added if missing)
  // Override the file's settings (its __metadata__, or what its tensors imply).
  std::optional<Activation> activation;
  std::optional<NormPlacement> norm;
  std::optional<NormType> norm_type;
  std::optional<float> eps;
  // Store the weights in this type (quantizing on load). Unset: the file's
  // own (__metadata__ ffn.weights_dtype, written by `ffn quantize`), else fp32.
  std::optional<WeightDtype> weight_dtype;
  float dropout_hidden = 0.0f;
  float dropout_output = 0.0f;
  // Tensor parallelism: read only shards [first, last) of count of the file's
  // d_ff (their rows of W1, Wg, b1 and columns of W2; DffShards, d_ff taken
  // from the file); the layer then runs in two stages. fp32/bf16/fp16 files.
  std::optional<DffShards> shards;
  // (What load assumed: FeedForward::assumed_settings().)
};

// int8 with outlier features kept in float32 (LLM.int8()'s decomposition,
// Dettmers et al. 2022): trained transformers put a few input channels far
// outside the rest (all-MiniLM-L6-v2: 4–5 of 384 reach |x| of 10–25 where the
// others stay near 1), and per-token 8-bit levels spread over that range
// leave the ordinary channels a handful of levels. The channels listed here
// are taken out of the quantized row and their products with W1 (and Wg)
// added in float32 (src/backends/cpu/quantize.hpp); W1's other columns are quantized
// without them. The cost is k/d_model of W1's work in float32.
struct Int8Options {
  std::vector<int64_t> fp32_input_channels;  // ascending, distinct, < d_model
  // The channels whose calibrated statistic exceeds threshold, the largest
  // first (input_absmax: LLM.int8()'s 6; SentenceEncoder's input_peak_ratio: 8),
  // at most max_channels of them; returned ascending.
  static Int8Options outliers(const std::vector<float>& absmax, float threshold = 6.0f, int64_t max_channels = 16);
};

// Thread safety: forward and backward are const and may run on one FeedForward from
// several threads at once (each caller with its own x, y, cache, gradient
// buffers); results are bitwise those of sequential calls
// (tests/modules/test_threads.cpp, also run under ThreadSanitizer). set_weights,
// update_weights and set_dropout must not run concurrently with anything.
class FeedForward {
 public:
  // Deterministic PyTorch-style initialization: nn.Linear weights and biases
  // ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), γ = 1, β = 0. Same seed, same weights.
  FeedForward(const Config& cfg, uint64_t seed);
  // Takes the given weights; throws Error if a size does not match cfg.
  // With a dtype other than fp32 the weight matrices are converted (quantized)
  // and weights() then holds the values actually used (dequantized).
  FeedForward(const Config& cfg, Weights weights, WeightDtype dtype = WeightDtype::fp32);

  // A copy of this layer with its weight matrices stored as `dtype`
  // (converted from this layer's values).
  FeedForward converted(WeightDtype dtype) const;
  // int8 with a few FFN input channels kept in float32 (Int8Options).
  FeedForward converted(WeightDtype dtype, const Int8Options& int8) const;
  WeightDtype weight_dtype() const { return dtype_; }
  // int8: the input channels kept in float32 (ascending; empty otherwise).
  const std::vector<int64_t>& fp32_input_channels() const { return fp32_inputs_; }
  // Calibration for Int8Options: folds max |value| of each channel entering
  // W1 (x, or Norm(x) for a pre-norm layer) over n tokens of x (tokens
  // layout, n × d_model floats) into absmax (resized to d_model if empty).
  // isa: the pre-norm's kernels (the caller's --isa).
  void input_absmax(const float* x, int64_t n, std::vector<float>& absmax, Isa isa = Isa::automatic) const;
  // As input_absmax, but each row's |value|s divided by the row's root mean
  // square first: the largest |x_j| / rms(x) per channel, a measure of how far
  // a channel stands out of its row whatever the rows' scale. A row whose
  // values are near 0.1 (all-mpnet-base-v2's [CLS] and [SEP] rows) with one
  // channel at 2.8 gets that channel's 26 here, where input_absmax gives 2.8.
  // An all-zero row adds nothing. SentenceEncoder's int8 calibration uses it.
  void input_peak_ratio(const float* x, int64_t n, std::vector<float>& ratio, Isa isa = Isa::automatic) const;

  // Reads a safetensors file: this project's names, PyTorch
  // TransformerEncoderLayer names (linear1, linear2, norm2) or Hugging Face
  // LLaMA names (mlp.gate_proj, mlp.up_proj, mlp.down_proj,
  // post_attention_layernorm). d_model, d_ff, gated and bias come from the
  // shapes; activation, norm and eps from __metadata__ unless overridden.
  static FeedForward load(const std::string& path, const LoadOptions& opts = {});
  // Writes this project's format with the settings in __metadata__,
  // atomically (temporary file + rename): F32 tensors, or for a low-precision
  // layer BF16/F16 matrices, or I8 matrices each with an F32 per-row scale
  // tensor named after it ("linear1.weight_scale"), and the method in
  // __metadata__ (ffn.weights_dtype, ffn.quantization).
  void save(const std::string& path) const;
  // What save writes, for callers that add tensors (e.g. an output head),
  // plus the tensors and metadata of `extra` the layer does not write itself.
  // Tensors are named as in the file the layer was loaded from (its prefix
  // and naming scheme kept: norm2.* stays norm2.*); this project's names for
  // a layer made in memory.
  SafetensorsFile to_safetensors() const;
  SafetensorsFile to_safetensors(const SafetensorsFile& extra) const;
  // Every tensor of the file `source` that the layer does not own (e.g. an
  // encoder layer's attention weights and norm1), byte for byte in its own
  // dtype, and source's __metadata__ entries other than ffn's: with
  // to_safetensors(unowned(source)) the result loads back into the module
  // the source came from.
  SafetensorsFile unowned(const std::string& source) const;
  // Writes gradients under the names the weights were loaded from.
  void save_gradients(const std::string& path, const Weights& grads) const;
  // Tensor parallelism: the whole layer's gradient file (what save_gradients
  // of the whole layer writes) as each tensor's global shape and this
  // layer's pieces of it — rows of W1, Wg, b1 and segments of W2's rows for
  // its shards; b2 and the norm's only when `replicated` (one rank writes them).
  struct GradientPiece {
    int64_t offset;      // in elements, within the tensor
    const float* data;   // into grads
    int64_t count;
  };
  struct ShardedGradient {
    std::vector<int64_t> shape;
    std::vector<GradientPiece> pieces;
  };
  std::map<std::string, ShardedGradient> gradient_shards(const Weights& grads, bool replicated,
                                                         std::map<std::string, std::string>& metadata) const;

  const Config& config() const { return cfg_; }
  // The settings load took from a default or a guess from the tensors, not
  // from its LoadOptions or the file's __metadata__ (AssumedSetting); empty
  // for a layer made in memory.
  const std::vector<AssumedSetting>& assumed_settings() const { return assumed_; }
  const Weights& weights() const { return w_; }
  const TensorNames& names() const { return names_; }
  // Replace the parameters (same sizes), e.g. after an optimizer step; a
  // low-precision layer converts them to its dtype.
  void set_weights(Weights w);
  // Edit the parameters in place (e.g. an optimizer step), then re-pack them
  // for the fast path. Throws Error if `edit` changed a size.
  void update_weights(const std::function<void(Weights&)>& edit);
  // Change dropout probabilities (validated).
  void set_dropout(float hidden, float output);

  // y = layer(x). x and y are caller-owned buffers of shape.positions() * d_model
  // floats in shape.layout; they must not overlap. With a cache, what
  // backward needs is saved in it.
  void forward(const float* x, float* y, const Shape& shape, const RunOptions& opts = {},
               ForwardCache* cache = nullptr) const;
  // Given the forward's x, its cache and dL/dy, writes dL/dx into dx (same
  // layout as x) and overwrites every field of grads with dL/dparameter.
  // Needs fp32 weights (throws Error for a low-precision layer, as does a
  // training-mode forward).
  void backward(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache,
                float* dx, Weights& grads, const RunOptions& opts = {}) const;

  // Floating-point operations of one forward call on t tokens (2 per multiply-add).
  double forward_flops(int64_t t) const;

  // Tensor parallelism (src/dist, DffShards). set_shards: this layer's
  // weights are shards [first, last) of a d_ff of shards.d_ff (its own
  // d_ff must be their hidden units; Error otherwise). A layer holding only
  // some shards runs in two stages; forward() then throws.
  void set_shards(const DffShards& shards);
  const DffShards& shards() const { return shards_; }
  // The layer of shards [first, last) of this whole layer's d_ff (count from
  // shards()): W1, Wg, b1 rows and W2 columns of their hidden units, b2 and
  // the norm whole; same dtype (and int8 fp32 input channels).
  FeedForward shard(int64_t first, int64_t last) const;
  // Stage 1: partial[valid_tokens(shape), d_model] = the sum over this
  // layer's shards of their W2 products (no b2), one row per valid token in
  // position order. Stage 2: y (x's shape and layout, padding zero) from
  // the sum over every shard: b2, output dropout, residual and norm. Fast
  // path; inference, or training without a cache.
  // With a cache (training): the partial stage fills it, the tail adds the
  // post norm's statistics; then backward in two stages: backward_partial
  // writes every gradient of the layer's shards (and b2's, the post norm's
  // γ, β) and din_partial[valid_tokens(shape), d_model], the sum over its
  // shards of the gradient reaching the FFN input (a buffer of its own: it
  // must not overlap x or dy, which are read while it is written); backward_finish writes dx
  // (x's layout) and the pre norm's γ, β from that summed over every shard.
  void forward_partial(const float* x, const Shape& shape, float* partial, const RunOptions& opts = {},
                       ForwardCache* cache = nullptr) const;
  void forward_tail(const float* x, const Shape& shape, const float* sum, float* y, const RunOptions& opts = {},
                    ForwardCache* cache = nullptr) const;
  void backward_partial(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache,
                        float* din_partial, Weights& grads, const RunOptions& opts = {}) const;
  void backward_finish(const float* x, const float* dy, const Shape& shape, const ForwardCache& cache,
                       const float* din_sum, float* dx, Weights& grads, const RunOptions& opts = {}) const;


 private:
  Config cfg_;
  Weights w_;
  TensorNames names_;
  WeightDtype dtype_ = WeightDtype::fp32;
  std::vector<int64_t> fp32_inputs_;    // int8: input channels kept in float32
  DffShards shards_;                    // all 4 shards of its own d_ff unless set_shards
  std::shared_ptr<const void> quant_;   // nn::QuantizedWeights of a low-precision layer
  std::shared_ptr<const void> packed_;  // fast-path weight layout, built once
  std::vector<AssumedSetting> assumed_;  // by load
  // A low-precision layer from its stored matrices (a quantized file).
  FeedForward(const Config& cfg, Weights weights, WeightDtype dtype, std::shared_ptr<const void> quant);
  // The public calls' bodies; caller: the execution context of an enclosing
  // public call (an encoder's, a model's: detail::FfnAccess), or null to make
  // the call's own.
  void forward_impl(const nn::Context* caller, const float* x, float* y, const Shape& shape, const RunOptions& opts,
                    ForwardCache* cache) const;
  void backward_impl(const nn::Context* caller, const float* x, const float* dy, const Shape& shape,
                     const ForwardCache& cache, float* dx, Weights& grads, const RunOptions& opts, float* din_partial,
                     const float* din_sum) const;
  void prepare();
  friend struct detail::FfnAccess;
};

// The class's name before 0.2 (ffn::Layer, beside ffn::Encoder): kept for one
// release; the Python package keeps ffn.Layer.
using Layer [[deprecated("ffn::Layer is now ffn::FeedForward")]] = FeedForward;

}  // namespace ffn
