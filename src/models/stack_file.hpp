// What the encoder and decoder files share (src/models/encoder_file.cpp,
// src/models/decoder_file.cpp): a list of slots (every tensor's name, shape
// and where its values live), and the settings a state_dict's tensors do not
// give (heads, activation, norm placement and type, eps), from the options,
// else __metadata__, else PyTorch's defaults where ffn does not refuse to guess.
#pragma once

#include <string>
#include <vector>

#include "ffn/encoder.hpp"
#include "models/checkpoint.hpp"

namespace ffn::models {

struct Slot {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* v;
  size_t offset = 0;  // in elements (a third of in_proj_weight for separate q/k/v)
};

// A slot list being built, in nn.TransformerEncoder/DecoderLayer's names;
// add skips an empty vector (a tensor the layer does not have: no bias, no gate).
struct SlotList {
  std::vector<Slot> slots;
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float>& v, size_t offset = 0);
  // An nn.MultiheadAttention's tensors under p ("...self_attn."): in_proj (Q|K|V
  // packed, or separate q/k/v_proj_weight) with its bias, and out_proj.
  void attention(const std::string& p, int64_t d, std::vector<float>& in_w, std::vector<float>& in_b,
                 std::vector<float>& out_w, std::vector<float>& out_b, bool separate_qkv = false);
  // The FFN's linear1, gate and linear2 (weights and biases) under the layer's prefix p.
  void ffn(const std::string& p, int64_t d, int64_t F, Weights& w);
  // A norm's γ and β: name + "weight", name + "bias".
  void norm(const std::string& name, int64_t d, std::vector<float>& weight, std::vector<float>& bias);
};

// The tensors of the slots (copies).
SafetensorsFile tensors_of(const std::vector<Slot>& slots);
// Fills the slots from f (read lazily, tensor by tensor); throws Error naming
// path and the tensor when one is missing or has another shape.
void fill_slots(const TensorSource& f, const std::string& path, const std::vector<Slot>& slots);
// Throws Error naming `what` and the tensor unless `values` has the sizes of `want`.
void check_slot_sizes(const std::vector<Slot>& want, const std::vector<Slot>& values, const std::string& what);

// cfg.d_model (from l0 + "self_attn.out_proj.weight") and cfg.d_ff (from
// l0 + "linear1.weight"); throws Error naming path and the tensor.
void read_stack_shapes(const TensorSource& f, const std::string& path, const std::string& l0, EncoderConfig& cfg);

// cfg.heads, activation, norm, norm_type, eps and dropout from opts, else f's
// __metadata__ (what = "an encoder layer's" / "a decoder layer's" in messages);
// `gated`: the file has a gate; `norm1_bias`: the name of the first norm's β,
// whose absence means RMSNorm only when the metadata says so.
void read_stack_settings(const TensorSource& f, const std::string& path, const EncoderLoadOptions& opts, bool gated,
                         const std::string& norm1_bias, const std::string& what, EncoderConfig& cfg,
                         std::vector<AssumedSetting>& assumed);
// The __metadata__ save writes: ffn.kind and the settings.
std::map<std::string, std::string> stack_metadata(const EncoderConfig& cfg, const std::string& kind);

}  // namespace ffn::models
