// Python bindings: the FFN sublayer (Config, Cache, Layer) (the module: python/ffn_python.cpp).
#include "bindings.hpp"

namespace ffn::python {

// ---- the layer's parameter dicts and pickling (this file's only) ----

// A Weights from a dict named as `names`: every name present with its shape,
// no other key. Copies (the layer keeps its own packed copy anyway).
inline Weights weights_from_dict(const nb::dict& d, const TensorNames& names, const Config& cfg) {
  const auto shapes = param_shapes(cfg);
  Weights w;
  std::array<std::vector<float>*, 8> dst = {&w.w1, &w.b1, &w.wg, &w.bg, &w.w2, &w.b2, &w.norm_weight, &w.norm_bias};
  const auto keys = names.all();
  std::string expected;
  for (const std::string* k : keys)
    if (!k->empty()) expected += (expected.empty() ? "" : ", ") + *k;
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    bool known = false;
    for (const std::string* n : keys) known = known || (!n->empty() && *n == k);
    if (!known) throw Error("weights: unexpected tensor '" + k + "'; this layer's are " + expected);
  }
  for (size_t i = 0; i < 8; ++i) {
    if (keys[i]->empty()) continue;
    const char* name = keys[i]->c_str();
    if (!d.contains(name)) throw Error("weights: missing tensor '" + *keys[i] + "'; this layer's are " + expected);
    const std::string what = "weights['" + *keys[i] + "']";
    const AnyArray a = as_input(ArrayArg{d[name]}, what);
    const float* p = input_data(a, what.c_str());
    if (shape_of(a) != shapes[i])
      throw Error(what + ": shape " + shape_text(a.ndim(), a.shape_ptr()) + ", expected " +
                  shape_text(shapes[i].size(), shapes[i].data()));
    dst[i]->assign(p, p + a.size());
  }
  return w;
}

// Config as pickle (and copy.deepcopy) store it: the class and make_config's
// arguments, so loading validates them again. (__reduce__, not
// __getstate__/__setstate__: nb::new_ makes Python's __new__ return an
// initialized Config, which __setstate__ may not initialize again.)
inline nb::tuple config_reduce(nb::handle self) {
  const Config& c = nb::cast<const Config&>(self);
  return nb::make_tuple(self.type(), nb::make_tuple(c.d_model, c.d_ff, std::string(to_string(c.activation)), c.bias,
                                                     std::string(to_string(c.norm)),
                                                     std::string(to_string(c.norm_type)), c.eps, c.dropout_hidden,
                                                     c.dropout_output));
}

inline std::string config_repr(const Config& c) {
  char eps[32];
  std::snprintf(eps, sizeof eps, "%g", double(c.eps));
  return "ffn.Config(d_model=" + std::to_string(c.d_model) + ", d_ff=" + std::to_string(c.d_ff) + ", activation='" +
         std::string(to_string(c.activation)) + "', bias=" + (c.bias ? "True" : "False") + ", norm='" +
         std::string(to_string(c.norm)) + "', norm_type='" + std::string(to_string(c.norm_type)) + "', eps=" + eps +
         ")";
}

