// Python bindings (nanobind): module ffn._ffn, re-exported by python/ffn/__init__.py;
// the PyTorch module is python/ffn/torch.py.
//
// Thin by design (shared/STYLE.md, nanobind): this file converts arguments and
// forwards to the C++ library; every check on values lives there. Arrays:
//   - inputs are read in place (no copy) when they are float32, C-contiguous
//     and on the CPU; anything else is refused with ffn.Error (a ValueError)
//     saying what to pass, never converted behind the caller's back;
//   - outputs are new NumPy arrays that own their memory, or `out=` arrays the
//     caller passes (then written in place).
// The GIL is released while the layer computes, and Ctrl-C stops a long call
// with KeyboardInterrupt (Interruptible, below). The encoder (ffn.Encoder, for
// ffn.torch.TransformerEncoder) and the decoder (ffn.Decoder, for
// ffn.torch.TransformerDecoder) take and return their parameters under
// nn.TransformerEncoder's and nn.TransformerDecoder's state_dict names.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "ffn/causal_lm.hpp"
#include "ffn/decoder.hpp"
#include "ffn/ffn.hpp"
#include "ffn/sentence.hpp"

namespace nb = nanobind;
using namespace nb::literals;

// Array arguments. nanobind converts an nb::ndarray parameter while it picks
// the overload, and what it cannot take as one (a big-endian NumPy array, a
// list, a tensor on another device) ends in a TypeError listing every
// signature, while bytes pass as uint8. ArrayArg (read) and OutArrayArg (written)
// take any object instead, and the function converts it with as_input /
// as_output, which say in one ffn.Error what it expected. Their names in
// signatures and stubs are those of the nb::ndarray types they stand for.
namespace ffn::python {
struct ArrayArg {
  nb::object obj;
};
struct OutArrayArg {
  nb::object obj;
};
}  // namespace ffn::python

namespace nanobind::detail {
template <class T>
struct any_object_caster {
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    static_cast<T*>(this)->value.obj = borrow(src);
    return true;
  }
};
template <>
struct type_caster<ffn::python::ArrayArg> : any_object_caster<type_caster<ffn::python::ArrayArg>> {
  NB_TYPE_CASTER(ffn::python::ArrayArg, const_name("ndarray[device='cpu', writable=False]"))
  static handle from_cpp(const ffn::python::ArrayArg& a, rv_policy, cleanup_list*) noexcept {
    return a.obj.inc_ref();
  }
};
template <>
struct type_caster<ffn::python::OutArrayArg> : any_object_caster<type_caster<ffn::python::OutArrayArg>> {
  NB_TYPE_CASTER(ffn::python::OutArrayArg, const_name("ndarray[device='cpu']"))
  static handle from_cpp(const ffn::python::OutArrayArg& a, rv_policy, cleanup_list*) noexcept {
    return a.obj.inc_ref();
  }
};
}  // namespace nanobind::detail

