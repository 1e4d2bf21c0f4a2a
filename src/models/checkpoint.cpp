// Tensor sources and name tables (src/models/checkpoint.hpp).
#include "models/checkpoint.hpp"

#include <algorithm>
#include <filesystem>

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

const std::map<std::string, std::string>& TensorReader::metadata() const {
  static const std::map<std::string, std::string> none;
  return none;
}

std::string TensorReader::file_of(const std::string&) const { return path_; }

namespace {

// A safetensors checkpoint: one file, or the shards of an index.json.
class SafetensorsTensors final : public TensorReader {
 public:
  explicit SafetensorsTensors(const std::string& path) : TensorReader(path) {
    st_.push_back(std::make_shared<const io::SafetensorsReader>(path));
  }
  SafetensorsTensors(const std::string& index_path, bool /*index*/) : TensorReader(index_path) {
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
        it = file_index.emplace(f, st_.size()).first;
        st_.push_back(std::make_shared<const io::SafetensorsReader>((dir / f).string()));
      }
      if (!st_[it->second]->has(name))
        throw Error(index_path + ": weight_map puts tensor " + name + " in " + f + ", which does not hold it");
      shard_of_[name] = it->second;
    }
  }
  bool has(const std::string& name) const override { return reader(name) != nullptr; }
  std::vector<int64_t> shape(const std::string& name) const override {
    const io::SafetensorsReader* f = reader(name);
    if (!f) throw_missing_tensor(path(), name);
    return f->info(name).shape;
  }
  std::vector<float> read_f32(const std::string& name) const override { return reader(name)->read_f32(name); }
  std::vector<std::string> names() const override {
    std::vector<std::string> v;
    for (const auto& f : st_)
      for (const auto& [name, info] : f->tensors()) v.push_back(name);
    std::sort(v.begin(), v.end());
    return v;
  }
  const std::map<std::string, std::string>& metadata() const override { return st_[0]->metadata(); }
  std::string file_of(const std::string& name) const override {
    const io::SafetensorsReader* f = reader(name);
    return f ? f->path() : path();
  }

 private:
  // The file holding name (null: none).
  const io::SafetensorsReader* reader(const std::string& name) const {
    if (shard_of_.empty()) return st_[0]->has(name) ? st_[0].get() : nullptr;
    auto it = shard_of_.find(name);
    return it == shard_of_.end() ? nullptr : st_[it->second].get();
  }
  std::vector<std::shared_ptr<const io::SafetensorsReader>> st_;
  std::map<std::string, size_t> shard_of_;
};

// A GGUF's tensors (ne reversed to PyTorch order; blocks dequantized as ggml's).
class GgufTensors final : public TensorReader {
 public:
  explicit GgufTensors(std::shared_ptr<const GgufFile> f) : TensorReader(f->path()), f_(std::move(f)) {}
  bool has(const std::string& name) const override { return f_->has(name); }
  std::vector<int64_t> shape(const std::string& name) const override {
    std::vector<int64_t> s = f_->tensor(name).ne;  // its own error when missing
    std::reverse(s.begin(), s.end());
    return s;
  }
  std::vector<float> read_f32(const std::string& name) const override { return f_->read_f32(name); }
  std::vector<std::string> names() const override {
    std::vector<std::string> v;
    for (const GgufTensor& t : f_->tensors()) v.push_back(t.name);
    std::sort(v.begin(), v.end());
    return v;
  }
  Format format() const override { return Format::gguf; }

 private:
  std::shared_ptr<const GgufFile> f_;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<TensorFormat>& format_registry() {
  static std::vector<TensorFormat> r{
      {"safetensors index", [](const std::string& p) { return ends_with(p, ".index.json"); },
       [](const std::string& p) -> std::shared_ptr<const TensorReader> {
         return std::make_shared<const SafetensorsTensors>(p, true);
       }},
      {"safetensors", [](const std::string&) { return true; },
       [](const std::string& p) -> std::shared_ptr<const TensorReader> {
         return std::make_shared<const SafetensorsTensors>(p);
       }},
  };
  return r;
}

}  // namespace

const std::vector<TensorFormat>& tensor_formats() { return format_registry(); }

void register_tensor_format(TensorFormat f) {
  if (!f.accepts || !f.open) throw Error("register_tensor_format: \"" + f.name + "\" has no accepts or open");
  std::vector<TensorFormat>& r = format_registry();
  for (const TensorFormat& g : r)
    if (g.name == f.name) throw Error("register_tensor_format: \"" + f.name + "\" is registered already");
  r.insert(r.begin(), std::move(f));  // before the built-in ones: safetensors accepts any path
}

TensorSource TensorSource::from(std::shared_ptr<const TensorReader> reader, std::string why) {
  TensorSource s;
  s.reader_ = std::move(reader);
  s.why_ = std::move(why);
  return s;
}

TensorSource TensorSource::open(const std::string& path, std::string why) {
  for (const TensorFormat& f : format_registry())
    if (f.accepts(path)) return from(f.open(path), std::move(why));
  throw Error(path + ": no checkpoint format reads it");  // unreachable: safetensors accepts every path
}

TensorSource TensorSource::safetensors(const std::string& path, std::string why) {
  return from(std::make_shared<const SafetensorsTensors>(path), std::move(why));
}

TensorSource TensorSource::safetensors_index(const std::string& index_path, std::string why) {
  return from(std::make_shared<const SafetensorsTensors>(index_path, true), std::move(why));
}

TensorSource TensorSource::gguf(std::shared_ptr<const GgufFile> file, std::string why) {
  TensorSource s = from(std::make_shared<const GgufTensors>(file), "ne[0] innermost, from the " + why);
  s.gguf_ = std::move(file);
  return s;
}

void TensorSource::expect(const std::string& name, const std::vector<int64_t>& want) const {
  if (gguf_) {  // ne order in the message, as ggml's tools print it
    const std::vector<int64_t>& ne = gguf_->tensor(name).ne;
    const std::vector<int64_t> want_ne(want.rbegin(), want.rend());
    if (ne != want_ne) throw_shape_error(path(), name, ne, shape_str(want_ne), why_);
    return;
  }
  const std::vector<int64_t> got = reader_->shape(name);  // throw_missing_tensor when missing
  if (got != want) throw_shape_error(reader_->file_of(name), name, got, shape_str(want), why_);
}

std::vector<float> TensorSource::read(const std::string& name, const std::vector<int64_t>& want) const {
  expect(name, want);
  return reader_->read_f32(name);
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

}  // namespace ffn::models
