// Python bindings: the decoder (DecoderConfig, DecoderCache, DecoderState, Decoder) (the module: python/ffn_python.cpp).
#include "bindings.hpp"

namespace ffn::python {

// ---- the decoder's holders and calls (this file's only) ----

// ---- the decoder --------------------------------------------------------------

// The parameters of w (sized for cfg, as DecoderWeights::zeros or backward
// make them) under nn.TransformerDecoder's names: layers.N.self_attn.*,
// layers.N.multihead_attn.*, layers.N.linear1.*, layers.N.gate.* (gated
// activations), layers.N.linear2.*, layers.N.norm1.*, norm2.*, norm3.* (the
// FFN's norm) and, with final_norm, norm.*. A parameter cfg lacks (biases, an
// RMSNorm's β) is empty in w and left out.
inline std::vector<StackParam> decoder_params(const DecoderConfig& cfg, DecoderWeights& w) {
  const int64_t d = cfg.d_model;
  const auto ffn_shapes = param_shapes(cfg.ffn_config());
  static const char* const ffn_names[8] = {"linear1.weight", "linear1.bias", "gate.weight",  "gate.bias",
                                           "linear2.weight", "linear2.bias", "norm3.weight", "norm3.bias"};
  std::vector<StackParam> out;
  auto add = [&](std::string name, std::vector<float>& v, std::vector<int64_t> shape) {
    if (!v.empty()) out.push_back({std::move(name), &v, std::move(shape)});
  };
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    DecoderLayerWeights& l = w.layers[i];
    for (auto [attn, a] : {std::pair{"self_attn.", &l.self_attn}, std::pair{"multihead_attn.", &l.cross_attn}}) {
      add(p + attn + "in_proj_weight", a->in_proj_weight, {3 * d, d});
      add(p + attn + "in_proj_bias", a->in_proj_bias, {3 * d});
      add(p + attn + "out_proj.weight", a->out_proj_weight, {d, d});
      add(p + attn + "out_proj.bias", a->out_proj_bias, {d});
    }
    const auto f = l.ffn.all();
    for (size_t k = 0; k < 6; ++k) add(p + ffn_names[k], *f[k], ffn_shapes[k]);
    add(p + "norm1.weight", l.norm1_weight, {d});
    add(p + "norm1.bias", l.norm1_bias, {d});
    add(p + "norm2.weight", l.norm2_weight, {d});
    add(p + "norm2.bias", l.norm2_bias, {d});
    for (size_t k = 6; k < 8; ++k) add(p + ffn_names[k], *f[k], ffn_shapes[k]);
  }
  add("norm.weight", w.norm_weight, {d});
  add("norm.bias", w.norm_bias, {d});
  return out;
}

inline nb::dict decoder_weights_dict(const DecoderConfig& cfg, DecoderWeights w) {
  return params_dict(decoder_params(cfg, w));
}

inline DecoderWeights decoder_weights_from_dict(const nb::dict& d, const DecoderConfig& cfg) {
  DecoderWeights w = DecoderWeights::zeros(cfg);
  params_from_dict(d, decoder_params(cfg, w), cfg, "a decoder");
  return w;
}

// A decoder forward's saved state for backward, as EncoderCacheHolder: the
// decoder, the shapes of the target and the memory, the mask options.
struct DecoderCacheHolder {
  DecoderCache cache;
  const Decoder* decoder = nullptr;
  std::vector<int64_t> x_shape, memory_shape;
  Shape shape, mshape;
  DecoderRunOptions opts;
};

inline nb::object decoder_forward(const Decoder& dec, const ArrayArg& x_arg, const ArrayArg& memory_arg,
                           std::optional<std::vector<int64_t>> lengths,
                           std::optional<std::vector<int64_t>> memory_lengths, bool causal, bool training,
                           uint64_t seed, std::optional<int> threads, bool cache) {
  const AnyArray x = as_input(x_arg, "x"), mem = as_input(memory_arg, "memory");
  const float* xp = input_data(x, "x");
  const float* mp = input_data(mem, "memory");
  const std::vector<int64_t> xs = shape_of(x), ms = shape_of(mem);
  DecoderRunOptions o;
  static_cast<RunOptions&>(o) = run_options(threads, training, seed);
  o.causal = causal;
  const Shape shape = encoder_shape(dec.config(), xs, lengths, "x");
  const Shape mshape = encoder_shape(dec.config(), ms, memory_lengths, "memory");
  NumpyF32 y = new_array(xs);
  std::unique_ptr<DecoderCacheHolder> c;
  if (cache) c.reset(new DecoderCacheHolder{DecoderCache(), &dec, xs, ms, shape, mshape, o});
  Interruptible stop;
  o.interrupted = stop.hook();  // after the copy in the cache holder: backward makes its own
  stop.run([&] { dec.forward(xp, shape, mp, mshape, y.data(), o, c ? &c->cache : nullptr); });
  if (!cache) return nb::cast(y);
  return nb::make_tuple(y, nb::cast(c.release(), nb::rv_policy::take_ownership));
}

