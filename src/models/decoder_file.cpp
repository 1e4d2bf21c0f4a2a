// Reading and writing the decoder's weights under nn.TransformerDecoder's
// state_dict names (include/ffn/decoder.hpp); with prefix "decoder." an
// nn.Transformer's decoder.
#include "ffn/decoder.hpp"
#include "ffn/diagnostics.hpp"
#include "models/stack_file.hpp"

namespace ffn {

using namespace models;

namespace {

struct Naming {
  std::string prefix;
  bool single = false;
  std::string layer(int64_t i) const { return single ? prefix : prefix + "layers." + std::to_string(i) + "."; }
};

std::vector<Slot> slots(const DecoderConfig& cfg, const Naming& nm, DecoderWeights& w) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  SlotList out;
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto& l = w.layers[size_t(i)];
    const std::string p = nm.layer(i);
    for (auto [a, name] : {std::pair{&l.self_attn, "self_attn."}, std::pair{&l.cross_attn, "multihead_attn."}})
      out.attention(p + name, d, a->in_proj_weight, a->in_proj_bias, a->out_proj_weight, a->out_proj_bias);
    out.ffn(p, d, F, l.ffn);
    out.norm(p + "norm1.", d, l.norm1_weight, l.norm1_bias);
    out.norm(p + "norm2.", d, l.norm2_weight, l.norm2_bias);
    out.norm(p + "norm3.", d, l.ffn.norm_weight, l.ffn.norm_bias);
  }
  out.norm(nm.prefix + "norm.", d, w.norm_weight, w.norm_bias);
  return out.slots;
}

}  // namespace

Decoder Decoder::load(const std::string& path, const DecoderLoadOptions& opts) {
  const TensorSource f = TensorSource::safetensors(path, "");  // read lazily, tensor by tensor
  Naming nm;
  nm.prefix = opts.prefix;
  if (!nm.prefix.empty() && nm.prefix.back() != '.') nm.prefix += '.';
  auto has = [&](const std::string& name) { return f.has(name); };
  DecoderConfig cfg;
  cfg.layers = 0;
  while (has(nm.prefix + "layers." + std::to_string(cfg.layers) + ".multihead_attn.in_proj_weight")) ++cfg.layers;
  if (cfg.layers == 0) {
    if (!has(nm.prefix + "multihead_attn.in_proj_weight"))
      throw Error(path + ": no tensor " + nm.prefix + "layers.0.multihead_attn.in_proj_weight (nn.TransformerDecoder) or " +
                  nm.prefix + "multihead_attn.in_proj_weight (nn.TransformerDecoderLayer): not a decoder's state_dict" +
                  (nm.prefix.empty() ? " (an nn.Transformer's decoder is under prefix decoder.)"
                                     : " under prefix " + nm.prefix));
    nm.single = true;
    cfg.layers = 1;
  }
  const std::string l0 = nm.layer(0);
  read_stack_shapes(f, path, l0, cfg);
  cfg.bias = has(l0 + "self_attn.in_proj_bias");
  cfg.final_norm = !nm.single && has(nm.prefix + "norm.weight");
  std::vector<AssumedSetting> assumed;
  read_stack_settings(f, path, opts, has(l0 + "gate.weight"), l0 + "norm1.bias", "a decoder layer's", cfg, assumed);
  cfg.validate();
  DecoderWeights w = DecoderWeights::zeros(cfg);
  fill_slots(f, path, slots(cfg, nm, w));
  Decoder dec(cfg, std::move(w));
  dec.prefix_ = nm.prefix;
  dec.single_ = nm.single;
  dec.assumed_ = std::move(assumed);
  return dec;
}

SafetensorsFile Decoder::to_safetensors(const DecoderWeights& values) const {
  const DecoderWeights want = DecoderWeights::zeros(cfg_);
  if (values.layers.size() != want.layers.size()) throw Error("decoder gradients: wrong number of layers");
  const Naming nm{prefix_, single_};
  check_slot_sizes(slots(cfg_, nm, const_cast<DecoderWeights&>(want)), slots(cfg_, nm, const_cast<DecoderWeights&>(values)),
                   "decoder gradients: ");
  return tensors_of(slots(cfg_, nm, const_cast<DecoderWeights&>(values)));
}

SafetensorsFile Decoder::to_safetensors() const {
  DecoderWeights w = weights();
  SafetensorsFile f = tensors_of(slots(cfg_, Naming{prefix_, single_}, w));
  f.metadata = stack_metadata(cfg_, "decoder");
  return f;
}

void Decoder::save(const std::string& path) const { write_safetensors(path, to_safetensors()); }

void Decoder::save_gradients(const std::string& path, const DecoderWeights& grads) const {
  write_safetensors(path, to_safetensors(grads));
}

}  // namespace ffn
