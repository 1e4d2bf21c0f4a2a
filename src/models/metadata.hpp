// The safetensors __metadata__ keys ffn writes and reads, in one table: the
// feed-forward files (src/models/feed_forward_file.cpp) and the encoder files
// (src/models/encoder_file.cpp) share the settings' keys. Values are the
// enums' names (ffn/types.hpp), numbers as printf's %g.
#pragma once

namespace ffn::models {

constexpr const char* kMetaActivation = "ffn.activation";
constexpr const char* kMetaNorm = "ffn.norm";
constexpr const char* kMetaNormType = "ffn.norm_type";
constexpr const char* kMetaEps = "ffn.eps";
// feed-forward files
constexpr const char* kMetaDtype = "ffn.weights_dtype";        // fp32, bf16, fp16, int8
constexpr const char* kMetaQuantization = "ffn.quantization";  // the method, in words
// encoder files
constexpr const char* kMetaKind = "ffn.kind";  // "encoder"
constexpr const char* kMetaHeads = "ffn.heads";
constexpr const char* kMetaLayers = "ffn.layers";

}  // namespace ffn::models
