// Python bindings: the encoder (EncoderConfig, EncoderCache, Encoder) (the module: python/ffn_python.cpp).
#include "bindings.hpp"

namespace ffn::python {

// ---- the encoder's holders and calls (this file's only) ----

// The parameters of w (sized for cfg, as EncoderWeights::zeros or backward
// make them) under nn.TransformerEncoder's names: layers.N.self_attn.*,
// layers.N.linear1.*, layers.N.gate.* (gated activations), layers.N.linear2.*,
// layers.N.norm1.*, layers.N.norm2.* and, with final_norm, norm.*. A
// parameter cfg lacks (biases, an RMSNorm's β) is empty in w and left out.
inline std::vector<StackParam> encoder_params(const EncoderConfig& cfg, EncoderWeights& w) {
  const int64_t d = cfg.d_model;
  const auto ffn_shapes = param_shapes(cfg.ffn_config());
  static const char* const ffn_names[8] = {"linear1.weight", "linear1.bias", "gate.weight",  "gate.bias",
                                           "linear2.weight", "linear2.bias", "norm2.weight", "norm2.bias"};
  std::vector<StackParam> out;
  auto add = [&](std::string name, std::vector<float>& v, std::vector<int64_t> shape) {
    if (!v.empty()) out.push_back({std::move(name), &v, std::move(shape)});
  };
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    EncoderLayerWeights& l = w.layers[i];
    add(p + "self_attn.in_proj_weight", l.in_proj_weight, {3 * d, d});
    add(p + "self_attn.in_proj_bias", l.in_proj_bias, {3 * d});
    add(p + "self_attn.out_proj.weight", l.out_proj_weight, {d, d});
    add(p + "self_attn.out_proj.bias", l.out_proj_bias, {d});
    const auto f = l.ffn.all();
    for (size_t k = 0; k < 8; ++k) add(p + ffn_names[k], *f[k], ffn_shapes[k]);
    add(p + "norm1.weight", l.norm1_weight, {d});
    add(p + "norm1.bias", l.norm1_bias, {d});
  }
  add("norm.weight", w.norm_weight, {d});
  add("norm.bias", w.norm_bias, {d});
  return out;
}

inline EncoderConfig make_encoder_config(int64_t d_model, int64_t heads, int64_t d_ff, int64_t layers,
                                  const std::string& activation, const std::string& norm,
                                  const std::string& norm_type, double eps, bool bias, double dropout,
                                  bool final_norm) {
  EncoderConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.d_ff = d_ff;
  c.layers = layers;
  c.activation = parse_activation(activation, "activation");
  c.norm = parse_norm_placement(norm, "norm");
  c.norm_type = parse_norm_type(norm_type, "norm_type");
  c.eps = float(eps);
  c.bias = bias;
  c.dropout = float(dropout);
  c.final_norm = final_norm;
  c.validate();
  return c;
}

inline nb::tuple encoder_config_reduce(nb::handle self) {
  const EncoderConfig& c = nb::cast<const EncoderConfig&>(self);
  return nb::make_tuple(self.type(),
                        nb::make_tuple(c.d_model, c.heads, c.d_ff, c.layers, std::string(to_string(c.activation)),
                                       std::string(to_string(c.norm)), std::string(to_string(c.norm_type)), c.eps,
                                       c.bias, c.dropout, c.final_norm));
}

inline std::string encoder_config_repr(const EncoderConfig& c) {
  char eps[32], dropout[32];
  std::snprintf(eps, sizeof eps, "%g", double(c.eps));
  std::snprintf(dropout, sizeof dropout, "%g", double(c.dropout));
  return "ffn.EncoderConfig(d_model=" + std::to_string(c.d_model) + ", heads=" + std::to_string(c.heads) +
         ", d_ff=" + std::to_string(c.d_ff) + ", layers=" + std::to_string(c.layers) + ", activation='" +
         std::string(to_string(c.activation)) + "', norm='" + std::string(to_string(c.norm)) + "', norm_type='" +
         std::string(to_string(c.norm_type)) + "', eps=" + eps + ", bias=" + (c.bias ? "True" : "False") +
         ", dropout=" + dropout + ", final_norm=" + (c.final_norm ? "True" : "False") + ")";
}

