// Python bindings: the decoder (DecoderConfig, DecoderCache, DecoderState, Decoder) (the module: python/ffn_python.cpp).
#include "bindings.hpp"

namespace ffn::python {

void bind_decoder(nb::module_& m) {
  // ffn::DecoderConfig is ffn::EncoderConfig: one class, two names.
  m.attr("DecoderConfig") = m.attr("EncoderConfig");

  nb::class_<DecoderCacheHolder>(m, "DecoderCache",
                                 "What Decoder.forward(..., cache=True) saves for backward (opaque).")
      .def_prop_ro("nbytes", [](const DecoderCacheHolder& c) { return c.cache.bytes(); }, "Bytes held.");

  nb::class_<DecoderStateHolder>(m, "DecoderState",
                                 "Generation: the memory's keys and values and each live sequence's own, made by\n"
                                 "Decoder.start; step() appends one position to every live sequence.")
      .def("step", &decoder_step, "x"_a, "threads"_a = nb::none(),
           "y = the decoder's output at each live sequence's next position. x: float32 [live, d_model],\n"
           "that position's input (its embedding); y: [live, d_model], bitwise what forward gives at\n"
           "that position of the whole prefix (causal). Every live sequence advances by one position.")
      .def(
          "select",
          [](DecoderStateHolder& s, const std::vector<int64_t>& indices) {
            s.locked([&](DecoderState& st) { st.select(indices); });
          },
          "indices"_a,
          "New live sequence i is a copy of old live sequence indices[i] (any order, repeats allowed,\n"
          "fewer or more): beam search keeps its best continuations, finished sequences leave.")
      .def_prop_ro(
          "live", [](DecoderStateHolder& s) { return s.locked([](DecoderState& st) { return st.live(); }); },
          "Live sequences (stepped together).")
      .def(
          "length",
          [](DecoderStateHolder& s, int64_t i) { return s.locked([&](DecoderState& st) { return st.length(i); }); },
          "i"_a, "Positions live sequence i has (0 before its first step); IndexError if there is no i.")
      .def(
          "source",
          [](DecoderStateHolder& s, int64_t i) { return s.locked([&](DecoderState& st) { return st.source(i); }); },
          "i"_a, "The memory sequence live sequence i continues; IndexError if there is no i.")
      .def_prop_ro(
          "capacity", [](DecoderStateHolder& s) { return s.locked([](DecoderState& st) { return st.capacity(); }); },
          "The most positions a sequence may have.")
      .def_prop_ro(
          "nbytes", [](DecoderStateHolder& s) { return s.locked([](DecoderState& st) { return st.bytes(); }); },
          "Bytes held (keys and values).");

  nb::class_<Decoder>(m, "Decoder",
                      "A Transformer decoder (causal self-attention, cross-attention to the encoder's output,\n"
                      "FFN; N layers, optional final norm): the C++ library's ffn::Decoder, as\n"
                      "nn.TransformerDecoder with batch_first=True. The computation behind\n"
                      "ffn.torch.TransformerDecoder.")
      .def(
          "__init__",
          [](Decoder* self, const DecoderConfig& cfg, const nb::dict& weights) {
            new (self) Decoder(cfg, decoder_weights_from_dict(weights, cfg));
          },
          "config"_a, "weights"_a,
          "A decoder from a DecoderConfig (= EncoderConfig) and a dict of float32 arrays under\n"
          "nn.TransformerDecoder's state_dict names: layers.N.self_attn.in_proj_weight [3 d_model,\n"
          "d_model], layers.N.self_attn.in_proj_bias, layers.N.self_attn.out_proj.weight/.bias, the same\n"
          "under layers.N.multihead_attn. (cross-attention), layers.N.linear1.*, layers.N.linear2.*,\n"
          "layers.N.norm1.*, norm2.*, norm3.* (layers.N.gate.* for gated activations) and norm.* with\n"
          "final_norm; copied.")
      .def_static(
          "load",
          [](const std::string& path, const std::string& prefix, std::optional<int64_t> heads,
             std::optional<std::string> activation, std::optional<std::string> norm,
             std::optional<std::string> norm_type, std::optional<double> eps) {
            DecoderLoadOptions o;
            o.prefix = prefix;
            o.heads = heads;
            if (activation) o.activation = parse_activation(*activation, "activation");
            if (norm) o.norm = parse_norm_placement(*norm, "norm");
            if (norm_type) o.norm_type = parse_norm_type(*norm_type, "norm_type");
            if (eps) o.eps = float(*eps);
            Decoder dec = [&] {
              nb::gil_scoped_release nogil;
              return Decoder::load(path, o);
            }();
            warn_assumed(path, dec.assumed_settings());
            return dec;
          },
          "path"_a, "prefix"_a = "", "heads"_a = nb::none(), "activation"_a = nb::none(), "norm"_a = nb::none(),
          "norm_type"_a = nb::none(), "eps"_a = nb::none(),
          "Reads a safetensors file: nn.TransformerDecoder's state_dict names (layers.N.*, norm.*), one\n"
          "nn.TransformerDecoderLayer's, or with prefix='decoder.' an nn.Transformer's decoder. Settings\n"
          "come from its metadata unless given here (heads is required without it); one taken from a\n"
          "default raises a UserWarning.")
      .def("save", [](const Decoder& dec, const std::string& path) { dec.save(path); }, "path"_a,
           "Writes a safetensors file atomically, with the settings in its metadata.")
      .def_prop_ro("config", &Decoder::config)
      .def_prop_ro("weights", [](const Decoder& dec) { return decoder_weights_dict(dec.config(), dec.weights()); },
                   "Copies of the parameters, under the names __init__ takes.")
      .def("forward", &decoder_forward, "x"_a, "memory"_a, "lengths"_a = nb::none(), "memory_lengths"_a = nb::none(),
           "causal"_a = true, "training"_a = false, "seed"_a = 0, "threads"_a = nb::none(), "cache"_a = false,
           "y = decoder(x, memory). x: float32, C-contiguous, [B, T, d_model] or one sequence [T, d_model];\n"
           "memory (the encoder's output): [B, S, d_model] or [S, d_model], the same B; read in place.\n"
           "lengths, memory_lengths: B lengths (key padding at the end of each sequence; padding\n"
           "positions are never read, y is zero there). causal (the default): target position t\n"
           "attends to target positions 0..t. training: dropout on, masks keyed by seed. cache=True\n"
           "returns (y, cache) for backward.")
      .def("backward", &decoder_backward, "x"_a, "memory"_a, "dy"_a, "cache"_a, "threads"_a = nb::none(),
           "(dx, dmemory, grads): dL/dx, dL/dmemory (zeros at padding) and a dict of dL/dparameter\n"
           "under the names of .weights, from the forward(..., cache=True) on x and memory (its lengths,\n"
           "causal, training, seed).")
      .def("start", &decoder_start, "memory"_a, "memory_lengths"_a = nb::none(), nb::kw_only(), "capacity"_a,
           "threads"_a = nb::none(), nb::keep_alive<0, 1>(), nb::rv_policy::take_ownership,
           "A DecoderState for generating continuations of each memory sequence (memory: [B, S, d_model]\n"
           "or [S, d_model]; memory_lengths as forward's), at most capacity positions each: every\n"
           "layer's keys and values of the memory, computed once. Inference only (no dropout).");

}

}  // namespace ffn::python
