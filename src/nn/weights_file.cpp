// Reading and writing the layer's safetensors files, with the three naming
// schemes (this project's, PyTorch TransformerEncoderLayer's, Hugging Face
// LLaMA's) and the settings in __metadata__.
#include <cmath>
#include <set>

#include "ffn/ffn.hpp"
#include "common/format.hpp"
#include "io/safetensors.hpp"

namespace ffn {
namespace {

// Metadata keys this project writes and reads.
constexpr const char* kMetaActivation = "ffn.activation";
constexpr const char* kMetaNorm = "ffn.norm";
constexpr const char* kMetaNormType = "ffn.norm_type";
constexpr const char* kMetaEps = "ffn.eps";

// One naming scheme: the unprefixed names of each parameter.
struct Scheme {
  const char* family;
  const char* w1; const char* b1;
  const char* wg; const char* bg;
  const char* w2; const char* b2;
  const char* norm_weight; const char* norm_bias;
  NormPlacement default_norm;
};

constexpr Scheme kNative{"ffn", "linear1.weight", "linear1.bias", "gate.weight", "gate.bias", "linear2.weight",
                         "linear2.bias", "norm.weight", "norm.bias", NormPlacement::post};
constexpr Scheme kTorch{"PyTorch TransformerEncoderLayer", "linear1.weight", "linear1.bias", "gate.weight",
                        "gate.bias", "linear2.weight", "linear2.bias", "norm2.weight", "norm2.bias",
                        NormPlacement::post};
constexpr Scheme kLlama{"LLaMA", "mlp.up_proj.weight", "mlp.up_proj.bias", "mlp.gate_proj.weight",
                        "mlp.gate_proj.bias", "mlp.down_proj.weight", "mlp.down_proj.bias",
                        "post_attention_layernorm.weight", "post_attention_layernorm.bias", NormPlacement::pre};


std::string normalize_prefix(std::string p) {
  if (!p.empty() && p.back() != '.') p += '.';
  return p;
}

// Prefixes under which the file has an FFN, for the "not found" hint.
std::string prefix_hint(const io::SafetensorsReader& r) {
  std::set<std::string> found;
  for (const auto& [name, info] : r.tensors()) {
    for (const char* tail : {"linear1.weight", "mlp.up_proj.weight"}) {
      const std::string t(tail);
      if (name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0)
        found.insert(name.substr(0, name.size() - t.size()));
    }
  }
  if (found.empty()) return "";
  std::string s = " (the file has them under --prefix ";
  int k = 0;
  for (const auto& f : found) {
    if (k == 3) { s += ", ..."; break; }
    s += (k++ ? ", '" : "'") + f + "'";
  }
  return s + ")";
}

}  // namespace

Layer Layer::load(const std::string& path, const LoadOptions& opts) {
  io::SafetensorsReader r(path);
  const std::string prefix = normalize_prefix(opts.prefix);
  auto has = [&](const char* n) {
    if (!r.has(prefix + n)) return false;
    r.require_float(prefix + n);  // an unusable dtype is reported before any shape
    return true;
  };

  // 1. Which naming scheme.
  const Scheme* scheme = nullptr;
  if (has(kLlama.w1)) scheme = &kLlama;
  else if (has(kNative.w1)) scheme = (has(kNative.norm_weight) || !has(kTorch.norm_weight)) ? &kNative : &kTorch;
  else {
    throw Error(path + ": tensor '" + prefix + "linear1.weight' (or '" + prefix +
                "mlp.up_proj.weight') not found" + prefix_hint(r));
  }
  const Scheme& s = *scheme;
  auto need = [&](const char* n) {
    if (!has(n)) throw Error(path + ": tensor '" + prefix + n + "' not found (needed with '" + prefix + s.w1 + "')");
    return prefix + n;
  };

  // 2. Shapes give d_model, d_ff, gated and bias.
  const std::string w1 = prefix + s.w1, w2 = need(s.w2);
  const auto& i1 = r.info(w1);
  if (i1.shape.size() != 2 || i1.shape[0] < 1 || i1.shape[1] < 1)
    throw Error(path + ": " + w1 + " has shape " + shape_str(i1.shape) + ", expected [d_ff, d_model] with both >= 1");
  Config cfg;
  cfg.d_ff = i1.shape[0];
  cfg.d_model = i1.shape[1];
  const std::string dims = "d_ff=" + std::to_string(cfg.d_ff) + ", d_model=" + std::to_string(cfg.d_model) +
                           " from " + w1 + " " + shape_str(i1.shape);
  auto expect_shape = [&](const std::string& name, std::vector<int64_t> want) {
    const auto& info = r.info(name);
    if (info.shape != want)
      throw Error(path + ": " + name + " has shape " + shape_str(info.shape) + ", expected " + shape_str(want) +
                  " (" + dims + ")");
  };
  expect_shape(w2, {cfg.d_model, cfg.d_ff});
  const bool gated = has(s.wg);
  if (gated) expect_shape(prefix + s.wg, {cfg.d_ff, cfg.d_model});
  const bool b1 = has(s.b1), b2 = has(s.b2);
  if (b1 != b2)
    throw Error(path + ": " + prefix + (b1 ? s.b1 : s.b2) + " is present but " + prefix + (b1 ? s.b2 : s.b1) +
                " is not (biases must be all present or all absent)");
  cfg.bias = b1;
  if (gated && has(s.bg) != cfg.bias)
    throw Error(path + ": " + prefix + s.bg + (cfg.bias ? " is missing" : " is present") + " but " + prefix + s.b1 +
                (cfg.bias ? " is present" : " is not") + " (biases must be all present or all absent)");
  if (cfg.bias) {
    expect_shape(prefix + s.b1, {cfg.d_ff});
    expect_shape(prefix + s.b2, {cfg.d_model});
    if (gated) expect_shape(prefix + s.bg, {cfg.d_ff});
  }

  // 3. Settings: options, else __metadata__, else what the tensors imply.
  const auto& meta = r.metadata();
  auto meta_get = [&](const char* key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  const std::string meta_where = path + ": __metadata__ ";
  if (opts.activation) cfg.activation = *opts.activation;
  else if (auto v = meta_get(kMetaActivation)) cfg.activation = parse_activation(*v, meta_where + kMetaActivation);
  else cfg.activation = gated ? Activation::swiglu : Activation::relu;
  const std::string act_src = opts.activation ? "--activation " : (meta_get(kMetaActivation) ? "activation " : "");
  if (is_gated(cfg.activation) && !gated)
    throw Error(path + ": " + act_src + std::string(to_string(cfg.activation)) + " is gated but tensor '" + prefix +
                s.wg + "' was not found");
  if (!is_gated(cfg.activation) && gated)
    throw Error(path + ": " + act_src + std::string(to_string(cfg.activation)) + " is not gated but the file has '" +
                prefix + s.wg + "' (use swiglu, geglu or reglu)");

  const bool has_gamma = has(s.norm_weight), has_beta = has(s.norm_bias);
  if (opts.norm) cfg.norm = *opts.norm;
  else if (auto v = meta_get(kMetaNorm)) cfg.norm = parse_norm_placement(*v, meta_where + kMetaNorm);
  else cfg.norm = has_gamma ? s.default_norm : NormPlacement::none;
  if (opts.norm_type) cfg.norm_type = *opts.norm_type;
  else if (auto v = meta_get(kMetaNormType)) cfg.norm_type = parse_norm_type(*v, meta_where + kMetaNormType);
  else cfg.norm_type = has_beta ? NormType::layernorm : NormType::rmsnorm;
  if (opts.eps) cfg.eps = *opts.eps;
  else if (auto v = meta_get(kMetaEps)) {
    try {
      size_t used = 0;
      cfg.eps = std::stof(*v, &used);
      if (used != v->size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw Error(meta_where + kMetaEps + ": '" + *v + "' is not a number");
    }
  }
  if (cfg.norm != NormPlacement::none) {
    const std::string why = " (needed by norm " + std::string(to_string(cfg.norm)) + " " +
                            std::string(to_string(cfg.norm_type)) + ")";
    if (!has_gamma) throw Error(path + ": tensor '" + prefix + s.norm_weight + "' not found" + why);
    expect_shape(prefix + s.norm_weight, {cfg.d_model});
    if (cfg.norm_type == NormType::layernorm) {
      if (!has_beta) throw Error(path + ": tensor '" + prefix + s.norm_bias + "' not found" + why);
      expect_shape(prefix + s.norm_bias, {cfg.d_model});
    }
  }
  cfg.dropout_hidden = opts.dropout_hidden;
  cfg.dropout_output = opts.dropout_output;
  try {
    cfg.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }

  // 4. Read the tensors (converted to float32) under the names found.
  TensorNames names;
  Weights w;
  auto take = [&](std::string& name_out, std::vector<float>& dst, const std::string& name) {
    name_out = name;
    dst = r.read_f32(name);
  };
  take(names.w1, w.w1, w1);
  take(names.w2, w.w2, w2);
  if (gated) take(names.wg, w.wg, prefix + s.wg);
  if (cfg.bias) {
    take(names.b1, w.b1, prefix + s.b1);
    take(names.b2, w.b2, prefix + s.b2);
    if (gated) take(names.bg, w.bg, prefix + s.bg);
  }
  if (cfg.norm != NormPlacement::none) {
    take(names.norm_weight, w.norm_weight, prefix + s.norm_weight);
    if (cfg.norm_type == NormType::layernorm) take(names.norm_bias, w.norm_bias, prefix + s.norm_bias);
  }
  Layer layer(cfg, std::move(w));
  layer.names_ = names;
  return layer;
}

namespace {

SafetensorsFile to_file(const Config& cfg, const TensorNames& names, const Weights& w) {
  SafetensorsFile f;
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  auto put = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
    if (!name.empty() && !v.empty()) f.tensors[name] = NamedTensor{std::move(shape), v};
  };
  put(names.w1, w.w1, {F, d});
  put(names.b1, w.b1, {F});
  put(names.wg, w.wg, {F, d});
  put(names.bg, w.bg, {F});
  put(names.w2, w.w2, {d, F});
  put(names.b2, w.b2, {d});
  put(names.norm_weight, w.norm_weight, {d});
  put(names.norm_bias, w.norm_bias, {d});
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9g", double(cfg.eps));
  f.metadata = {{"format", "pt"},
                {kMetaActivation, std::string(to_string(cfg.activation))},
                {kMetaNorm, std::string(to_string(cfg.norm))},
                {kMetaNormType, std::string(to_string(cfg.norm_type))},
                {kMetaEps, eps}};
  return f;
}

}  // namespace

SafetensorsFile Layer::to_safetensors() const { return to_file(cfg_, TensorNames::native(cfg_), w_); }

void Layer::save(const std::string& path) const { write_safetensors(path, to_safetensors()); }

void Layer::save_gradients(const std::string& path, const Weights& grads) const {
  write_safetensors(path, to_file(cfg_, names_, grads));
}

}  // namespace ffn