inline nb::dict encoder_weights_dict(const EncoderConfig& cfg, EncoderWeights w) {
  return params_dict(encoder_params(cfg, w));
}

inline EncoderWeights encoder_weights_from_dict(const nb::dict& d, const EncoderConfig& cfg) {
  EncoderWeights w = EncoderWeights::zeros(cfg);
  params_from_dict(d, encoder_params(cfg, w), cfg, "an encoder");
  return w;
}

// An encoder forward's saved state for backward: the encoder it ran on (the
// cache holds activations, not weights: another encoder's backward would mix
// them with its own weights), the input's shape and the mask options.
struct EncoderCacheHolder {
  EncoderCache cache;
  const Encoder* encoder = nullptr;
  std::vector<int64_t> x_shape;
  Shape shape;
  EncoderRunOptions opts;
};

inline nb::object encoder_forward(const Encoder& enc, const ArrayArg& x_arg, std::optional<std::vector<int64_t>> lengths,
                           bool causal, bool training, uint64_t seed, std::optional<int> threads, bool cache) {
  const AnyArray x = as_input(x_arg, "x");
  const float* xp = input_data(x, "x");
  const std::vector<int64_t> xs = shape_of(x);
  EncoderRunOptions o;
  static_cast<RunOptions&>(o) = run_options(threads, training, seed);
  o.causal = causal;
  const Shape shape = encoder_shape(enc.config(), xs, lengths);
  NumpyF32 y = new_array(xs);
  std::unique_ptr<EncoderCacheHolder> c;
  if (cache) c.reset(new EncoderCacheHolder{EncoderCache(), &enc, xs, shape, o});
  Interruptible stop;
  o.interrupted = stop.hook();  // after the copy in the cache holder: backward makes its own
  stop.run([&] { enc.forward(xp, y.data(), shape, o, c ? &c->cache : nullptr); });
  if (!cache) return nb::cast(y);
  return nb::make_tuple(y, nb::cast(c.release(), nb::rv_policy::take_ownership));
}

inline nb::tuple encoder_backward(const Encoder& enc, const ArrayArg& x_arg, const ArrayArg& dy_arg,
                           const EncoderCacheHolder& cache, std::optional<int> threads) {
  const AnyArray x = as_input(x_arg, "x"), dy = as_input(dy_arg, "dy");
  const float* xp = input_data(x, "x");
  const float* dyp = input_data(dy, "dy");
  const std::vector<int64_t> xs = shape_of(x);
  if (cache.encoder != &enc) throw Error("cache: from another encoder's forward");
  if (cache.x_shape != xs)
    throw Error("cache: from a forward on shape " + shape_text(cache.x_shape.size(), cache.x_shape.data()) +
                ", but x has shape " + shape_text(xs.size(), xs.data()));
  if (shape_of(dy) != xs)
    throw Error("dy: shape " + shape_text(dy.ndim(), dy.shape_ptr()) + ", expected x's shape " +
                shape_text(xs.size(), xs.data()));
  EncoderRunOptions o = cache.opts;  // the forward's mask and dropout settings
  o.threads = run_options(threads, false, 0).threads;
  NumpyF32 dx = new_array(xs);
  EncoderWeights grads;
  Interruptible stop;
  o.interrupted = stop.hook();
  stop.run([&] { enc.backward(xp, dyp, cache.shape, cache.cache, dx.data(), grads, o); });
  return nb::make_tuple(dx, encoder_weights_dict(enc.config(), std::move(grads)));
}