namespace ffn::python {
namespace {

using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;
using AnyOutArray = nb::ndarray<nb::device::cpu>;
using NumpyF32 = nb::ndarray<nb::numpy, float>;

std::string shape_text(size_t ndim, const int64_t* shape) {
  std::string t = "[";
  for (size_t i = 0; i < ndim; ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + "]";
}

std::string dtype_name(const nb::dlpack::dtype& t) {
  const char* kind = t.code == uint8_t(nb::dlpack::dtype_code::Float)  ? "float"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Int)  ? "int"
                     : t.code == uint8_t(nb::dlpack::dtype_code::UInt) ? "uint"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                                                                          : "other";
  return std::string(kind) + std::to_string(t.bits);
}

bool c_contiguous(size_t ndim, const int64_t* shape, const int64_t* stride) {
  int64_t want = 1;
  for (size_t i = ndim; i-- > 0;) {
    if (shape[i] != 1 && stride[i] != want) return false;
    want *= shape[i];
  }
  return true;
}

// The float32 C-contiguous view of `a`, or ffn::Error naming `what`.
template <class A>
void check_f32(const A& a, const char* what) {
  if (a.dtype() != nb::dtype<float>())
    throw Error(std::string(what) + ": expected float32, got " + dtype_name(a.dtype()) +
                " (convert with .astype(numpy.float32) or .float())");
  if (!c_contiguous(a.ndim(), a.shape_ptr(), a.stride_ptr()))
    throw Error(std::string(what) + ": expected a C-contiguous array, got strides that are not "
                "(pass numpy.ascontiguousarray(a) or a.contiguous())");
}

const float* input_data(const AnyArray& a, const char* what) {
  check_f32(a, what);
  return static_cast<const float*>(a.data());
}

std::vector<int64_t> shape_of(const AnyArray& a) { return {a.shape_ptr(), a.shape_ptr() + a.ndim()}; }

// str(h) (nb::str of an nb::object would take it as a str without converting).
std::string text(nb::handle h) { return nb::str(h).c_str(); }

// Why `h` is not an array ffn can read (or write), as one ffn::Error naming `what`.
[[noreturn]] void refuse_array(nb::handle h, const std::string& what, bool writable) {
  const std::string type = nb::type_name(h.type()).c_str();
  const bool array_like = nb::hasattr(h, "dtype") && nb::hasattr(h, "shape");  // NumPy, PyTorch, ...
  if (array_like) {
    nb::object dtype = h.attr("dtype");
    if (nb::hasattr(dtype, "isnative") && !nb::cast<bool>(dtype.attr("isnative")))
      throw Error(what + ": expected float32 in this machine's byte order, got " + text(dtype) +
                  " (convert with a.astype(numpy.float32))");
    if (nb::hasattr(h, "device") && text(h.attr("device")) != "cpu")
      throw Error(what + ": on " + text(h.attr("device")) + ", but ffn runs on the CPU (move it with .cpu())");
    if (writable) {
      AnyArray ro;
      if (nb::try_cast(h, ro)) throw Error(what + ": expected a writable array, got a read-only " + type);
    }
    throw Error(what + ": expected a float32 array, got " + type + " of dtype " + text(dtype));
  }
  throw Error(what + ": expected a float32 array (NumPy, a PyTorch CPU tensor or anything with the buffer "
              "protocol), got " + type);
}

// The array an ArrayArg holds, read in place, or ffn::Error naming `what`.
// bytes are refused although they are a buffer: read as uint8 they are never
// what was meant, and the uint8 message would advise .astype.
AnyArray as_input(const ArrayArg& arg, const std::string& what) {
  if (PyBytes_Check(arg.obj.ptr()) || PyByteArray_Check(arg.obj.ptr()))
    throw Error(what + ": expected a float32 array, got " + nb::type_name(arg.obj.type()).c_str() +
                " (raw float32 bytes: numpy.frombuffer(b, dtype=numpy.float32).reshape(...))");
  AnyArray a;
  if (!nb::try_cast(arg.obj, a)) refuse_array(arg.obj, what, false);
  return a;
}

AnyOutArray as_output(const OutArrayArg& arg, const std::string& what) {
  AnyOutArray a;
  if (PyBytes_Check(arg.obj.ptr()) || !nb::try_cast(arg.obj, a)) refuse_array(arg.obj, what, true);
  return a;
}

// A new NumPy float32 array of `shape` that owns its memory.
NumpyF32 new_array(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  float* data = new float[n > 0 ? n : 1];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  std::vector<size_t> s(shape.begin(), shape.end());
  return NumpyF32(data, s.size(), s.data(), owner);
}

NumpyF32 to_numpy(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  NumpyF32 a = new_array(shape);
  if (!v.empty()) std::memcpy(a.data(), v.data(), v.size() * sizeof(float));
  return a;
}

// ---- Ctrl-C --------------------------------------------------------------------
//
// Python runs its SIGINT handler (which raises KeyboardInterrupt) only when the
// interpreter has control. While the library computes without the GIL, Ctrl-C
// would wait for the end of the call, and the handler then ran inside the
// first Python call after it: nanobind's export of the result, which turned
// KeyboardInterrupt into a RuntimeError. So each long call hands the library
// a RunOptions::interrupted hook: at its safe points (pieces of rows,
// sublayers, batches: ffn/types.hpp) the hook takes the GIL and runs the
// handlers (PyErr_CheckSignals); when one raises, the library stops with
// ffn::Interrupted and the call raises that exception once the computation
// has unwound, before any result is made. The object is left as it was.
//
// Python delivers signals to its main thread only, so calls from other
// threads get no hook (nor any wait for the GIL). The hook takes the GIL at
// most every kInterruptInterval: a stop waits that long at most (plus one
// piece of work), and a Python thread busy with the GIL, which the hook may
// wait for (up to the interpreter's 5 ms switch interval), costs a long call
// 10 % at worst.
constexpr std::chrono::milliseconds kInterruptInterval{50};
unsigned long main_thread_ident = 0;  // threading.main_thread().ident, at import

// Generated bytes as a Python str: a byte sequence that is not UTF-8 (a
// character cut between tokens) becomes U+FFFD, as transformers' decode.
nb::object utf8_text(const std::string& bytes) {
  PyObject* o = PyUnicode_DecodeUTF8(bytes.data(), Py_ssize_t(bytes.size()), "replace");
  if (!o) throw nb::python_error();
  return nb::steal(o);
}

class Interruptible {
 public:
  // With the GIL held, on the thread that makes the call.
  Interruptible() : main_(PyThread_get_thread_ident() == main_thread_ident) {}
  Interruptible(const Interruptible&) = delete;
  Interruptible& operator=(const Interruptible&) = delete;

  // For RunOptions::interrupted (EmbedOptions::interrupted); empty off the main thread.
  std::function<bool()> hook() {
    if (!main_) return {};
    return [this] { return signalled(); };
  }

  // compute() without the GIL. A stop raises the signal handler's exception;
  // a signal that came after the last safe point has its handler run here,
  // with the GIL, so the caller never exports a result after it.
  template <class F>
  void run(F&& compute) {
    bool stopped = false;
    {
      nb::gil_scoped_release nogil;
      try {
        compute();
      } catch (const Interrupted&) {
        stopped = true;
      }
    }
    if (stopped) throw std::move(*error_);  // set: only the hook stops the library
    if (main_ && PyErr_CheckSignals() != 0) throw nb::python_error();
  }

