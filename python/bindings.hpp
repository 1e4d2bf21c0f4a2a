// Python bindings (nanobind): what every class's file shares (python/bind_*.cpp;
// the module itself is python/ffn_python.cpp, re-exported by
// python/ffn/__init__.py; the PyTorch module is python/ffn/torch.py).
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
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
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
#include "ffn/chat.hpp"
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

using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;
using AnyOutArray = nb::ndarray<nb::device::cpu>;
using NumpyF32 = nb::ndarray<nb::numpy, float>;

inline std::string shape_text(size_t ndim, const int64_t* shape) {
  std::string t = "[";
  for (size_t i = 0; i < ndim; ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + "]";
}

inline std::string dtype_name(const nb::dlpack::dtype& t) {
  const char* kind = t.code == uint8_t(nb::dlpack::dtype_code::Float)  ? "float"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Int)  ? "int"
                     : t.code == uint8_t(nb::dlpack::dtype_code::UInt) ? "uint"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Bfloat) ? "bfloat"
                                                                          : "other";
  return std::string(kind) + std::to_string(t.bits);
}

inline bool c_contiguous(size_t ndim, const int64_t* shape, const int64_t* stride) {
  int64_t want = 1;
  for (size_t i = ndim; i-- > 0;) {
    if (shape[i] != 1 && stride[i] != want) return false;
    want *= shape[i];
  }
  return true;
}

// The float32 C-contiguous view of `a`, or ffn::Error naming `what`.
template <class A>
inline void check_f32(const A& a, const char* what) {
  if (a.dtype() != nb::dtype<float>())
    throw Error(std::string(what) + ": expected float32, got " + dtype_name(a.dtype()) +
                " (convert with .astype(numpy.float32) or .float())");
  if (!c_contiguous(a.ndim(), a.shape_ptr(), a.stride_ptr()))
    throw Error(std::string(what) + ": expected a C-contiguous array, got strides that are not "
                "(pass numpy.ascontiguousarray(a) or a.contiguous())");
}

inline const float* input_data(const AnyArray& a, const char* what) {
  check_f32(a, what);
  return static_cast<const float*>(a.data());
}

inline std::vector<int64_t> shape_of(const AnyArray& a) { return {a.shape_ptr(), a.shape_ptr() + a.ndim()}; }

// str(h) (nb::str of an nb::object would take it as a str without converting).
inline std::string text(nb::handle h) { return nb::str(h).c_str(); }

