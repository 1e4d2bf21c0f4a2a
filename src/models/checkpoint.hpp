// Checkpoints as data (issue 46, part 5): a model's loader asks a tensor
// source for the tensors its name table names, and the source checks each
// one's shape and writes the one error message every loader gives.
//
//   TensorSource   one checkpoint's tensors by the file's own names, read
//                  when asked, from a format's TensorReader: a safetensors
//                  file (SafetensorsReader, lazy), a sharded one (its
//                  index.json), a GGUF (mapped; quantized blocks stay in the
//                  file), or a format registered with register_tensor_format
//                  (TensorSource::open picks it by the path). Shapes are
//                  asked and checked in PyTorch order [rows, cols]; a GGUF's
//                  messages print ne order, as its tools do.
//   NameTable      per (format, architecture): the file's name of each of
//                  the spec's tensors ("{L}" the layer number), and how the
//                  format lays them out (a GGUF llama's W_Q/W_K rows are in
//                  llama.cpp's rotary order).
//
// An architecture adds a name table per format and a config reader per
// format (src/models/arch_llama.cpp); the loader's loop is shared.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ffn {
class GgufFile;
}
namespace ffn::io {
class SafetensorsReader;
}

namespace ffn::models {

// "<file>: tensor <name> has shape <got>, expected <want>[ (<why>)]".
[[noreturn]] void throw_shape_error(const std::string& file, const std::string& name, const std::vector<int64_t>& got,
                                    const std::string& want, const std::string& why = "");
// "<file>: missing tensor <name>[ (<why>)]".
[[noreturn]] void throw_missing_tensor(const std::string& file, const std::string& name, const std::string& why = "");

// The naming and layout convention of a checkpoint's tensors: Hugging
// Face's (transformers' names, PyTorch order) or a GGUF's (llama.cpp's names,
// its rotary row order, quantized blocks).
enum class Format { safetensors, gguf };

// A checkpoint format's reader: what a new format implements (one class and
// its row in the format registry; CONTRIBUTING.md, "A checkpoint format").
class TensorReader {
 public:
  virtual ~TensorReader() = default;
  virtual bool has(const std::string& name) const = 0;
  // The tensor's shape in PyTorch order; Error (throw_missing_tensor) if it is missing.
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  // The values as float32 (shape() checked first by the source).
  virtual std::vector<float> read_f32(const std::string& name) const = 0;
  // Every tensor's name, sorted.
  virtual std::vector<std::string> names() const = 0;
  // The file's string metadata (safetensors' __metadata__); none by default.
  virtual const std::map<std::string, std::string>& metadata() const;
  // The file holding a tensor, for messages (a shard of a sharded checkpoint); the path by default.
  virtual std::string file_of(const std::string& name) const;
  virtual Format format() const { return Format::safetensors; }
  const std::string& path() const { return path_; }

