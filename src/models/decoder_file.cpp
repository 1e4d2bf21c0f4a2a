// Reading and writing the decoder's weights under nn.TransformerDecoder's
// state_dict names (include/ffn/decoder.hpp); with prefix "decoder." an
// nn.Transformer's decoder.
#include "ffn/decoder.hpp"
#include "ffn/diagnostics.hpp"
#include "models/stack_file.hpp"

namespace ffn {

using namespace models;

namespace {

using T = TorchTensor;

StackNaming naming(std::string prefix, bool single) { return {&torch_decoder_names(), std::move(prefix), single}; }

std::vector<Slot> slots(const DecoderConfig& cfg, const StackNaming& nm, DecoderWeights& w) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  SlotList out{nm, {}};
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto& l = w.layers[size_t(i)];
    for (const bool cross : {false, true}) {
      AttentionWeights& a = cross ? l.cross_attn : l.self_attn;
      out.attention(cross, i, d, a.in_proj_weight, a.in_proj_bias, a.out_proj_weight, a.out_proj_bias);
    }
    out.ffn(i, d, F, l.ffn);
    out.norm(T::attn_norm, T::attn_norm_bias, i, d, l.norm1_weight, l.norm1_bias);
    out.norm(T::cross_norm, T::cross_norm_bias, i, d, l.norm2_weight, l.norm2_bias);
    out.norm(T::ffn_norm, T::ffn_norm_bias, i, d, l.ffn.norm_weight, l.ffn.norm_bias);
  }
  out.norm(T::final_norm, T::final_norm_bias, 0, d, w.norm_weight, w.norm_bias);
  return out.slots;
}

}  // namespace

Decoder Decoder::load(const std::string& path, const DecoderLoadOptions& opts) {
  const TensorSource f = TensorSource::open(path, "");  // read lazily, tensor by tensor; any registered format
  std::string prefix = opts.prefix;
  if (!prefix.empty() && prefix.back() != '.') prefix += '.';
  StackNaming nm = naming(prefix, false);
  auto has = [&](T t, int64_t l) { return f.has(nm.name(t, l)); };
  DecoderConfig cfg;
  cfg.layers = 0;
  while (has(T::cross_in, cfg.layers)) ++cfg.layers;
  if (cfg.layers == 0) {
    const std::string stack_name = nm.name(T::cross_in);
    nm.single = true;
    if (!has(T::cross_in, 0))
      throw Error(path + ": no tensor " + stack_name + " (nn.TransformerDecoder) or " + nm.name(T::cross_in) +
                  " (nn.TransformerDecoderLayer): not a decoder's state_dict" +
                  (nm.prefix.empty() ? " (an nn.Transformer's decoder is under prefix decoder.)"
                                     : " under prefix " + nm.prefix));
    cfg.layers = 1;
  }
  read_stack_shapes(f, path, nm, cfg);
  cfg.bias = has(T::self_in_bias, 0);
  cfg.final_norm = !nm.single && has(T::final_norm, 0);
  std::vector<AssumedSetting> assumed;
  read_stack_settings(f, path, opts, nm, has(T::gate, 0), "a decoder layer's", cfg, assumed);
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
  const StackNaming nm = naming(prefix_, single_);
  check_slot_sizes(slots(cfg_, nm, const_cast<DecoderWeights&>(want)), slots(cfg_, nm, const_cast<DecoderWeights&>(values)),
                   "decoder gradients: ");
  return tensors_of(slots(cfg_, nm, const_cast<DecoderWeights&>(values)));
}

SafetensorsFile Decoder::to_safetensors() const {
  DecoderWeights w = weights();
  SafetensorsFile f = tensors_of(slots(cfg_, naming(prefix_, single_), w));
  f.metadata = stack_metadata(cfg_, "decoder");
  return f;
}

void Decoder::save(const std::string& path) const { write_safetensors(path, to_safetensors()); }

void Decoder::save_gradients(const std::string& path, const DecoderWeights& grads) const {
  write_safetensors(path, to_safetensors(grads));
}

}  // namespace ffn