void bind_encoder(nb::module_& m) {
  nb::class_<EncoderConfig>(m, "EncoderConfig",
                            "Shape and settings of a Transformer encoder (nn.TransformerEncoder with\n"
                            "batch_first=True): d_model, heads, d_ff, layers, activation, norm placement (post, or\n"
                            "pre = norm_first), norm_type, eps, biases, dropout (one p at PyTorch's four sites,\n"
                            "training only), final_norm (nn.TransformerEncoder's norm).")
      .def(nb::new_(&make_encoder_config), "d_model"_a = 512, "heads"_a = 8, "d_ff"_a = 2048, "layers"_a = 1,
           "activation"_a = "relu", "norm"_a = "post", "norm_type"_a = "layernorm", "eps"_a = 1e-5,
           "bias"_a = true, "dropout"_a = 0.0, "final_norm"_a = false)
      .def_ro("d_model", &EncoderConfig::d_model)
      .def_ro("heads", &EncoderConfig::heads)
      .def_ro("d_ff", &EncoderConfig::d_ff)
      .def_ro("layers", &EncoderConfig::layers)
      .def_prop_ro("activation", [](const EncoderConfig& c) { return std::string(to_string(c.activation)); })
      .def_prop_ro("norm", [](const EncoderConfig& c) { return std::string(to_string(c.norm)); })
      .def_prop_ro("norm_type", [](const EncoderConfig& c) { return std::string(to_string(c.norm_type)); })
      .def_ro("eps", &EncoderConfig::eps)
      .def_ro("bias", &EncoderConfig::bias)
      .def_ro("dropout", &EncoderConfig::dropout)
      .def_ro("final_norm", &EncoderConfig::final_norm)
      .def("__repr__", &encoder_config_repr)
      .def("__reduce__", &encoder_config_reduce);

  nb::class_<EncoderCacheHolder>(m, "EncoderCache", "What Encoder.forward(..., cache=True) saves for backward (opaque).")
      .def_prop_ro("nbytes", [](const EncoderCacheHolder& c) { return c.cache.bytes(); }, "Bytes held.");

  nb::class_<Encoder>(m, "Encoder",
                      "A Transformer encoder (self-attention and FFN sublayers, N layers, optional final norm):\n"
                      "the C++ library's ffn::Encoder. The computation behind ffn.torch.TransformerEncoder.")
      .def(
          "__init__",
          [](Encoder* self, const EncoderConfig& cfg, const nb::dict& weights) {
            new (self) Encoder(cfg, encoder_weights_from_dict(weights, cfg));
          },
          "config"_a, "weights"_a,
          "An encoder from a dict of float32 arrays under nn.TransformerEncoder's state_dict names:\n"
          "layers.N.self_attn.in_proj_weight [3 d_model, d_model], layers.N.self_attn.in_proj_bias,\n"
          "layers.N.self_attn.out_proj.weight/.bias, layers.N.linear1.*, layers.N.linear2.*,\n"
          "layers.N.norm1.*, layers.N.norm2.* (layers.N.gate.* for gated activations) and norm.* with\n"
          "final_norm; copied.")
      .def_prop_ro("config", &Encoder::config)
      .def_prop_ro("weights", [](const Encoder& e) { return encoder_weights_dict(e.config(), e.weights()); },
                   "Copies of the parameters, under the names __init__ takes.")
      .def("forward", &encoder_forward, "x"_a, "lengths"_a = nb::none(), "causal"_a = false, "training"_a = false,
           "seed"_a = 0, "threads"_a = nb::none(), "cache"_a = false,
           "y = encoder(x). x: float32, C-contiguous, [B, S, d_model] or one sequence [S, d_model]; read\n"
           "in place. lengths: B sequence lengths (key padding at the end of each sequence; padding\n"
           "positions are never read and written as zeros). causal: query s attends to keys 0..s.\n"
           "training: dropout on, masks keyed by seed. cache=True returns (y, cache) for backward.")
      .def("backward", &encoder_backward, "x"_a, "dy"_a, "cache"_a, "threads"_a = nb::none(),
           "(dx, grads): dL/dx (zeros at padding) and a dict of dL/dparameter under the names of\n"
           ".weights, from the forward(..., cache=True) on x (its lengths, causal, training, seed).");

}

}  // namespace ffn::python
