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

using T = TorchTensor;

StackNaming naming(std::string prefix, bool single, bool separate_qkv) {
  return {&torch_encoder_names(), std::move(prefix), single, separate_qkv};
}

std::vector<Slot> slots(const EncoderConfig& cfg, const StackNaming& nm, EncoderWeights& w) {
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  SlotList out{nm, {}};
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto& l = w.layers[size_t(i)];
    out.attention(false, i, d, l.in_proj_weight, l.in_proj_bias, l.out_proj_weight, l.out_proj_bias);
    out.ffn(i, d, F, l.ffn);
    out.norm(T::attn_norm, T::attn_norm_bias, i, d, l.norm1_weight, l.norm1_bias);
    out.norm(T::ffn_norm, T::ffn_norm_bias, i, d, l.ffn.norm_weight, l.ffn.norm_bias);
  }
  out.norm(T::final_norm, T::final_norm_bias, 0, d, w.norm_weight, w.norm_bias);
  return out.slots;
}

// The slots read values.size() elements from each vector: refuse a wrong size.
void check_sizes(const EncoderConfig& cfg, const EncoderWeights& values) {
  const EncoderWeights want = EncoderWeights::zeros(cfg);
  if (values.layers.size() != want.layers.size()) throw Error("encoder gradients: wrong number of layers");
  const StackNaming nm = naming("", false, false);
  check_slot_sizes(slots(cfg, nm, const_cast<EncoderWeights&>(want)), slots(cfg, nm, const_cast<EncoderWeights&>(values)),
                   "encoder gradients: ");
}

}  // namespace

Encoder Encoder::load(const std::string& path, const EncoderLoadOptions& opts) {
  const TensorSource f = TensorSource::open(path, "");  // read lazily, tensor by tensor; any registered format
  std::string prefix = opts.prefix;
  if (!prefix.empty() && prefix.back() != '.') prefix += '.';
  StackNaming nm = naming(prefix, false, false);
  auto has = [&](T t, int64_t l) { return f.has(nm.name(t, l)); };
  auto has_attn = [&](int64_t l) { return has(T::self_in, l) || has(T::self_q, l); };
  EncoderConfig cfg;
  cfg.layers = 0;
  while (has_attn(cfg.layers)) ++cfg.layers;
  if (cfg.layers == 0) {
    const std::string stack_name = nm.name(T::self_in);
    nm.single = true;
    if (!has_attn(0))
      throw Error(path + ": no tensor " + stack_name + " (nn.TransformerEncoder) or " + nm.name(T::self_in) +
                  " (nn.TransformerEncoderLayer): not an encoder's state_dict" +
                  (nm.prefix.empty() ? "" : " under prefix " + nm.prefix));
    cfg.layers = 1;
  }
  nm.separate_qkv = !has(T::self_in, 0);
  read_stack_shapes(f, path, nm, cfg);
  cfg.bias = has(T::self_in_bias, 0);
  cfg.final_norm = !nm.single && has(T::final_norm, 0);
  const bool gated = has(T::gate, 0);

  std::vector<AssumedSetting> assumed;
  read_stack_settings(f, path, opts, nm, gated, "an encoder layer's", cfg, assumed);
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
  return tensors_of(slots(cfg_, naming(prefix_, single_, separate_qkv_), const_cast<EncoderWeights&>(values)));
}

SafetensorsFile Encoder::to_safetensors() const {
  EncoderWeights w = weights();
  SafetensorsFile f = tensors_of(slots(cfg_, naming(prefix_, single_, separate_qkv_), w));
  f.metadata = stack_metadata(cfg_, "encoder");
  return f;
}

void Encoder::save(const std::string& path) const { write_safetensors(path, to_safetensors()); }

void Encoder::save_gradients(const std::string& path, const EncoderWeights& grads) const {
  write_safetensors(path, to_safetensors(grads));
}

}  // namespace ffn