// Why `h` is not an array ffn can read (or write), as one ffn::Error naming `what`.
[[noreturn]] inline void refuse_array(nb::handle h, const std::string& what, bool writable) {
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
inline AnyArray as_input(const ArrayArg& arg, const std::string& what) {
  if (PyBytes_Check(arg.obj.ptr()) || PyByteArray_Check(arg.obj.ptr()))
    throw Error(what + ": expected a float32 array, got " + nb::type_name(arg.obj.type()).c_str() +
                " (raw float32 bytes: numpy.frombuffer(b, dtype=numpy.float32).reshape(...))");
  AnyArray a;
  if (!nb::try_cast(arg.obj, a)) refuse_array(arg.obj, what, false);
  return a;
}

inline AnyOutArray as_output(const OutArrayArg& arg, const std::string& what) {
  AnyOutArray a;
  if (PyBytes_Check(arg.obj.ptr()) || !nb::try_cast(arg.obj, a)) refuse_array(arg.obj, what, true);
  return a;
}

// A new NumPy float32 array of `shape` that owns its memory.
inline NumpyF32 new_array(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  float* data = new float[n > 0 ? n : 1];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  std::vector<size_t> s(shape.begin(), shape.end());
  return NumpyF32(data, s.size(), s.data(), owner);
}

inline NumpyF32 to_numpy(const std::vector<float>& v, const std::vector<int64_t>& shape) {
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
inline unsigned long main_thread_ident = 0;  // threading.main_thread().ident, at import

// Generated bytes as a Python str: a byte sequence that is not UTF-8 (a
// character cut between tokens) becomes U+FFFD, as transformers' decode.
inline nb::object utf8_text(const std::string& bytes) {
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
inline Shape shape_for(const Config& cfg, const std::vector<int64_t>& s, const std::string& layout_name,
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

inline RunOptions run_options(std::optional<int> threads, bool training, uint64_t seed) {
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
inline std::array<std::vector<int64_t>, 8> param_shapes(const Config& cfg) {
  const int64_t d = cfg.d_model, f = cfg.d_ff;
  return {std::vector<int64_t>{f, d}, {f}, {f, d}, {f}, {d, f}, {d}, {d}, {d}};
}

// FeedForward::set_weights must not run while another thread computes with the
// layer (it frees the old packed weights). Python threads can do exactly that
// once the GIL is released, so forward/backward hold this lock shared while
// they compute and set_weights holds it exclusively (waiting without the GIL).
inline std::shared_mutex weights_lock;

// Weights by the names of `names` (a name left empty: the layer lacks it).
inline nb::dict weights_dict(const Weights& w, const TensorNames& names, const Config& cfg) {
  const auto shapes = param_shapes(cfg);
  const auto tensors = w.all();
  const auto keys = names.all();
  nb::dict out;
  for (size_t i = 0; i < 8; ++i)
    if (!keys[i]->empty() && !tensors[i]->empty()) out[keys[i]->c_str()] = to_numpy(*tensors[i], shapes[i]);
  return out;
}

// The forward's saved state for backward, with the input's shape.
struct Cache {
  ForwardCache cache;
  std::vector<int64_t> x_shape;
  std::string layout;
  std::optional<std::vector<int64_t>> lengths;
  bool training = false;
  uint64_t seed = 0;
};

inline float* output_data(const std::optional<AnyOutArray>& out, const std::vector<int64_t>& shape, const char* what,
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

inline nb::object forward(const FeedForward& layer, const ArrayArg& x_arg, std::optional<std::vector<int64_t>> lengths,
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

inline nb::tuple backward(const FeedForward& layer, const ArrayArg& x_arg, const ArrayArg& dy_arg, Cache* cache,
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

inline Config make_config(int64_t d_model, int64_t d_ff, const std::string& activation, bool bias, const std::string& norm,
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

// ---- what the encoder and decoder files share --------------------------------

// One parameter of an encoder or decoder: its state_dict name, its values in w, its shape.
struct StackParam {
  std::string name;
  std::vector<float>* values;
  std::vector<int64_t> shape;
};

inline nb::dict params_dict(const std::vector<StackParam>& params) {
  nb::dict out;
  for (const StackParam& p : params) out[p.name.c_str()] = to_numpy(*p.values, p.shape);
  return out;
}

// Fills params (an encoder's or a decoder's, `kind`) from a dict under their
// names: every one present with its shape, no other key. Copies.
inline void params_from_dict(const nb::dict& d, const std::vector<StackParam>& params, const EncoderConfig& cfg,
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

// The Shape of an encoder or decoder input (`what`: its name): one sequence
// [S, d_model] or [B, S, d_model].
inline Shape encoder_shape(const EncoderConfig& cfg, const std::vector<int64_t>& s,
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

// As the CLI's stderr line: a setting the file at `path` does not state is a
// UserWarning (at the caller's line), so a state_dict without ffn's metadata
// never runs as something else silently.
inline void warn_assumed(const std::string& path, const std::vector<AssumedSetting>& assumed) {
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

// One function per class family, each in its own file, called by the module.
void bind_layer(nb::module_& m);      // Config, Cache, Layer (python/bind_layer.cpp)
void bind_encoder(nb::module_& m);    // EncoderConfig, EncoderCache, Encoder (python/bind_encoder.cpp)
void bind_decoder(nb::module_& m);    // DecoderConfig, DecoderCache, DecoderState, Decoder (python/bind_decoder.cpp)
void bind_sentence(nb::module_& m);   // SentenceEncoder (python/bind_sentence.cpp)
void bind_causal_lm(nb::module_& m);  // CausalLM (python/bind_causal_lm.cpp)

}  // namespace ffn::python
