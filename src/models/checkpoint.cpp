// Tensor sources and name tables (src/models/checkpoint.hpp).
#include "models/checkpoint.hpp"

#include <algorithm>

#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "core/json_file.hpp"
#include "io/safetensors.hpp"

namespace ffn::models {

void throw_shape_error(const std::string& file, const std::string& name, const std::vector<int64_t>& got,
                       const std::string& want, const std::string& why) {
  throw Error(file + ": tensor " + name + " has shape " + shape_str(got) + ", expected " + want +
              (why.empty() ? "" : " (" + why + ")"));
}

void throw_missing_tensor(const std::string& file, const std::string& name, const std::string& why) {
  throw Error(file + ": missing tensor " + name + (why.empty() ? "" : " (" + why + ")"));
}

TensorSource TensorSource::safetensors(const std::string& path, std::string why) {
  TensorSource s;
  s.format_ = Format::safetensors;
  s.path_ = path;
  s.why_ = std::move(why);
  s.st_.push_back(std::make_shared<const io::SafetensorsReader>(path));
  return s;
}

TensorSource TensorSource::safetensors_index(const std::string& index_path, std::string why) {
  TensorSource s;
  s.format_ = Format::safetensors;
  s.path_ = index_path;
  s.why_ = std::move(why);
  const nlohmann::json j = read_json(index_path);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    throw Error(index_path + ": expected an object with a weight_map of tensor name → file");
  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  std::map<std::string, size_t> file_index;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(index_path + ": weight_map[\"" + name + "\"] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      throw Error(index_path + ": weight_map[\"" + name + "\"] is \"" + f + "\"; expected a file name in its directory");
    auto it = file_index.find(f);
    if (it == file_index.end()) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(dir / f, ec))
        throw Error(index_path + ": weight_map[\"" + name + "\"] names " + (dir / f).string() + ", which is missing");
      it = file_index.emplace(f, s.st_.size()).first;
      s.st_.push_back(std::make_shared<const io::SafetensorsReader>((dir / f).string()));
    }
    if (!s.st_[it->second]->has(name))
      throw Error(index_path + ": weight_map puts tensor " + name + " in " + f + ", which does not hold it");
    s.shard_of_[name] = it->second;
  }
  return s;
}

const io::SafetensorsReader* TensorSource::file_of(const std::string& name) const {
  if (st_.empty()) return nullptr;
  if (shard_of_.empty()) return st_[0]->has(name) ? st_[0].get() : nullptr;
  auto it = shard_of_.find(name);
  return it == shard_of_.end() ? nullptr : st_[it->second].get();
}

TensorSource TensorSource::gguf(std::shared_ptr<const GgufFile> file, std::string why) {
  TensorSource s;
  s.format_ = Format::gguf;
  s.path_ = file->path();
  s.why_ = "ne[0] innermost, from the " + why;
  s.gguf_ = std::move(file);
  return s;
}

bool TensorSource::has(const std::string& name) const { return gguf_ ? gguf_->has(name) : file_of(name) != nullptr; }

std::vector<int64_t> TensorSource::shape(const std::string& name) const {
  if (gguf_) {
    std::vector<int64_t> s = gguf_->tensor(name).ne;  // its own error when missing
    std::reverse(s.begin(), s.end());
    return s;
  }
  const io::SafetensorsReader* f = file_of(name);
  if (!f) throw_missing_tensor(path_, name);
  return f->info(name).shape;
}

void TensorSource::expect(const std::string& name, const std::vector<int64_t>& want) const {
  if (gguf_) {  // ne order in the message, as ggml's tools print it
    const std::vector<int64_t>& ne = gguf_->tensor(name).ne;
    const std::vector<int64_t> want_ne(want.rbegin(), want.rend());
    if (ne != want_ne) throw_shape_error(path_, name, ne, shape_str(want_ne), why_);
    return;
  }
  const io::SafetensorsReader* f = file_of(name);
  if (!f) throw_missing_tensor(path_, name);
  const std::vector<int64_t>& got = f->info(name).shape;
  if (got != want) throw_shape_error(f->path(), name, got, shape_str(want), why_);
}