 private:
  bool signalled() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return false;
    next_ = now + kInterruptInterval;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return false;  // no signal, or a handler that did not raise
    error_.emplace();  // takes the handler's exception (KeyboardInterrupt) off the error indicator
    return true;
  }

  const bool main_;
  std::chrono::steady_clock::time_point next_ = std::chrono::steady_clock::now() + kInterruptInterval;
  std::optional<nb::python_error> error_;
};

// The Shape of an input array in `layout`: tokens [T, d] or [B, S, d]; ncw
// [d, S] or [B, d, S].
Shape shape_for(const Config& cfg, const std::vector<int64_t>& s, const std::string& layout_name,
                const std::optional<std::vector<int64_t>>& lengths, const char* what) {
  const Layout layout = parse_layout(layout_name, "layout");
  Shape shape;
  shape.layout = layout;
  const int64_t d = cfg.d_model;
  const bool ok = (s.size() == 2 || s.size() == 3) && (layout == Layout::tokens ? s.back() == d : s[s.size() - 2] == d);
  if (!ok)
    throw Error(std::string(what) + ": shape " + shape_text(s.size(), s.data()) + ", expected " +
                (layout == Layout::tokens ? "[T, " + std::to_string(d) + "] or [B, S, " + std::to_string(d) + "]"
                                          : "[" + std::to_string(d) + ", S] or [B, " + std::to_string(d) + ", S]") +
                " (d_model " + std::to_string(d) + ", layout " + layout_name + ")");
  shape.batch = s.size() == 3 ? s[0] : 1;
  shape.seq = layout == Layout::tokens ? s[s.size() - 2] : s.back();
  if (lengths) shape.lengths = *lengths;
  return shape;
}

RunOptions run_options(std::optional<int> threads, bool training, uint64_t seed) {
  RunOptions o;
  if (threads) {
    if (*threads < 0 || *threads > kMaxThreads)
      throw Error("threads: expected 0.." + std::to_string(kMaxThreads) + " (0 = all cores), got " +
                  std::to_string(*threads));
    o.threads = *threads;
  }
  o.training = training;
  o.seed = seed;
  return o;
}

// The shapes of the eight parameters, in the order of Weights::all().
std::array<std::vector<int64_t>, 8> param_shapes(const Config& cfg) {
  const int64_t d = cfg.d_model, f = cfg.d_ff;
  return {std::vector<int64_t>{f, d}, {f}, {f, d}, {f}, {d, f}, {d}, {d}, {d}};
}

// Weights by the names of `names` (a name left empty: the layer lacks it).
nb::dict weights_dict(const Weights& w, const TensorNames& names, const Config& cfg) {
  const auto shapes = param_shapes(cfg);
  const auto tensors = w.all();
  const auto keys = names.all();
  nb::dict out;
  for (size_t i = 0; i < 8; ++i)
    if (!keys[i]->empty() && !tensors[i]->empty()) out[keys[i]->c_str()] = to_numpy(*tensors[i], shapes[i]);
  return out;
}

// A Weights from a dict named as `names`: every name present with its shape,
// no other key. Copies (the layer keeps its own packed copy anyway).
Weights weights_from_dict(const nb::dict& d, const TensorNames& names, const Config& cfg) {
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

// FeedForward::set_weights must not run while another thread computes with the
// layer (it frees the old packed weights). Python threads can do exactly that
// once the GIL is released, so forward/backward hold this lock shared while
// they compute and set_weights holds it exclusively (waiting without the GIL).
std::shared_mutex weights_lock;

// The forward's saved state for backward, with the input's shape.
struct Cache {
  ForwardCache cache;
  std::vector<int64_t> x_shape;
  std::string layout;
  std::optional<std::vector<int64_t>> lengths;
  bool training = false;
  uint64_t seed = 0;
};

float* output_data(const std::optional<AnyOutArray>& out, const std::vector<int64_t>& shape, const char* what,
                   const void* input) {
  check_f32(*out, what);
  if (shape_of(AnyArray(out->handle())) != shape)
    throw Error(std::string(what) + ": shape " + shape_text(out->ndim(), out->shape_ptr()) + ", expected " +
                shape_text(shape.size(), shape.data()));
  const char* o = static_cast<const char*>(out->data());
  const char* in = static_cast<const char*>(input);
  const size_t bytes = out->nbytes();
  if (bytes > 0 && o < in + bytes && in < o + bytes)
    throw Error(std::string(what) + ": overlaps the input array (no in-place forward)");
  return static_cast<float*>(out->data());
}

nb::object forward(const FeedForward& layer, const ArrayArg& x_arg, std::optional<std::vector<int64_t>> lengths,
                   const std::string& layout, std::optional<int> threads, bool training, uint64_t seed,
                   std::optional<OutArrayArg> out_arg, bool cache) {
  const AnyArray x = as_input(x_arg, "x");
  std::optional<AnyOutArray> out;
  if (out_arg) out = as_output(*out_arg, "out");
  const float* xp = input_data(x, "x");
  const std::vector<int64_t> xs = shape_of(x);
  const Shape shape = shape_for(layer.config(), xs, layout, lengths, "x");
  RunOptions ro = run_options(threads, training, seed);
  nb::object y_obj;
  float* yp;
  if (out) {
    yp = output_data(out, xs, "out", xp);
    y_obj = nb::cast(*out);
  } else {
    NumpyF32 y = new_array(xs);
    yp = y.data();
    y_obj = nb::cast(y);
  }
  std::unique_ptr<Cache> c;
  if (cache) c.reset(new Cache{ForwardCache(), xs, layout, lengths, training, seed});
  Interruptible stop;
  ro.interrupted = stop.hook();
  stop.run([&] {
    std::shared_lock lock(weights_lock);
    layer.forward(xp, yp, shape, ro, c ? &c->cache : nullptr);
  });
  if (!cache) return y_obj;
  return nb::make_tuple(y_obj, nb::cast(c.release(), nb::rv_policy::take_ownership));
}

nb::tuple backward(const FeedForward& layer, const ArrayArg& x_arg, const ArrayArg& dy_arg, Cache* cache,
                   std::optional<std::vector<int64_t>> lengths, const std::string& layout,
                   std::optional<int> threads, bool training, uint64_t seed) {
  const AnyArray x = as_input(x_arg, "x"), dy = as_input(dy_arg, "dy");
  const float* xp = input_data(x, "x");
  const float* dyp = input_data(dy, "dy");
  const std::vector<int64_t> xs = shape_of(x);
  if (shape_of(dy) != xs)
    throw Error("dy: shape " + shape_text(dy.ndim(), dy.shape_ptr()) + ", expected x's shape " +
                shape_text(xs.size(), xs.data()));
  if (cache) {  // the forward's settings, not the arguments
    if (cache->x_shape != xs)
      throw Error("cache: from a forward on shape " + shape_text(cache->x_shape.size(), cache->x_shape.data()) +
                  ", but x has shape " + shape_text(xs.size(), xs.data()));
    lengths = cache->lengths;
    training = cache->training;
    seed = cache->seed;
    if (layout != cache->layout) throw Error("layout: '" + layout + "', but the cache's forward used '" + cache->layout + "'");
  }
  const Shape shape = shape_for(layer.config(), xs, layout, lengths, "x");
  RunOptions ro = run_options(threads, training, seed);
  NumpyF32 dx = new_array(xs);
  Weights grads;
  Interruptible stop;
  ro.interrupted = stop.hook();
  stop.run([&] {
    std::shared_lock lock(weights_lock);
    ForwardCache own;
    const ForwardCache* c = cache ? &cache->cache : &own;
    if (!cache) {
      std::vector<float> y(size_t(shape.positions() * layer.config().d_model));
      layer.forward(xp, y.data(), shape, ro, &own);
    }
    layer.backward(xp, dyp, shape, *c, dx.data(), grads, ro);
  });
  return nb::make_tuple(dx, weights_dict(grads, layer.names(), layer.config()));
}

Config make_config(int64_t d_model, int64_t d_ff, const std::string& activation, bool bias, const std::string& norm,
                   const std::string& norm_type, double eps, double dropout_hidden, double dropout_output) {
  Config c;
  c.d_model = d_model;
  c.d_ff = d_ff;
  c.activation = parse_activation(activation, "activation");
  c.bias = bias;
  c.norm = parse_norm_placement(norm, "norm");
  c.norm_type = parse_norm_type(norm_type, "norm_type");
  c.eps = float(eps);
  c.dropout_hidden = float(dropout_hidden);
  c.dropout_output = float(dropout_output);
  c.validate();
  return c;
}

// ---- the encoder --------------------------------------------------------------

EncoderConfig make_encoder_config(int64_t d_model, int64_t heads, int64_t d_ff, int64_t layers,
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

nb::tuple encoder_config_reduce(nb::handle self) {
  const EncoderConfig& c = nb::cast<const EncoderConfig&>(self);
  return nb::make_tuple(self.type(),
                        nb::make_tuple(c.d_model, c.heads, c.d_ff, c.layers, std::string(to_string(c.activation)),
                                       std::string(to_string(c.norm)), std::string(to_string(c.norm_type)), c.eps,
                                       c.bias, c.dropout, c.final_norm));
}

std::string encoder_config_repr(const EncoderConfig& c) {
  char eps[32], dropout[32];
  std::snprintf(eps, sizeof eps, "%g", double(c.eps));
  std::snprintf(dropout, sizeof dropout, "%g", double(c.dropout));
  return "ffn.EncoderConfig(d_model=" + std::to_string(c.d_model) + ", heads=" + std::to_string(c.heads) +
         ", d_ff=" + std::to_string(c.d_ff) + ", layers=" + std::to_string(c.layers) + ", activation='" +
         std::string(to_string(c.activation)) + "', norm='" + std::string(to_string(c.norm)) + "', norm_type='" +
         std::string(to_string(c.norm_type)) + "', eps=" + eps + ", bias=" + (c.bias ? "True" : "False") +
         ", dropout=" + dropout + ", final_norm=" + (c.final_norm ? "True" : "False") + ")";
}

// One parameter of an encoder or decoder: its state_dict name, its values in w, its shape.
struct StackParam {
  std::string name;
  std::vector<float>* values;
  std::vector<int64_t> shape;
};

// The parameters of w (sized for cfg, as EncoderWeights::zeros or backward
// make them) under nn.TransformerEncoder's names: layers.N.self_attn.*,
// layers.N.linear1.*, layers.N.gate.* (gated activations), layers.N.linear2.*,
// layers.N.norm1.*, layers.N.norm2.* and, with final_norm, norm.*. A
// parameter cfg lacks (biases, an RMSNorm's β) is empty in w and left out.
std::vector<StackParam> encoder_params(const EncoderConfig& cfg, EncoderWeights& w) {
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

nb::dict params_dict(const std::vector<StackParam>& params) {
  nb::dict out;
  for (const StackParam& p : params) out[p.name.c_str()] = to_numpy(*p.values, p.shape);
  return out;
}

nb::dict encoder_weights_dict(const EncoderConfig& cfg, EncoderWeights w) {
  return params_dict(encoder_params(cfg, w));
}

// Fills params (an encoder's or a decoder's, `kind`) from a dict under their
// names: every one present with its shape, no other key. Copies.
void params_from_dict(const nb::dict& d, const std::vector<StackParam>& params, const EncoderConfig& cfg,
                      const char* kind) {
  std::string layer0;  // the names of one layer, for the messages
  for (const StackParam& p : params)
    if (p.name.rfind("layers.0.", 0) == 0) layer0 += (layer0.empty() ? "" : ", ") + p.name.substr(9);
  const std::string expected = std::string(kind) + " of " + std::to_string(cfg.layers) + " layer(s) has layers.N." +
                               "{" + layer0 + "} for N = 0.." + std::to_string(cfg.layers - 1) +
                               (cfg.final_norm ? " and norm.*" : "");
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    bool known = false;
    for (const StackParam& p : params) known = known || p.name == k;
    if (!known) throw Error("weights: unexpected tensor '" + k + "'; " + expected);
  }
  for (const StackParam& p : params) {
    if (!d.contains(p.name.c_str())) throw Error("weights: missing tensor '" + p.name + "'; " + expected);
    const std::string what = "weights['" + p.name + "']";
    const AnyArray a = as_input(ArrayArg{d[p.name.c_str()]}, what);
    const float* v = input_data(a, what.c_str());
    if (shape_of(a) != p.shape)
      throw Error(what + ": shape " + shape_text(a.ndim(), a.shape_ptr()) + ", expected " +
                  shape_text(p.shape.size(), p.shape.data()));
    p.values->assign(v, v + a.size());
  }
}

EncoderWeights encoder_weights_from_dict(const nb::dict& d, const EncoderConfig& cfg) {
  EncoderWeights w = EncoderWeights::zeros(cfg);
  params_from_dict(d, encoder_params(cfg, w), cfg, "an encoder");
  return w;
}

// The Shape of an encoder or decoder input (`what`: its name): one sequence
// [S, d_model] or [B, S, d_model].
Shape encoder_shape(const EncoderConfig& cfg, const std::vector<int64_t>& s,
                    const std::optional<std::vector<int64_t>>& lengths, const char* what = "x") {
  const int64_t d = cfg.d_model;
  if (!((s.size() == 2 || s.size() == 3) && s.back() == d))
    throw Error(std::string(what) + ": shape " + shape_text(s.size(), s.data()) + ", expected [S, " +
                std::to_string(d) + "] or [B, S, " + std::to_string(d) + "] (d_model " + std::to_string(d) + ")");
  Shape shape;
  shape.batch = s.size() == 3 ? s[0] : 1;
  shape.seq = s[s.size() - 2];
  if (lengths) shape.lengths = *lengths;
  return shape;
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

nb::object encoder_forward(const Encoder& enc, const ArrayArg& x_arg, std::optional<std::vector<int64_t>> lengths,
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

nb::tuple encoder_backward(const Encoder& enc, const ArrayArg& x_arg, const ArrayArg& dy_arg,
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

// ---- the decoder --------------------------------------------------------------

// The parameters of w (sized for cfg, as DecoderWeights::zeros or backward
// make them) under nn.TransformerDecoder's names: layers.N.self_attn.*,
// layers.N.multihead_attn.*, layers.N.linear1.*, layers.N.gate.* (gated
// activations), layers.N.linear2.*, layers.N.norm1.*, norm2.*, norm3.* (the
// FFN's norm) and, with final_norm, norm.*. A parameter cfg lacks (biases, an
// RMSNorm's β) is empty in w and left out.
std::vector<StackParam> decoder_params(const DecoderConfig& cfg, DecoderWeights& w) {
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

nb::dict decoder_weights_dict(const DecoderConfig& cfg, DecoderWeights w) {
  return params_dict(decoder_params(cfg, w));
}

DecoderWeights decoder_weights_from_dict(const nb::dict& d, const DecoderConfig& cfg) {
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

nb::object decoder_forward(const Decoder& dec, const ArrayArg& x_arg, const ArrayArg& memory_arg,
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

nb::tuple decoder_backward(const Decoder& dec, const ArrayArg& x_arg, const ArrayArg& memory_arg,
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

DecoderStateHolder* decoder_start(const Decoder& dec, const ArrayArg& memory_arg,
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

NumpyF32 decoder_step(DecoderStateHolder& s, const ArrayArg& x_arg, std::optional<int> threads) {
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

// As the CLI's stderr line: a setting the file at `path` does not state is a
// UserWarning (at the caller's line), so a state_dict without ffn's metadata
// never runs as something else silently.
void warn_assumed(const std::string& path, const std::vector<AssumedSetting>& assumed) {
  if (assumed.empty()) return;
  std::string msg = path + ": no metadata for ";
  for (size_t i = 0; i < assumed.size(); ++i) {
    std::string kw = assumed[i].flag.substr(assumed[i].flag.find_first_not_of('-'));
    std::replace(kw.begin(), kw.end(), '-', '_');
    msg += (i ? ", " : "") + assumed[i].what + " (pass " + kw + "=)";
  }
  msg += "; assumed those";
  if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) != 0) throw nb::python_error();
}

// Config as pickle (and copy.deepcopy) store it: the class and make_config's
// arguments, so loading validates them again. (__reduce__, not
// __getstate__/__setstate__: nb::new_ makes Python's __new__ return an
// initialized Config, which __setstate__ may not initialize again.)
nb::tuple config_reduce(nb::handle self) {
  const Config& c = nb::cast<const Config&>(self);
  return nb::make_tuple(self.type(), nb::make_tuple(c.d_model, c.d_ff, std::string(to_string(c.activation)), c.bias,
                                                     std::string(to_string(c.norm)),
                                                     std::string(to_string(c.norm_type)), c.eps, c.dropout_hidden,
                                                     c.dropout_output));
}

std::string config_repr(const Config& c) {
  char eps[32];
  std::snprintf(eps, sizeof eps, "%g", double(c.eps));
  return "ffn.Config(d_model=" + std::to_string(c.d_model) + ", d_ff=" + std::to_string(c.d_ff) + ", activation='" +
         std::string(to_string(c.activation)) + "', bias=" + (c.bias ? "True" : "False") + ", norm='" +
         std::string(to_string(c.norm)) + "', norm_type='" + std::string(to_string(c.norm_type)) + "', eps=" + eps +
         ")";
}

}  // namespace
}  // namespace ffn::python

NB_MODULE(_ffn, m) {
  using namespace ffn;
  using namespace ffn::python;
  m.doc() = "ffn: the Transformer's position-wise feed-forward sublayer (C++ library bindings)";
  m.attr("__version__") = FFN_VERSION;
  nb::exception<Error>(m, "Error", PyExc_ValueError);
  main_thread_ident = nb::cast<unsigned long>(nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  // An autograd graph alive at interpreter exit still holds a Cache; that is
  // not a reference-counting bug, so no warning about it.
  nb::set_leak_warnings(false);

  nb::class_<Config>(m, "Config",
                     "Shape and settings of a layer: d_model -> d_ff -> d_model, activation (relu, gelu, gelu_tanh,\n"
                     "silu, swiglu, geglu, reglu), biases, norm placement (post, pre, none) and type (layernorm,\n"
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

  nb::class_<SentenceEncoder>(m, "SentenceEncoder",
                              "Sentence embeddings from a Hugging Face BERT checkpoint (e.g. all-MiniLM-L6-v2):\n"
                              "WordPiece tokens, ffn's encoder layers, mean (or [CLS]) pooling, L2 normalization,\n"
                              "as the model's sentence-transformers files say.")
      .def_static(
          "load",
          [](std::optional<std::string> model, std::optional<int64_t> max_tokens, const std::string& dtype,
             bool int8_outliers, bool int8_attention) {
            SentenceLoadOptions o;
            o.max_tokens = max_tokens;
            o.dtype = parse_weight_dtype(dtype, "dtype");
            o.int8_outliers = int8_outliers;
            o.int8_attention = int8_attention;
            const std::string dir = model ? *model : SentenceEncoder::default_model_dir();
            SentenceEncoder enc = [&] {
              nb::gil_scoped_release nogil;
              return SentenceEncoder::load(dir, o);
            }();
            // What the directory's files left unsaid, as ffn embed's stderr
            // lines: a UserWarning each, at the caller's line (stacklevel 1
            // from C is the calling Python frame).
            for (const std::string& note : enc.load_notes())
              if (PyErr_WarnEx(PyExc_UserWarning, note.c_str(), 1) != 0) throw nb::python_error();
            return enc;
          },
          "model"_a = nb::none(), "max_tokens"_a = nb::none(), "dtype"_a = "fp32", "int8_outliers"_a = true,
          "int8_attention"_a = true,
          "Loads a model directory (config.json, model.safetensors, vocab.txt); None: $FFN_MODEL_DIR,\n"
          "else ~/.cache/ffn/all-MiniLM-L6-v2 (scripts/setup.sh installs it). What the files leave\n"
          "unsaid (e.g. no 1_Pooling/config.json: mean pooling) raises a UserWarning each (load_notes).\n"
          "dtype: the FFN sublayers' weights as fp32, bf16 or int8. max_tokens: per text, [CLS] and\n"
          "[SEP] included.\n"
          "int8_outliers: keep each layer's outlier input channels in float32, found by running the\n"
          "float32 model over built-in calibration texts at load (False: plain per-token int8).\n"
          "int8_attention: the attention's Q/K/V and output projections in int8 too (False: FFN only).")
      .def("tokenize", &SentenceEncoder::tokenize, "text"_a, "Token ids: [CLS] ... [SEP], truncated to max_tokens.")
      .def(
          "embed",
          [](const SentenceEncoder& s, const std::string& text, std::optional<int> threads) {
            EmbedOptions o;
            o.threads = run_options(threads, false, 0).threads;
            Interruptible stop;
            o.interrupted = stop.hook();
            Array a;
            stop.run([&] { a = s.embed({text}, o); });
            return to_numpy(a.data, {a.shape[1]});
          },
          "text"_a, "threads"_a = nb::none(), "The embedding of one text: float32 [dim].")
      .def(
          "embed",
          [](const SentenceEncoder& s, const std::vector<std::string>& texts, int64_t batch, std::optional<int> threads) {
            EmbedOptions o;
            o.batch = batch;
            o.threads = run_options(threads, false, 0).threads;
            Interruptible stop;
            o.interrupted = stop.hook();
            Array a;
            stop.run([&] { a = s.embed(texts, o); });
            return to_numpy(a.data, a.shape);
          },
          "texts"_a, "batch"_a = 32, "threads"_a = nb::none(),
          "Embeddings of a list of texts: float32 [len(texts), dim]; batch: texts per encoder call\n"
          "(padding has no effect on the result).")
      .def_prop_ro("dim", &SentenceEncoder::dim)
      .def_prop_ro("max_tokens", &SentenceEncoder::max_tokens)
      .def_prop_ro("model_dir", &SentenceEncoder::dir)
      .def_prop_ro("load_notes", &SentenceEncoder::load_notes,
                   "What load assumed or left unused because the directory's files do not say: one line\n"
                   "each, naming the file (each was also a UserWarning from load).")
      .def_prop_ro("fp32_input_channels", &SentenceEncoder::fp32_input_channels,
                   "Per layer, the FFN input channels kept in float32 (int8 with outliers).");

  nb::class_<CausalLM>(m, "CausalLM",
                       "A LLaMA-architecture language model (SmolLM2, LLaMA, ...) from a GGUF file or a Hugging\n"
                       "Face directory, with its byte-level BPE tokenizer: logits and generation, as ffn generate.")
      .def_static(
          "load",
          [](const std::string& path, const std::string& compute, const std::string& dtype) {
            CausalLMLoadOptions o;
            if (compute == "native") o.compute = LMCompute::native;
            else if (compute == "fp32") o.compute = LMCompute::fp32;
            else throw Error("compute: expected native or fp32, got " + compute);
            o.ffn_dtype = parse_weight_dtype(dtype, "dtype");
            nb::gil_scoped_release nogil;
            return CausalLM::load(path, o);
          },
          "path"_a, "compute"_a = "native", "dtype"_a = "fp32",
          "compute: native (Q4_0/Q4_1/Q8_0 matrices stay quantized; products on 16-bit activations) or\n"
          "fp32 (every matrix dequantized to float32; logits as transformers'). dtype: the SwiGLU\n"
          "sublayers' weights where they are float32 (Hugging Face checkpoints, GGUF with compute fp32):\n"
          "fp32, int8 or bf16.")
      .def_prop_ro("config",
                   [](const CausalLM& lm) {
                     const CausalLMConfig& c = lm.config();
                     nb::dict d;
                     d["vocab"] = c.vocab; d["d_model"] = c.d_model; d["layers"] = c.layers; d["heads"] = c.heads;
                     d["kv_heads"] = c.kv_heads; d["head_dim"] = c.head_dim; d["d_ff"] = c.d_ff;
                     d["rope_theta"] = c.rope_theta; d["eps"] = c.eps; d["tied"] = c.tied; d["context"] = c.context;
                     d["bos"] = c.bos; d["eos"] = c.eos;
                     return d;
                   })
      .def_prop_ro("quantized", &CausalLM::quantized, "Whether some products keep quantized blocks.")
      .def_prop_ro("chat_template", &CausalLM::chat_template)
      .def(
          "tokenize",
          [](const CausalLM& lm, const std::string& text) {
            if (!lm.tokenizer()) throw Error("the model has no tokenizer");
            return lm.tokenizer()->encode(text);
          },
          "text"_a, "Token ids of text (special tokens in it recognized; no BOS/EOS added).")
      .def(
          "decode",
          [](const CausalLM& lm, const std::vector<int32_t>& ids, bool skip_special) {
            if (!lm.tokenizer()) throw Error("the model has no tokenizer");
            return utf8_text(lm.tokenizer()->decode(ids, skip_special));
          },
          "ids"_a, "skip_special"_a = true, "The text of ids.")
      .def("chat_prompt", &CausalLM::chat_prompt, "message"_a,
           "One user message in the model's (ChatML) chat template with the assistant's turn opened.")
      .def(
          "logits",
          [](const CausalLM& lm, const std::vector<int32_t>& ids, std::optional<int> threads) {
            RunOptions o = run_options(threads, false, 0);
            Interruptible stop;
            std::vector<float> out;
            stop.run([&] { out = lm.logits(ids, o); });
            return to_numpy(out, {int64_t(ids.size()), lm.config().vocab});
          },
          "ids"_a, "threads"_a = nb::none(), "float32 [len(ids), vocab]: the logits after every position.")
      .def(
          "generate",
          [](const CausalLM& lm, const nb::object& prompt, int64_t max_new_tokens, float temperature, int64_t top_k,
             float top_p, float repeat_penalty, uint64_t seed, bool chat, std::optional<int> threads,
             const nb::object& on_token) -> nb::object {
            const bool text = nb::isinstance<nb::str>(prompt);
            if ((text || chat) && !lm.tokenizer()) throw Error("the model has no tokenizer; give token ids");
            if (chat && !text) throw Error("chat=True takes the user message as text");
            std::vector<int32_t> ids = text ? lm.tokenizer()->encode(chat ? lm.chat_prompt(nb::cast<std::string>(prompt))
                                                                        : nb::cast<std::string>(prompt))
                                            : nb::cast<std::vector<int32_t>>(prompt);
            SamplingOptions s;
            s.max_new_tokens = max_new_tokens;
            s.temperature = temperature;
            s.top_k = top_k;
            s.top_p = top_p;
            s.repeat_penalty = repeat_penalty;
            s.seed = seed;
            const RunOptions o = run_options(threads, false, 0);
            Interruptible stop;
            auto hook = stop.hook();
            std::vector<int32_t> out;
            stop.run([&] {
              out = lm.generate(ids, s, [&](int32_t id) {
                if (hook && hook()) throw Interrupted();
                if (!on_token.is_none()) {
                  nb::gil_scoped_acquire gil;
                  const nb::object r = on_token(id);
                  if (r.is_none()) return true;
                  const int truth = PyObject_IsTrue(r.ptr());
                  if (truth < 0) throw nb::python_error();
                  return truth == 1;
                }
                return true;
              }, o);
            });
            if (text) {
              std::vector<int32_t> known;  // ids past the tokenizer's (a model's padding rows) have no text
              for (int32_t id : out)
                if (id < lm.tokenizer()->vocab_size()) known.push_back(id);
              return utf8_text(lm.tokenizer()->decode(known, true));
            }
            return nb::cast(out);
          },
          "prompt"_a, "max_new_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f,
          "repeat_penalty"_a = 1.0f, "seed"_a = 0, "chat"_a = false, "threads"_a = nb::none(),
          "on_token"_a = nb::none(),
          "Continues prompt (text, or a list of token ids) as ffn generate does: greedy by default\n"
          "(temperature 0), else sampling with top_k/top_p, seeded; stops at EOS or max_new_tokens.\n"
          "Returns the new text (text prompt; special tokens left out) or the new ids (EOS included).\n"
          "chat: prompt is one user message, put in the model's chat template. on_token(id), if given,\n"
          "is called with each new id as it is chosen; returning False stops.");

  m.def(
      "init", [](const Config& cfg, uint64_t seed) { return FeedForward(cfg, seed); }, "config"_a, "seed"_a = 0,
      "A layer initialized as nn.Linear does (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), gamma 1, beta 0;\n"
      "the same seed gives the same weights as `ffn init --seed`.");
  // The file readers, for the differential tests against the official
  // safetensors and NumPy readers (tests/python/test_formats.py).
  m.def(
      "_safetensors_header",
      [](const std::string& path) {
        const SafetensorsHeader h = read_safetensors_header(path);
        nb::dict tensors;
        for (const auto& [name, t] : h.tensors) tensors[name.c_str()] = nb::make_tuple(t.dtype, t.shape);
        nb::dict meta;
        for (const auto& [k, v] : h.metadata) meta[k.c_str()] = v;
        return nb::make_tuple(tensors, meta);
      },
      "path"_a, "Validates a safetensors file: ({name: (dtype, shape)}, metadata); ffn.Error if invalid.");
  m.def(
      "_read_safetensors",
      [](const std::string& path) {
        const SafetensorsFile f = read_safetensors(path);
        nb::dict out;
        for (const auto& [name, t] : f.tensors) out[name.c_str()] = to_numpy(t.data, t.shape);
        return out;
      },
      "path"_a, "Every tensor as float32 (F32, F16, BF16, F64 converted; I8 as its values).");
  m.def(
      "_read_npy", [](const std::string& path) {
        Array a = read_npy(path);
        return to_numpy(a.data, a.shape);
      },
      "path"_a, "A float32 .npy file as the program reads it.");
  m.def(
      "_data_address",
      [](const ArrayArg& a) { return reinterpret_cast<uintptr_t>(input_data(as_input(a, "array"), "array")); },
      "array"_a, "The address the library reads an input array at (tests prove inputs are not copied).");
}
