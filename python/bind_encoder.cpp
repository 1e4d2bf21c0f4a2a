// Python bindings: the encoder (EncoderConfig, EncoderCache, Encoder) (the module: python/ffn_python.cpp).
#include "bindings.hpp"

namespace ffn::python {

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
