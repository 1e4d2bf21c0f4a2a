// Tensor sources and name tables (src/models/checkpoint.hpp).
#include "models/checkpoint.hpp"

#include <algorithm>

#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
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
  s.st_ = std::make_shared<const io::SafetensorsReader>(path);
  return s;
}

TensorSource TensorSource::gguf(std::shared_ptr<const GgufFile> file, std::string why) {
  TensorSource s;
  s.format_ = Format::gguf;
  s.path_ = file->path();
  s.why_ = "ne[0] innermost, from the " + why;
  s.gguf_ = std::move(file);
  return s;
}

bool TensorSource::has(const std::string& name) const { return gguf_ ? gguf_->has(name) : st_->has(name); }

std::vector<int64_t> TensorSource::shape(const std::string& name) const {
  if (gguf_) {
    std::vector<int64_t> s = gguf_->tensor(name).ne;  // its own error when missing
    std::reverse(s.begin(), s.end());
    return s;
  }
  if (!st_->has(name)) throw_missing_tensor(path_, name);
  return st_->info(name).shape;
}

void TensorSource::expect(const std::string& name, const std::vector<int64_t>& want) const {
  if (gguf_) {  // ne order in the message, as ggml's tools print it
    const std::vector<int64_t>& ne = gguf_->tensor(name).ne;
    const std::vector<int64_t> want_ne(want.rbegin(), want.rend());
    if (ne != want_ne) throw_shape_error(path_, name, ne, shape_str(want_ne), why_);
    return;
  }
  if (!st_->has(name)) throw_missing_tensor(path_, name);
  const std::vector<int64_t>& got = st_->info(name).shape;
  if (got != want) throw_shape_error(path_, name, got, shape_str(want), why_);
}

const std::map<std::string, std::string>& TensorSource::metadata() const {
  static const std::map<std::string, std::string> none;
  return st_ ? st_->metadata() : none;
}

std::vector<float> TensorSource::read(const std::string& name, const std::vector<int64_t>& want) const {
  expect(name, want);
  return gguf_ ? gguf_->read_f32(name) : st_->read_f32(name);
}

std::string NameTable::name(LMTensor t, int64_t layer) const {
  if (!names[size_t(t)])
    throw Error("name table: the architecture has no name for tensor " + std::to_string(int(t)) +
                " (its spec asks for a tensor its table lacks)");
  std::string s = names[size_t(t)];
  const size_t at = s.find("{L}");
  if (at != std::string::npos) s.replace(at, 3, std::to_string(layer));
  return s;
}

}  // namespace ffn::models