void bind_layer(nb::module_& m) {
  nb::class_<Config>(m, "Config",
                     "Shape and settings of a layer: d_model -> d_ff -> d_model, activation (relu, gelu, gelu_tanh,\n"
                     "silu, swiglu, geglu, reglu, geglu_tanh), biases, norm placement (post, pre, none) and type (layernorm,\n"
                     "rmsnorm), eps, dropout probabilities (training mode only).")
      .def(nb::new_(&make_config), "d_model"_a = 512, "d_ff"_a = 2048, "activation"_a = "relu", "bias"_a = true,
           "norm"_a = "post", "norm_type"_a = "layernorm", "eps"_a = 1e-5, "dropout_hidden"_a = 0.0,
           "dropout_output"_a = 0.0)
      .def_ro("d_model", &Config::d_model)
      .def_ro("d_ff", &Config::d_ff)
      .def_prop_ro("activation", [](const Config& c) { return std::string(to_string(c.activation)); })
      .def_ro("bias", &Config::bias)
      .def_prop_ro("norm", [](const Config& c) { return std::string(to_string(c.norm)); })
      .def_prop_ro("norm_type", [](const Config& c) { return std::string(to_string(c.norm_type)); })
      .def_ro("eps", &Config::eps)
      .def_ro("dropout_hidden", &Config::dropout_hidden)
      .def_ro("dropout_output", &Config::dropout_output)
      .def("__repr__", &config_repr)
      .def("__reduce__", &config_reduce);

  nb::class_<Cache>(m, "Cache", "What forward(..., cache=True) saves for backward (opaque).")
      .def_prop_ro("nbytes", [](const Cache& c) { return c.cache.bytes(); }, "Bytes held.");

  nb::class_<FeedForward>(m, "Layer", "The FFN sublayer: weights packed once for the fast path; forward and backward.")
      .def(
          "__init__",
          [](FeedForward* self, const Config& cfg, const nb::dict& weights, const std::string& dtype) {
            const WeightDtype t = parse_weight_dtype(dtype, "dtype");
            new (self) FeedForward(cfg, weights_from_dict(weights, TensorNames::native(cfg), cfg), t);
          },
          "config"_a, "weights"_a, "dtype"_a = "fp32",
          "A layer from a dict of float32 arrays named linear1.weight [d_ff, d_model], linear1.bias,\n"
          "gate.weight/gate.bias (gated activations), linear2.weight [d_model, d_ff], linear2.bias,\n"
          "norm.weight, norm.bias (LayerNorm); copied. dtype: fp32, bf16, fp16 or int8 weight storage.")
      .def_static(
          "load",
          [](const std::string& path, const std::string& prefix, std::optional<std::string> dtype,
             std::optional<std::string> activation, std::optional<std::string> norm,
             std::optional<std::string> norm_type, std::optional<double> eps) {
            LoadOptions o;
            o.prefix = prefix;
            if (dtype) o.weight_dtype = parse_weight_dtype(*dtype, "dtype");
            if (activation) o.activation = parse_activation(*activation, "activation");
            if (norm) o.norm = parse_norm_placement(*norm, "norm");
            if (norm_type) o.norm_type = parse_norm_type(*norm_type, "norm_type");
            if (eps) o.eps = float(*eps);
            FeedForward layer = [&] {
              nb::gil_scoped_release nogil;
              return FeedForward::load(path, o);
            }();
            warn_assumed(path, layer.assumed_settings());
            return layer;
          },
          "path"_a, "prefix"_a = "", "dtype"_a = nb::none(), "activation"_a = nb::none(), "norm"_a = nb::none(),
          "norm_type"_a = nb::none(), "eps"_a = nb::none(),
          "Reads a safetensors file (ffn's names, nn.TransformerEncoderLayer's linear1/linear2/norm2, or\n"
          "LLaMA's mlp.gate_proj/up_proj/down_proj). Settings come from its metadata unless given here;\n"
          "one taken from a default raises a UserWarning. dtype: None keeps the file's own storage.")
      .def("save", [](const FeedForward& l, const std::string& path) { l.save(path); }, "path"_a,
           "Writes a safetensors file atomically, with the settings in its metadata.")
      .def(
          "converted",
          [](const FeedForward& l, const std::string& dtype, std::optional<std::vector<int64_t>> fp32_input_channels) {
            const WeightDtype dt = parse_weight_dtype(dtype, "dtype");
            if (!fp32_input_channels) return l.converted(dt);
            return l.converted(dt, Int8Options{*fp32_input_channels});
          },
          "dtype"_a, "fp32_input_channels"_a = nb::none(),
          "A copy with the weight matrices stored as dtype (fp32, bf16, fp16, int8). int8 only:\n"
          "fp32_input_channels, ascending input channels kept in float32 (LLM.int8()'s outlier\n"
          "decomposition): e.g. the channels where input_absmax(x) > 6 on representative inputs.")
      .def_prop_ro("fp32_input_channels", &FeedForward::fp32_input_channels,
                   "int8: the input channels kept in float32 (empty otherwise).")
      .def(
          "input_absmax",
          [](const FeedForward& l, const ArrayArg& x_arg) {
            const AnyArray x = as_input(x_arg, "x");
            const float* data = input_data(x, "x");
            if (x.ndim() != 2 || int64_t(x.shape(1)) != l.config().d_model)
              throw Error("x: expected [T, d_model = " + std::to_string(l.config().d_model) + "], got " +
                          shape_text(x.ndim(), x.shape_ptr()));
            std::vector<float> a;
            l.input_absmax(data, int64_t(x.shape(0)), a);
            return to_numpy(a, {l.config().d_model});
          },
          "x"_a,
          "Per input channel, max |value| entering W1 over the tokens of x [T, d_model] (Norm(x) for a\n"
          "pre-norm layer): calibration for converted('int8', fp32_input_channels=...).")
      .def_prop_ro("config", &FeedForward::config)
      .def_prop_ro("dtype", [](const FeedForward& l) { return std::string(to_string(l.weight_dtype())); })
      .def_prop_ro("weights", [](const FeedForward& l) { return weights_dict(l.weights(), l.names(), l.config()); },
                   "Copies of the parameters (values actually used), named as in the file they came from.")
      .def(
          "set_weights",
          [](FeedForward& l, const nb::dict& d) {
            Weights w = weights_from_dict(d, l.names(), l.config());
            nb::gil_scoped_release nogil;
            std::unique_lock lock(weights_lock);
            l.set_weights(std::move(w));
          },
          "weights"_a, "Replaces every parameter (same names and shapes as .weights) and re-packs.")
      .def("forward_flops", &FeedForward::forward_flops, "tokens"_a)
      .def("forward", &forward, "x"_a, "lengths"_a = nb::none(), "layout"_a = "tokens", "threads"_a = nb::none(),
           "training"_a = false, "seed"_a = 0, "out"_a = nb::none(), "cache"_a = false,
           "y = layer(x). x: float32, C-contiguous, [T, d_model] or [B, S, d_model] (layout 'ncw':\n"
           "[d_model, S] or [B, d_model, S]); read in place. lengths: B sequence lengths (padding is\n"
           "written as zeros). training: dropout on, masks keyed by seed. out: write y there instead of\n"
           "a new array. cache=True returns (y, cache) for backward.")
      .def("backward", &backward, "x"_a, "dy"_a, "cache"_a = nb::none(), "lengths"_a = nb::none(),
           "layout"_a = "tokens", "threads"_a = nb::none(), "training"_a = false, "seed"_a = 0,
           "(dx, grads): dL/dx and a dict of dL/dparameter named as .weights. With a cache from\n"
           "forward(..., cache=True) its lengths, training and seed are used; without, forward is\n"
           "recomputed with the ones given.");

}

}  // namespace ffn::python
