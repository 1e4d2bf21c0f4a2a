// Python bindings (nanobind): module ffn._ffn, re-exported by python/ffn/__init__.py;
// the PyTorch module is python/ffn/torch.py.
//
// Thin by design (shared/STYLE.md, nanobind): the files convert arguments and
// forward to the C++ library; every check on values lives there. One file per
// class family (python/bind_*.cpp), the helpers they share in
// python/bindings.hpp; this file makes the module and its module-level functions.
#include "bindings.hpp"

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


  bind_layer(m);
  bind_encoder(m);
  bind_decoder(m);
  bind_sentence(m);
  bind_causal_lm(m);

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
