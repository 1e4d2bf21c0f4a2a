#include "models/stack_file.hpp"

#include <cmath>

#include "ffn/diagnostics.hpp"
#include "models/metadata.hpp"
#include "models/checkpoint.hpp"

namespace ffn::models {

namespace {
int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}
}  // namespace

namespace {

// The names in layer order of TorchTensor; the decoder's differ in the
// norms after cross-attention and the FFN.
const TorchNameTable kEncoderNames{{
    "layers.{L}.self_attn.in_proj_weight", "layers.{L}.self_attn.in_proj_bias", "layers.{L}.self_attn.q_proj_weight",
    "layers.{L}.self_attn.k_proj_weight", "layers.{L}.self_attn.v_proj_weight", "layers.{L}.self_attn.out_proj.weight",
    "layers.{L}.self_attn.out_proj.bias",
    nullptr, nullptr, nullptr, nullptr,
    "layers.{L}.linear1.weight", "layers.{L}.linear1.bias", "layers.{L}.gate.weight", "layers.{L}.gate.bias",
    "layers.{L}.linear2.weight", "layers.{L}.linear2.bias",
    "layers.{L}.norm1.weight", "layers.{L}.norm1.bias", nullptr, nullptr, "layers.{L}.norm2.weight",
    "layers.{L}.norm2.bias", "norm.weight", "norm.bias",
}};
const TorchNameTable kDecoderNames{{
    "layers.{L}.self_attn.in_proj_weight", "layers.{L}.self_attn.in_proj_bias", nullptr, nullptr, nullptr,
    "layers.{L}.self_attn.out_proj.weight", "layers.{L}.self_attn.out_proj.bias",
    "layers.{L}.multihead_attn.in_proj_weight", "layers.{L}.multihead_attn.in_proj_bias",
    "layers.{L}.multihead_attn.out_proj.weight", "layers.{L}.multihead_attn.out_proj.bias",
    "layers.{L}.linear1.weight", "layers.{L}.linear1.bias", "layers.{L}.gate.weight", "layers.{L}.gate.bias",
    "layers.{L}.linear2.weight", "layers.{L}.linear2.bias",
    "layers.{L}.norm1.weight", "layers.{L}.norm1.bias", "layers.{L}.norm2.weight", "layers.{L}.norm2.bias",
    "layers.{L}.norm3.weight", "layers.{L}.norm3.bias", "norm.weight", "norm.bias",
}};

}  // namespace

const TorchNameTable& torch_encoder_names() { return kEncoderNames; }
const TorchNameTable& torch_decoder_names() { return kDecoderNames; }

std::string StackNaming::name(TorchTensor t, int64_t layer) const {
  std::string s = table->name(t, layer);
  if (single) {  // one layer's own state_dict: its names without "layers.N."
    const std::string layers = "layers." + std::to_string(layer) + ".";
    if (s.compare(0, layers.size(), layers) == 0) s.erase(0, layers.size());
  }
  return prefix + s;
}

void SlotList::add(TorchTensor t, int64_t layer, std::vector<int64_t> shape, std::vector<float>& v, size_t offset) {
  if (!v.empty()) slots.push_back({nm.name(t, layer), std::move(shape), &v, offset});
}

void SlotList::attention(bool cross, int64_t l, int64_t d, std::vector<float>& in_w, std::vector<float>& in_b,
                         std::vector<float>& out_w, std::vector<float>& out_b) {
  using T = TorchTensor;
  if (!cross && nm.separate_qkv) {
    add(T::self_q, l, {d, d}, in_w, 0);
    add(T::self_k, l, {d, d}, in_w, size_t(d * d));
    add(T::self_v, l, {d, d}, in_w, size_t(2 * d * d));
  } else {
    add(cross ? T::cross_in : T::self_in, l, {3 * d, d}, in_w);
  }
  add(cross ? T::cross_in_bias : T::self_in_bias, l, {3 * d}, in_b);
  add(cross ? T::cross_out : T::self_out, l, {d, d}, out_w);
  add(cross ? T::cross_out_bias : T::self_out_bias, l, {d}, out_b);
}

void SlotList::ffn(int64_t l, int64_t d, int64_t F, Weights& w) {
  using T = TorchTensor;
  add(T::up, l, {F, d}, w.w1);
  add(T::up_bias, l, {F}, w.b1);
  add(T::gate, l, {F, d}, w.wg);
  add(T::gate_bias, l, {F}, w.bg);
  add(T::down, l, {d, F}, w.w2);
  add(T::down_bias, l, {d}, w.b2);
}