const std::map<std::string, std::string>& TensorSource::metadata() const {
  static const std::map<std::string, std::string> none;
  return st_.empty() ? none : st_[0]->metadata();
}

std::vector<float> TensorSource::read(const std::string& name, const std::vector<int64_t>& want) const {
  expect(name, want);
  return gguf_ ? gguf_->read_f32(name) : file_of(name)->read_f32(name);
}

const Seq2SeqNameTable& marian_names() {
  static const Seq2SeqNameTable t{{
      "model.encoder.layers.{L}.self_attn.q_proj.weight", "model.encoder.layers.{L}.self_attn.q_proj.bias",
      "model.encoder.layers.{L}.self_attn.k_proj.weight", "model.encoder.layers.{L}.self_attn.k_proj.bias",
      "model.encoder.layers.{L}.self_attn.v_proj.weight", "model.encoder.layers.{L}.self_attn.v_proj.bias",
      "model.encoder.layers.{L}.self_attn.out_proj.weight", "model.encoder.layers.{L}.self_attn.out_proj.bias",
      "model.encoder.layers.{L}.self_attn_layer_norm.weight", "model.encoder.layers.{L}.self_attn_layer_norm.bias",
      "model.encoder.layers.{L}.fc1.weight", "model.encoder.layers.{L}.fc1.bias",
      "model.encoder.layers.{L}.fc2.weight", "model.encoder.layers.{L}.fc2.bias",
      "model.encoder.layers.{L}.final_layer_norm.weight", "model.encoder.layers.{L}.final_layer_norm.bias",
      "model.decoder.layers.{L}.self_attn.q_proj.weight", "model.decoder.layers.{L}.self_attn.q_proj.bias",
      "model.decoder.layers.{L}.self_attn.k_proj.weight", "model.decoder.layers.{L}.self_attn.k_proj.bias",
      "model.decoder.layers.{L}.self_attn.v_proj.weight", "model.decoder.layers.{L}.self_attn.v_proj.bias",
      "model.decoder.layers.{L}.self_attn.out_proj.weight", "model.decoder.layers.{L}.self_attn.out_proj.bias",
      "model.decoder.layers.{L}.self_attn_layer_norm.weight", "model.decoder.layers.{L}.self_attn_layer_norm.bias",
      "model.decoder.layers.{L}.fc1.weight", "model.decoder.layers.{L}.fc1.bias",
      "model.decoder.layers.{L}.fc2.weight", "model.decoder.layers.{L}.fc2.bias",
      "model.decoder.layers.{L}.final_layer_norm.weight", "model.decoder.layers.{L}.final_layer_norm.bias",
      "model.decoder.layers.{L}.encoder_attn.q_proj.weight", "model.decoder.layers.{L}.encoder_attn.q_proj.bias",
      "model.decoder.layers.{L}.encoder_attn.k_proj.weight", "model.decoder.layers.{L}.encoder_attn.k_proj.bias",
      "model.decoder.layers.{L}.encoder_attn.v_proj.weight", "model.decoder.layers.{L}.encoder_attn.v_proj.bias",
      "model.decoder.layers.{L}.encoder_attn.out_proj.weight", "model.decoder.layers.{L}.encoder_attn.out_proj.bias",
      "model.decoder.layers.{L}.encoder_attn_layer_norm.weight", "model.decoder.layers.{L}.encoder_attn_layer_norm.bias",
      "model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
      "lm_head.weight", "final_logits_bias",
  }};
  return t;
}

void no_name(int tensor) {
  throw Error("name table: the architecture has no name for tensor " + std::to_string(tensor) +
              " (its spec asks for a tensor its table lacks)");
}

std::vector<std::string> TensorSource::names() const {
  std::vector<std::string> v;
  if (gguf_)
    for (const GgufTensor& t : gguf_->tensors()) v.push_back(t.name);
  for (const auto& f : st_)
    for (const auto& [name, info] : f->tensors()) v.push_back(name);
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace ffn::models
