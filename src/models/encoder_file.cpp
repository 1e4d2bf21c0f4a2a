// Reading and writing the encoder's weights under nn.TransformerEncoder's
// state_dict names (include/ffn/encoder.hpp).
#include <cmath>
#include <functional>

#include "core/positions.hpp"
#include "models/metadata.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/encoder.hpp"

namespace ffn {

using namespace models;  // the __metadata__ keys (models/metadata.hpp)

namespace {

struct Naming {
  std::string prefix;
  bool single = false;
  bool separate_qkv = false;
  std::string layer(int64_t i) const { return single ? prefix : prefix + "layers." + std::to_string(i) + "."; }
};

// Every tensor of an encoder: its name, its shape and where its values live.
// qkv separate: in_proj_weight is three [d, d] tensors (q, k, v), each a
// third of the vector (offset in elements).
struct Slot {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* v;
  size_t offset = 0;
};

std::vector<Slot> slots(const EncoderConfig& cfg, const Naming& nm, EncoderWeights& w) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  std::vector<Slot> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float>& v, size_t off = 0) {
    if (!v.empty()) out.push_back({name, std::move(shape), &v, off});
  };
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto& l = w.layers[size_t(i)];
    const std::string p = nm.layer(i);
    if (nm.separate_qkv) {
      add(p + "self_attn.q_proj_weight", {d, d}, l.in_proj_weight, 0);
      add(p + "self_attn.k_proj_weight", {d, d}, l.in_proj_weight, size_t(d * d));
      add(p + "self_attn.v_proj_weight", {d, d}, l.in_proj_weight, size_t(2 * d * d));
    } else {
      add(p + "self_attn.in_proj_weight", {3 * d, d}, l.in_proj_weight);
    }
    add(p + "self_attn.in_proj_bias", {3 * d}, l.in_proj_bias);
    add(p + "self_attn.out_proj.weight", {d, d}, l.out_proj_weight);
    add(p + "self_attn.out_proj.bias", {d}, l.out_proj_bias);
    add(p + "linear1.weight", {F, d}, l.ffn.w1);
    add(p + "linear1.bias", {F}, l.ffn.b1);
    add(p + "gate.weight", {F, d}, l.ffn.wg);
    add(p + "gate.bias", {F}, l.ffn.bg);
    add(p + "linear2.weight", {d, F}, l.ffn.w2);
    add(p + "linear2.bias", {d}, l.ffn.b2);
    add(p + "norm1.weight", {d}, l.norm1_weight);
    add(p + "norm1.bias", {d}, l.norm1_bias);
    add(p + "norm2.weight", {d}, l.ffn.norm_weight);
    add(p + "norm2.bias", {d}, l.ffn.norm_bias);
  }
  add(nm.prefix + "norm.weight", {d}, w.norm_weight);
  add(nm.prefix + "norm.bias", {d}, w.norm_bias);
  return out;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

SafetensorsFile to_file(const EncoderConfig& cfg, const Naming& nm, const EncoderWeights& w) {
  SafetensorsFile f;
  for (const Slot& s : slots(cfg, nm, const_cast<EncoderWeights&>(w))) {
    NamedTensor t;
    t.shape = s.shape;
    t.data.assign(s.v->begin() + std::ptrdiff_t(s.offset), s.v->begin() + std::ptrdiff_t(s.offset + size_t(numel(s.shape))));
    f.tensors[s.name] = std::move(t);
  }
  return f;
}

// The slots read values.size() elements from each vector: refuse a wrong size.
void check_sizes(const EncoderConfig& cfg, const EncoderWeights& values) {
  const EncoderWeights want = EncoderWeights::zeros(cfg);
  if (values.layers.size() != want.layers.size()) throw Error("encoder gradients: wrong number of layers");
  const Naming nm;
  const auto a = slots(cfg, nm, const_cast<EncoderWeights&>(want));
  const auto b = slots(cfg, nm, const_cast<EncoderWeights&>(values));
  if (a.size() != b.size()) throw Error("encoder gradients: a tensor is missing");
  for (size_t i = 0; i < a.size(); ++i) nn::check_size(*b[i].v, a[i].v->size(), "encoder gradients: ", a[i].name);
}

}  // namespace

