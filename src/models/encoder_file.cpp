// Reading and writing the encoder's weights under nn.TransformerEncoder's
// state_dict names (include/ffn/encoder.hpp).
#include <cmath>
#include <functional>

#include "core/positions.hpp"
#include "models/metadata.hpp"
#include "models/stack_file.hpp"
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

std::vector<Slot> slots(const EncoderConfig& cfg, const Naming& nm, EncoderWeights& w) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  SlotList out;
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto& l = w.layers[size_t(i)];
    const std::string p = nm.layer(i);
    out.attention(p + "self_attn.", d, l.in_proj_weight, l.in_proj_bias, l.out_proj_weight, l.out_proj_bias,
                  nm.separate_qkv);
    out.ffn(p, d, F, l.ffn);
    out.norm(p + "norm1.", d, l.norm1_weight, l.norm1_bias);
    out.norm(p + "norm2.", d, l.ffn.norm_weight, l.ffn.norm_bias);
  }
  out.norm(nm.prefix + "norm.", d, w.norm_weight, w.norm_bias);
  return out.slots;
}

// The slots read values.size() elements from each vector: refuse a wrong size.
void check_sizes(const EncoderConfig& cfg, const EncoderWeights& values) {
  const EncoderWeights want = EncoderWeights::zeros(cfg);
  if (values.layers.size() != want.layers.size()) throw Error("encoder gradients: wrong number of layers");
  const Naming nm;
  check_slot_sizes(slots(cfg, nm, const_cast<EncoderWeights&>(want)), slots(cfg, nm, const_cast<EncoderWeights&>(values)),
                   "encoder gradients: ");
}

}  // namespace

Encoder Encoder::load(const std::string& path, const EncoderLoadOptions& opts) {
  const TensorSource f = TensorSource::safetensors(path, "");  // read lazily, tensor by tensor
  Naming nm;
  nm.prefix = opts.prefix;
  if (!nm.prefix.empty() && nm.prefix.back() != '.') nm.prefix += '.';
  auto has = [&](const std::string& name) { return f.has(name); };
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
  read_stack_shapes(f, path, l0, cfg);
  cfg.bias = has(l0 + "self_attn.in_proj_bias");
  cfg.final_norm = !nm.single && has(nm.prefix + "norm.weight");
  const bool gated = has(l0 + "gate.weight");

  std::vector<AssumedSetting> assumed;
  read_stack_settings(f, path, opts, gated, l0 + "norm1.bias", "an encoder layer's", cfg, assumed);
  cfg.validate();

  EncoderWeights w = EncoderWeights::zeros(cfg);
  fill_slots(f, path, slots(cfg, nm, w));
  Encoder e(cfg, std::move(w));
  e.prefix_ = nm.prefix;
  e.single_ = nm.single;
  e.separate_qkv_ = nm.separate_qkv;
  e.assumed_ = std::move(assumed);
  return e;
}

SafetensorsFile Encoder::to_safetensors(const EncoderWeights& values) const {
  check_sizes(cfg_, values);
  return tensors_of(slots(cfg_, Naming{prefix_, single_, separate_qkv_}, const_cast<EncoderWeights&>(values)));
}

SafetensorsFile Encoder::to_safetensors() const {
  EncoderWeights w = weights();
  SafetensorsFile f = tensors_of(slots(cfg_, Naming{prefix_, single_, separate_qkv_}, w));
  f.metadata = stack_metadata(cfg_, "encoder");
  return f;
}

void Encoder::save(const std::string& path) const { write_safetensors(path, to_safetensors()); }

void Encoder::save_gradients(const std::string& path, const EncoderWeights& grads) const {
  write_safetensors(path, to_safetensors(grads));
}

}  // namespace ffn