void SlotList::norm(TorchTensor weight, TorchTensor bias, int64_t l, int64_t d, std::vector<float>& w,
                    std::vector<float>& b) {
  add(weight, l, {d}, w);
  add(bias, l, {d}, b);
}

SafetensorsFile tensors_of(const std::vector<Slot>& slots) {
  SafetensorsFile f;
  for (const Slot& s : slots) {
    NamedTensor t;
    t.shape = s.shape;
    t.data.assign(s.v->begin() + std::ptrdiff_t(s.offset), s.v->begin() + std::ptrdiff_t(s.offset + size_t(numel(s.shape))));
    f.tensors[s.name] = std::move(t);
  }
  return f;
}

void fill_slots(const TensorSource& f, const std::string& path, const std::vector<Slot>& slots) {
  (void)path;  // the source names its file
  for (const Slot& s : slots) {
    const std::vector<float> v = f.read(s.name, s.shape);
    std::copy(v.begin(), v.end(), s.v->begin() + std::ptrdiff_t(s.offset));
  }
}

void check_slot_sizes(const std::vector<Slot>& want, const std::vector<Slot>& values, const std::string& what) {
  if (want.size() != values.size()) throw Error(what + "a tensor is missing");
  for (size_t i = 0; i < want.size(); ++i) {
    const size_t n = want[i].v->size();
    if (values[i].v->size() != n)
      throw Error(what + want[i].name + ": expected " + std::to_string(n) + " values, got " +
                  std::to_string(values[i].v->size()));
  }
}

void read_stack_shapes(const TensorSource& f, const std::string& path, const StackNaming& nm, EncoderConfig& cfg) {
  const std::string wname = nm.name(TorchTensor::self_out);
  const std::vector<int64_t> w = f.shape(wname);
  if (w.size() != 2 || w[0] != w[1] || w[0] < 1) throw_shape_error(path, wname, w, "[d_model, d_model]");
  cfg.d_model = w[0];
  const std::string up = nm.name(TorchTensor::up);
  const std::vector<int64_t> w1 = f.shape(up);
  if (w1.size() != 2 || w1[0] < 1) throw_shape_error(path, up, w1, "[d_ff, d_model]");
  cfg.d_ff = w1[0];
}

void read_stack_settings(const TensorSource& f, const std::string& path, const EncoderLoadOptions& opts,
                         const StackNaming& nm, bool gated, const std::string& what, EncoderConfig& cfg,
                         std::vector<AssumedSetting>& assumed) {
  const std::string gate = nm.name(TorchTensor::gate), norm1_bias = nm.name(TorchTensor::attn_norm_bias);
  auto meta = [&](const char* key) -> const std::string* {
    auto it = f.metadata().find(key);
    return it == f.metadata().end() ? nullptr : &it->second;
  };
  const std::string where = path + ": __metadata__ ";
  auto assume = [&](const std::string& setting, const std::string& flag) { assumed.push_back({setting, flag}); };
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
                (gated ? " is not gated, but the file has " + gate : " is gated, but the file has no " + gate));
  if (opts.norm) {
    cfg.norm = *opts.norm;
    if (cfg.norm == NormPlacement::none) throw Error("norm: " + what + " norm is post or pre, got none (--norm)");
  } else if (const std::string* v = meta(kMetaNorm)) {
    cfg.norm = parse_norm_placement(*v, where + kMetaNorm);
    if (cfg.norm == NormPlacement::none) throw Error(where + kMetaNorm + ": " + what + " norm is post or pre");
  } else {
    assume("norm post", "--norm");
  }
  if (opts.norm_type) cfg.norm_type = *opts.norm_type;
  else if (const std::string* v = meta(kMetaNormType)) cfg.norm_type = parse_norm_type(*v, where + kMetaNormType);
  else if (!f.has(norm1_bias))
    // PyTorch ≥ 2.1's TransformerEncoderLayer(bias=False) drops the LayerNorms' β
    // as well, which ffn's LayerNorm does not support; an RMSNorm file of
    // ffn's own records ffn.norm_type.
    throw Error(path + ": no tensor " + norm1_bias + ": a LayerNorm without β (PyTorch's bias=False) is not "
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
}

std::map<std::string, std::string> stack_metadata(const EncoderConfig& cfg, const std::string& kind) {
  return {{kMetaKind, kind},
          {kMetaHeads, std::to_string(cfg.heads)},
          {kMetaLayers, std::to_string(cfg.layers)},
          {kMetaActivation, std::string(to_string(cfg.activation))},
          {kMetaNorm, std::string(to_string(cfg.norm))},
          {kMetaNormType, std::string(to_string(cfg.norm_type))},
          {kMetaEps, num(cfg.eps)}};
}

}  // namespace ffn::models