 protected:
  explicit TensorReader(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

// A checkpoint format: its name, whether a path is one of its files, and its reader.
struct TensorFormat {
  std::string name;
  bool (*accepts)(const std::string& path) = nullptr;
  std::shared_ptr<const TensorReader> (*open)(const std::string& path) = nullptr;
};
// The registered formats, asked in order: those added by
// register_tensor_format first, then a sharded safetensors checkpoint
// (*.index.json), then safetensors (any other path: its reader's messages
// say what a file that is neither lacks).
const std::vector<TensorFormat>& tensor_formats();
// Adds one; Error if the name is taken or it has no accepts or open.
void register_tensor_format(TensorFormat f);

class TensorSource {
 public:
  // The checkpoint at path, read by the first format that accepts it.
  // why: what the expected shapes come from, for the messages ("config.json";
  // a GGUF's: "llama.* metadata").
  static TensorSource open(const std::string& path, std::string why);
  static TensorSource safetensors(const std::string& path, std::string why);
  // A checkpoint sharded over several safetensors files, as Hugging Face
  // saves large models: model.safetensors.index.json's weight_map names each
  // tensor's file, in the index's directory. Error naming the index and the
  // entry if a file is missing or not a plain file name, or a listed tensor
  // is not in its file.
  static TensorSource safetensors_index(const std::string& index_path, std::string why);
  static TensorSource gguf(std::shared_ptr<const GgufFile> file, std::string why);
  // A reader of any format.
  static TensorSource from(std::shared_ptr<const TensorReader> reader, std::string why);

  Format format() const { return reader_->format(); }
  const std::string& path() const { return reader_->path(); }
  bool has(const std::string& name) const { return reader_->has(name); }
  // The tensor's shape in PyTorch order (a GGUF's ne reversed); Error if it is missing.
  std::vector<int64_t> shape(const std::string& name) const { return reader_->shape(name); }
  // Error (naming the file, the tensor and both shapes) unless the tensor
  // exists with shape `want`, PyTorch order.
  void expect(const std::string& name, const std::vector<int64_t>& want) const;
  // expect, then the values as float32 (dequantized: a GGUF's blocks as ggml's).
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& want) const;
  // The GGUF, for its blocks and metadata (null for other formats).
  const GgufFile* gguf_file() const { return gguf_.get(); }
  // A safetensors file's __metadata__ (empty for a GGUF: gguf_file()'s metadata instead).
  const std::map<std::string, std::string>& metadata() const { return reader_->metadata(); }
  // Every tensor's name, sorted.
  std::vector<std::string> names() const { return reader_->names(); }

 private:
  std::shared_ptr<const TensorReader> reader_;
  std::string why_;
  std::shared_ptr<const GgufFile> gguf_;
};

// The decoder-only LM's tensors, the spec's names for them.
// The causal LM's tensors; the biases where the spec has them (AttentionSpec::qkv_bias, out_bias).
// The norms after the sublayers where the spec's norm sites are pre_and_post (Gemma 2).
// The per-head q/k norms where the spec has them (AttentionSpec::qk_norm; Qwen3).
// qkv and gate_up: fused tensors (Phi-3's W_Q|W_K|W_V, and W_gate|W_up, gate
// first), read in place of q, k, v and gate, up where a table names them.
enum class LMTensor { embed, norm, head, attn_norm, q, k, v, o, ffn_norm, gate, up, down, q_bias, k_bias, v_bias, o_bias,
                      attn_post_norm, ffn_post_norm, q_norm, k_norm, qkv, gate_up, count };

// Error: a spec asked for a tensor its name table has no name for.
[[noreturn]] void no_name(int tensor);

// The file's names of a model kind's tensors (E: the kind's tensor enum),
// "{L}" standing for the layer number.
template <class E>
struct NameTableOf {
  std::array<const char*, size_t(E::count)> names;
  // W_Q's and W_K's rows in llama.cpp's rotary order (each head's rows
  // interleaved in pairs) rather than transformers' (the halves apart).
  bool qk_rows_interleaved = false;
  // The file's name of tensor t (of layer `layer`); Error if the table has none.
  std::string name(E t, int64_t layer = -1) const {
    if (!names[size_t(t)]) no_name(int(t));
    std::string s = names[size_t(t)];
    const size_t at = s.find("{L}");
    if (at != std::string::npos) s.replace(at, 3, std::to_string(layer));
    return s;
  }
};
using NameTable = NameTableOf<LMTensor>;

// An encoder's tensors (BERT's layout: token, position and token type
// embeddings and their norm, then per layer Q, K, V and output projections,
// the norm after attention, the FFN's up and down projections and the norm
// after it; post-norm, with biases).
// relative_bias: MPNet's relative position bias [buckets, heads], shared by the layers.
// ModernBERT's (pre-norm, rotary): qkv, W_Q|W_K|W_V in one [3d, d]; up_gate,
// the gated FFN's input projection [2·d_ff, d] (the GELU's rows, then the
// gate's); final_norm after the last layer.
enum class EncTensor { word, position, token_type, embed_norm, embed_norm_bias, q, q_bias, k, k_bias, v, v_bias, o, o_bias,
                       attn_norm, attn_norm_bias, up, up_bias, down, down_bias, ffn_norm, ffn_norm_bias, relative_bias,
                       qkv, qkv_bias, up_gate, up_gate_bias, final_norm, final_norm_bias, count };
using EncoderNameTable = NameTableOf<EncTensor>;

// An encoder–decoder's tensors (MarianMT's layout): per encoder layer
// {L} self-attention's Q, K, V and output projections, the norm after it,
// the FFN's up and down projections and the norm after it; per decoder layer
// the same (self-attention), then its cross-attention and the norm after it;
// the embeddings (shared, or the encoder's and the decoder's), the output
// projection and the logits' bias. The encoder's and the decoder's first 16
// entries are in the same order (attention, norm, FFN, norm).
enum class Seq2SeqTensor {
  enc_q, enc_q_bias, enc_k, enc_k_bias, enc_v, enc_v_bias, enc_o, enc_o_bias, enc_attn_norm, enc_attn_norm_bias,
  enc_up, enc_up_bias, enc_down, enc_down_bias, enc_ffn_norm, enc_ffn_norm_bias,
  dec_q, dec_q_bias, dec_k, dec_k_bias, dec_v, dec_v_bias, dec_o, dec_o_bias, dec_attn_norm, dec_attn_norm_bias,
  dec_up, dec_up_bias, dec_down, dec_down_bias, dec_ffn_norm, dec_ffn_norm_bias,
  dec_cross_q, dec_cross_q_bias, dec_cross_k, dec_cross_k_bias, dec_cross_v, dec_cross_v_bias, dec_cross_o,
  dec_cross_o_bias, dec_cross_norm, dec_cross_norm_bias,
  shared, enc_embed, dec_embed, head, logits_bias, count
};
using Seq2SeqNameTable = NameTableOf<Seq2SeqTensor>;
// MarianMTModel's names (transformers' modeling_marian.py).
const Seq2SeqNameTable& marian_names();

}  // namespace ffn::models