inline nb::tuple decoder_backward(const Decoder& dec, const ArrayArg& x_arg, const ArrayArg& memory_arg,
                           const ArrayArg& dy_arg, const DecoderCacheHolder& cache, std::optional<int> threads) {
  const AnyArray x = as_input(x_arg, "x"), mem = as_input(memory_arg, "memory"), dy = as_input(dy_arg, "dy");
  const float* xp = input_data(x, "x");
  const float* mp = input_data(mem, "memory");
  const float* dyp = input_data(dy, "dy");
  const std::vector<int64_t> xs = shape_of(x), ms = shape_of(mem);
  if (cache.decoder != &dec) throw Error("cache: from another decoder's forward");
  if (cache.x_shape != xs)
    throw Error("cache: from a forward on shape " + shape_text(cache.x_shape.size(), cache.x_shape.data()) +
                ", but x has shape " + shape_text(xs.size(), xs.data()));
  if (cache.memory_shape != ms)
    throw Error("cache: from a forward on memory of shape " +
                shape_text(cache.memory_shape.size(), cache.memory_shape.data()) + ", but memory has shape " +
                shape_text(ms.size(), ms.data()));
  if (shape_of(dy) != xs)
    throw Error("dy: shape " + shape_text(dy.ndim(), dy.shape_ptr()) + ", expected x's shape " +
                shape_text(xs.size(), xs.data()));
  DecoderRunOptions o = cache.opts;  // the forward's mask and dropout settings
  o.threads = run_options(threads, false, 0).threads;
  NumpyF32 dx = new_array(xs), dmemory = new_array(ms);
  DecoderWeights grads;
  Interruptible stop;
  o.interrupted = stop.hook();
  stop.run([&] {
    dec.backward(xp, dyp, cache.shape, mp, cache.mshape, cache.cache, dx.data(), dmemory.data(), grads, o);
  });
  return nb::make_tuple(dx, dmemory, decoder_weights_dict(dec.config(), std::move(grads)));
}

// A generation state and the decoder that started it (kept alive by
// Decoder.start). step and select change the state: its lock keeps two
// Python threads (each without the GIL) from doing so at once.
struct DecoderStateHolder {
  DecoderState state;
  const Decoder* decoder = nullptr;
  std::mutex lock;

  // f(state) under the lock, taken without the GIL (a step holding the lock
  // takes the GIL in its Ctrl-C hook: waiting for the lock with the GIL
  // held could wait forever).
  template <class F>
  auto locked(F&& f) {
    nb::gil_scoped_release nogil;
    std::lock_guard hold(lock);
    return f(state);
  }
};

inline DecoderStateHolder* decoder_start(const Decoder& dec, const ArrayArg& memory_arg,
                                  std::optional<std::vector<int64_t>> memory_lengths, int64_t capacity,
                                  std::optional<int> threads) {
  const AnyArray mem = as_input(memory_arg, "memory");
  const float* mp = input_data(mem, "memory");
  const Shape mshape = encoder_shape(dec.config(), shape_of(mem), memory_lengths, "memory");
  RunOptions o = run_options(threads, false, 0);
  auto holder = std::make_unique<DecoderStateHolder>();
  holder->decoder = &dec;
  Interruptible stop;
  o.interrupted = stop.hook();
  stop.run([&] { holder->state = dec.start(mp, mshape, capacity, o); });
  return holder.release();
}

inline NumpyF32 decoder_step(DecoderStateHolder& s, const ArrayArg& x_arg, std::optional<int> threads) {
  const AnyArray x = as_input(x_arg, "x");
  const float* xp = input_data(x, "x");
  const int64_t live = s.locked([](const DecoderState& st) { return st.live(); });
  const int64_t d = s.decoder->config().d_model;
  const std::vector<int64_t> want{live, d};
  if (shape_of(x) != want)
    throw Error("x: shape " + shape_text(x.ndim(), x.shape_ptr()) + ", expected [live, d_model] = " +
                shape_text(want.size(), want.data()) + " (one position per live sequence)");
  NumpyF32 y = new_array(want);
  RunOptions o = run_options(threads, false, 0);
  Interruptible stop;
  o.interrupted = stop.hook();  // a stopped step leaves the state as it was (no sequence advanced)
  stop.run([&] {
    std::lock_guard lock(s.lock);
    if (s.state.live() != live) throw Error("step: another thread changed the live sequences during this call");
    s.decoder->step(s.state, xp, y.data(), o);
  });
  return y;
}

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