Encoder Encoder::load(const std::string& path, const EncoderLoadOptions& opts) {
  const SafetensorsFile f = read_safetensors(path);
  Naming nm;
  nm.prefix = opts.prefix;
  if (!nm.prefix.empty() && nm.prefix.back() != '.') nm.prefix += '.';
  auto has = [&](const std::string& name) { return f.tensors.count(name) > 0; };
  auto has_attn = [&](const std::string& p) {
    return has(p + "self_attn.in_proj_weight") || has(p + "self_attn.q_proj_weight");
  };
  EncoderConfig cfg;
  cfg.layers = 0;
  while (has_attn(nm.prefix + "layers." + std::to_string(cfg.layers) + ".")) ++cfg.layers;
  if (cfg.layers == 0) {
    if (!has_attn(nm.prefix))
      throw Error(path + ": no tensor " + nm.prefix + "layers.0.self_attn.in_proj_weight (nn.TransformerEncoder) or " +
                  nm.prefix + "self_attn.in_proj_weight (nn.TransformerEncoderLayer): not an encoder's state_dict" +
                  (nm.prefix.empty() ? "" : " under prefix " + nm.prefix));
    nm.single = true;
    cfg.layers = 1;
  }
  const std::string l0 = nm.layer(0);
  nm.separate_qkv = !has(l0 + "self_attn.in_proj_weight");
  auto tensor = [&](const std::string& name) -> const NamedTensor& {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) throw Error(path + ": missing tensor " + name);
    return it->second;
  };
  {
    const std::string wname = l0 + "self_attn.out_proj.weight";
    const NamedTensor& w = tensor(wname);
    if (w.shape.size() != 2 || w.shape[0] != w.shape[1] || w.shape[0] < 1)
      throw Error(path + ": tensor " + wname + " has shape " + shape_str(w.shape) + ", expected [d_model, d_model]");
    cfg.d_model = w.shape[0];
    const NamedTensor& w1 = tensor(l0 + "linear1.weight");
    if (w1.shape.size() != 2 || w1.shape[0] < 1)
      throw Error(path + ": tensor " + l0 + "linear1.weight has shape " + shape_str(w1.shape) + ", expected [d_ff, d_model]");
    cfg.d_ff = w1.shape[0];
  }
  cfg.bias = has(l0 + "self_attn.in_proj_bias");
  cfg.final_norm = !nm.single && has(nm.prefix + "norm.weight");
  const bool gated = has(l0 + "gate.weight");

  auto meta = [&](const char* key) -> const std::string* {
    auto it = f.metadata.find(key);
    return it == f.metadata.end() ? nullptr : &it->second;
  };
  const std::string where = path + ": __metadata__ ";
  std::vector<AssumedSetting> assumed;
  auto assume = [&](const std::string& what, const std::string& flag) { assumed.push_back({what, flag}); };
  if (opts.heads) {
    cfg.heads = *opts.heads;
  } else if (const std::string* v = meta(kMetaHeads)) {
    try {
      size_t used = 0;
      cfg.heads = std::stoll(*v, &used);
      if (used != v->size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw Error(where + kMetaHeads + ": '" + *v + "' is not an integer");
    }
  } else {
    throw Error(path + ": the number of attention heads is not in __metadata__ (" + std::string(kMetaHeads) +
                "; a state_dict saved from PyTorch carries none): give it (--heads)");
  }
  if (cfg.heads < 1 || cfg.d_model % cfg.heads != 0)
    throw Error(path + ": heads " + std::to_string(cfg.heads) + " does not divide d_model " + std::to_string(cfg.d_model));
  if (opts.activation) cfg.activation = *opts.activation;
  else if (const std::string* v = meta(kMetaActivation)) cfg.activation = parse_activation(*v, where + kMetaActivation);
  else {
    cfg.activation = gated ? Activation::swiglu : Activation::relu;
    assume("activation " + std::string(to_string(cfg.activation)), "--activation");
  }
  if (is_gated(cfg.activation) != gated)
    throw Error(path + ": activation " + std::string(to_string(cfg.activation)) +
                (gated ? " is not gated, but the file has " + l0 + "gate.weight"
                       : " is gated, but the file has no " + l0 + "gate.weight"));
  if (opts.norm) {
    cfg.norm = *opts.norm;
    if (cfg.norm == NormPlacement::none) throw Error("norm: an encoder layer's norm is post or pre, got none (--norm)");
  } else if (const std::string* v = meta(kMetaNorm)) {
    cfg.norm = parse_norm_placement(*v, where + kMetaNorm);
    if (cfg.norm == NormPlacement::none) throw Error(where + kMetaNorm + ": an encoder layer's norm is post or pre");
  } else {
    assume("norm post", "--norm");
  }
  if (opts.norm_type) cfg.norm_type = *opts.norm_type;
  else if (const std::string* v = meta(kMetaNormType)) cfg.norm_type = parse_norm_type(*v, where + kMetaNormType);
  else if (!has(l0 + "norm1.bias"))
    // PyTorch ≥ 2.1's TransformerEncoderLayer(bias=False) drops the LayerNorms' β
    // as well, which ffn's LayerNorm does not support; an RMSNorm file of
    // ffn's own records ffn.norm_type.
    throw Error(path + ": no tensor " + l0 + "norm1.bias: a LayerNorm without β (PyTorch's bias=False) is not "
                "supported; if the model's norms are RMSNorm, say so (--norm-type rmsnorm)");
  if (opts.eps) cfg.eps = *opts.eps;
  else if (const std::string* v = meta(kMetaEps)) {
    try {
      size_t used = 0;
      cfg.eps = std::stof(*v, &used);
      if (used != v->size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw Error(where + kMetaEps + ": '" + *v + "' is not a number");
    }
  } else {
    assume("eps " + num(cfg.eps), "--eps");
  }
  if (!(cfg.eps > 0.0f) || !std::isfinite(cfg.eps)) throw Error(where + kMetaEps + ": expected a positive number");
  cfg.dropout = opts.dropout;
  cfg.validate();

  EncoderWeights w = EncoderWeights::zeros(cfg);
  for (const Slot& s : slots(cfg, nm, w)) {
    const NamedTensor& t = tensor(s.name);
    if (t.shape != s.shape)
      throw Error(path + ": tensor " + s.name + " has shape " + shape_str(t.shape) + ", expected " + shape_str(s.shape));
    std::copy(t.data.begin(), t.data.end(), s.v->begin() + std::ptrdiff_t(s.offset));
  }
  Encoder e(cfg, std::move(w));
  e.prefix_ = nm.prefix;
  e.single_ = nm.single;
  e.separate_qkv_ = nm.separate_qkv;
  e.assumed_ = std::move(assumed);
  return e;
}

SafetensorsFile Encoder::to_safetensors(const EncoderWeights& values) const {
  check_sizes(cfg_, values);
  return to_file(cfg_, Naming{prefix_, single_, separate_qkv_}, values);
}

SafetensorsFile Encoder::to_safetensors() const {
  SafetensorsFile f = to_file(cfg_, Naming{prefix_, single_, separate_qkv_}, weights());
  f.metadata = {{kMetaKind, "encoder"},
                {kMetaHeads, std::to_string(cfg_.heads)},
                {kMetaLayers, std::to_string(cfg_.layers)},
                {kMetaActivation, std::string(to_string(cfg_.activation))},
                {kMetaNorm, std::string(to_string(cfg_.norm))},
                {kMetaNormType, std::string(to_string(cfg_.norm_type))},
                {kMetaEps, num(cfg_.eps)}};
  return f;
}

void Encoder::save(const std::string& path) const { write_safetensors(path, to_safetensors()); }

void Encoder::save_gradients(const std::string& path, const EncoderWeights& grads) const {
  write_safetensors(path, to_safetensors(grads));
}

}  // namespace ffn
