// What the encoder and decoder files share (src/models/encoder_file.cpp,
// src/models/decoder_file.cpp): their name tables, a list of slots (every
// tensor's name from the table, its shape and where its values live), and the settings a state_dict's tensors do not
// give (heads, activation, norm placement and type, eps), from the options,
// else __metadata__, else PyTorch's defaults where ffn does not refuse to guess.
#pragma once

#include <string>
#include <vector>

#include "ffn/encoder.hpp"
#include "models/checkpoint.hpp"

namespace ffn::models {

// The tensors of ffn's own encoder and decoder files: an
// nn.TransformerEncoder's or nn.TransformerDecoder's state_dict, per layer
// self-attention (Q|K|V packed, or separate q/k/v for a file saved that way),
// cross-attention (the decoder's), the FFN (linear1, gate when gated,
// linear2) and the norms after each sublayer, then the final norm.
enum class TorchTensor {
  self_in, self_in_bias, self_q, self_k, self_v, self_out, self_out_bias,
  cross_in, cross_in_bias, cross_out, cross_out_bias,
  up, up_bias, gate, gate_bias, down, down_bias,
  attn_norm, attn_norm_bias, cross_norm, cross_norm_bias, ffn_norm, ffn_norm_bias, final_norm, final_norm_bias,
  count
};
using TorchNameTable = NameTableOf<TorchTensor>;
// nn.TransformerEncoder's names (the FFN's norm is norm2) and
// nn.TransformerDecoder's (norm2 after cross-attention, norm3 the FFN's).
const TorchNameTable& torch_encoder_names();
const TorchNameTable& torch_decoder_names();

// Where a file keeps its stack: the table, the prefix ("decoder." for an
// nn.Transformer's decoder), one layer without "layers.{L}."
// (nn.Transformer*Layer's own state_dict), separate q/k/v projections.
struct StackNaming {
  const TorchNameTable* table = nullptr;
  std::string prefix;
  bool single = false;
  bool separate_qkv = false;
  // The file's name of tensor t of layer `layer`.
  std::string name(TorchTensor t, int64_t layer = 0) const;
};

struct Slot {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* v;
  size_t offset = 0;  // in elements (a third of in_proj_weight for separate q/k/v)
};

// A slot list being built, with a file's names; add skips an empty vector (a
// tensor the layer does not have: no bias, no gate).
struct SlotList {
  const StackNaming& nm;
  std::vector<Slot> slots;
  void add(TorchTensor t, int64_t layer, std::vector<int64_t> shape, std::vector<float>& v, size_t offset = 0);
  // An nn.MultiheadAttention's tensors (self- or cross-attention): in_proj
  // (Q|K|V packed, or separate q/k/v_proj_weight) with its bias, and out_proj.
  void attention(bool cross, int64_t layer, int64_t d, std::vector<float>& in_w, std::vector<float>& in_b,
                 std::vector<float>& out_w, std::vector<float>& out_b);
  // The FFN's linear1, gate and linear2 (weights and biases).
  void ffn(int64_t layer, int64_t d, int64_t F, Weights& w);
  // A norm's γ and β.
  void norm(TorchTensor weight, TorchTensor bias, int64_t layer, int64_t d, std::vector<float>& w,
            std::vector<float>& b);
};

// The tensors of the slots (copies).
SafetensorsFile tensors_of(const std::vector<Slot>& slots);
// Fills the slots from f (read lazily, tensor by tensor); throws Error naming
// path and the tensor when one is missing or has another shape.
void fill_slots(const TensorSource& f, const std::string& path, const std::vector<Slot>& slots);
// Throws Error naming `what` and the tensor unless `values` has the sizes of `want`.
void check_slot_sizes(const std::vector<Slot>& want, const std::vector<Slot>& values, const std::string& what);

// cfg.d_model (from layer 0's self_attn.out_proj.weight) and cfg.d_ff (from
// its linear1.weight); throws Error naming path and the tensor.
void read_stack_shapes(const TensorSource& f, const std::string& path, const StackNaming& nm, EncoderConfig& cfg);

// cfg.heads, activation, norm, norm_type, eps and dropout from opts, else f's
// __metadata__ (what = "an encoder layer's" / "a decoder layer's" in messages);
// gated: the file has layer 0's gate; without the first norm's β the norms
// are RMSNorm only when the metadata says so.
void read_stack_settings(const TensorSource& f, const std::string& path, const EncoderLoadOptions& opts,
                         const StackNaming& nm, bool gated, const std::string& what, EncoderConfig& cfg,
                         std::vector<AssumedSetting>& assumed);
// The __metadata__ save writes: ffn.kind and the settings.
std::map<std::string, std::string> stack_metadata(const EncoderConfig& cfg, const std::string& kind);

}  // namespace ffn::models
