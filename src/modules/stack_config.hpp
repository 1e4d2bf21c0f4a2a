// The public stacks' configs and the spec (src/modules/spec.hpp), both ways.
// The spec comes first: it describes every stack the blocks run, and
// EncoderConfig (include/ffn/encoder.hpp: nn.TransformerEncoder/Decoder's
// settings, the decoder's too) is the part of it a user of those classes
// sets. A checkpoint's config reader (an embedding family's row,
// src/models/encoder_family.hpp) describes its stack as a spec and the
// model's Encoder is made from it with encoder_config; the modules take
// their layers' settings back from the spec with stack_spec.
#pragma once

#include "ffn/encoder.hpp"
#include "modules/spec.hpp"

namespace ffn::nn {

// The stacks of nn.TransformerEncoder/Decoder shape: encoder, or seq2seq
// decoder (causal self-attention, cross-attention).
StackSpec stack_spec(const EncoderConfig& c, StackKind kind);

// The EncoderConfig of a spec of that shape. Throws Error naming the first
// field of the spec an EncoderConfig cannot hold (rotary positions, grouped
// key/value heads, a head width other than d_model / heads, a q/k norm, a
// window, a soft-cap, a query scale, a relative position bias, a norm kind
// or site other than LayerNorm/RMSNorm before or after, biases on some
// projections only). The config's ranges are EncoderConfig::validate's.
EncoderConfig encoder_config(const StackSpec& s);

}  // namespace ffn::nn
