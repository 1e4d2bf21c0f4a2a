#include "io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <nlohmann/json.hpp>

#include "ffn/io.hpp"
#include "ffn/types.hpp"
#include "ffn/diagnostics.hpp"
#include "io/file_util.hpp"

namespace ffn::io {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw Error(path + ": not a valid safetensors file: " + why);
}


}  // namespace

int dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while ((man & 0x400) == 0);
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(path) {
  if (const FileKind k = sniff(file_); k != FileKind::safetensors && k != FileKind::unknown)
    throw Error(path + ": " + wrong_kind(k, "safetensors"));
  if (file_.size() < 8) bad(path, "file is shorter than the 8-byte header length");
  unsigned char len8[8];
  file_.read_at(0, len8, 8, "header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  if (n > kSafetensorsMaxHeader) bad(path, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > file_.size() - 8) {
    bad(path, "header length " + std::to_string(n) + " exceeds the file size " + std::to_string(file_.size()));
  }
  std::string text(n, '\0');
  file_.read_at(8, text.data(), n, "header");
  data_start_ = 8 + n;
  const uint64_t data_size = file_.size() - data_start_;

  // A raw NUL is never valid JSON (nlohmann's parser would stop there and
  // accept a NUL-padded header the official reader refuses).
  if (text.find('\0') != std::string::npos) bad(path, "header is not valid JSON (it contains a NUL byte)");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad(path, "header is not valid JSON");
  if (!j.is_object()) bad(path, "header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;  // as the official reader: an absent map
      if (!v.is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__ value of '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object()) bad(path, where + " is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad(path, where + " has no string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) bad(path, where + " has no 'shape' array");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad(path, where + " has no 'data_offsets' pair");
    TensorInfo t;
    t.dtype = v["dtype"].get<std::string>();
    // An unknown dtype makes the whole file invalid, as for the official
    // reader (a known one this program cannot convert is refused only when
    // that tensor is read).
    const int size = dtype_size(t.dtype);
    if (size == 0) bad(path, where + " has unknown dtype '" + t.dtype + "'");
    if (v["shape"].size() > 64) bad(path, where + " has too many dimensions");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer()) bad(path, where + " has a non-integer dimension");
      if (d.is_number_unsigned()) {
        uint64_t u = d.get<uint64_t>();
        if (u > (1ull << 62)) bad(path, where + " has a huge dimension " + std::to_string(u));
        t.shape.push_back(static_cast<int64_t>(u));
      } else {
        int64_t s = d.get<int64_t>();
        if (s < 0) bad(path, where + " has a negative dimension " + std::to_string(s));
        t.shape.push_back(s);
      }
    }
    for (const auto& o : v["data_offsets"]) {
      if (!o.is_number_unsigned()) bad(path, where + " has a non-integer or negative data offset");
    }
    t.begin = v["data_offsets"][0].get<uint64_t>();
    t.end = v["data_offsets"][1].get<uint64_t>();
    if (t.begin > t.end) bad(path, where + " has data_offsets begin > end");
    if (t.end > data_size) {
      bad(path, where + " data_offsets end " + std::to_string(t.end) + " is past the data section (" +
                    std::to_string(data_size) + " bytes)");
    }
    t.numel = checked_product(t.shape.data(), t.shape.size(), (1ull << 62) / uint64_t(size), path + ": " + where);
    if (t.numel * uint64_t(size) != t.end - t.begin) {
      bad(path, where + " shape " + shape_str(t.shape) + " x " + t.dtype + " needs " +
                    std::to_string(t.numel * uint64_t(size)) + " bytes, data_offsets give " +
                    std::to_string(t.end - t.begin));
    }
    tensors_[name] = std::move(t);
  }
  // The tensors tile the data section exactly, as the official reader
  // requires: sorted by offsets, each begins where the previous ended, no
  // overlap, no gap, no trailing bytes.
  std::vector<std::pair<const std::string*, const TensorInfo*>> order;
  for (const auto& [name, t] : tensors_) order.emplace_back(&name, &t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  for (const auto& [name, t] : order) {
    if (t->begin != covered)
      bad(path, "tensor '" + *name + "' data_offsets [" + std::to_string(t->begin) + ", " + std::to_string(t->end) +
                    "] " + (t->begin < covered ? "overlap" : "leave a gap after") + " the tensor data before (which ends at " +
                    std::to_string(covered) + ")");
    covered = t->end;
  }
  if (covered != data_size)
    bad(path, "the tensors end at byte " + std::to_string(covered) + " of the data section, which has " +
                  std::to_string(data_size) + " (trailing bytes)");
}

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(path() + ": tensor '" + name + "' not found");
  return it->second;
}

void SafetensorsReader::require_float(const std::string& name) const {
  const TensorInfo& t = info(name);
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16" && t.dtype != "F64")
    throw Error(path() + ": tensor '" + name + "' has dtype " + t.dtype + ", expected F32, BF16, F16 or F64");
}

std::vector<uint8_t> SafetensorsReader::read_raw(const std::string& name) const {
  const TensorInfo& t = info(name);
  std::vector<uint8_t> out(t.end - t.begin);
  const std::string what = "tensor '" + name + "'";
  file_.read_at(data_start_ + t.begin, out.data(), out.size(), what.c_str());
  return out;
}

std::vector<float> SafetensorsReader::read_f32_block(const std::string& name, int64_t r0, int64_t r1, int64_t c0,
                                                     int64_t c1) const {
  require_float(name);
  const TensorInfo& t = info(name);
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
  if (t.shape.size() > 2 || r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > cols)
    throw Error(path() + ": tensor '" + name + "': block rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                ") × columns [" + std::to_string(c0) + ", " + std::to_string(c1) + ") is outside its shape");
  const int size = dtype_size(t.dtype);
  const int64_t w = c1 - c0;
  std::vector<float> out(size_t((r1 - r0) * w));
  std::vector<uint8_t> raw(size_t(w * size));
  const std::string what = "tensor '" + name + "'";
  for (int64_t r = r0; r < r1; ++r) {  // one contiguous segment per row
    file_.read_at(data_start_ + t.begin + uint64_t((r * cols + c0) * size), raw.data(), raw.size(), what.c_str());
    float* o = out.data() + (r - r0) * w;
    for (int64_t j = 0; j < w; ++j) {
      const uint8_t* b = raw.data() + j * size;
      if (t.dtype == "F32") std::memcpy(o + j, b, 4);
      else if (t.dtype == "F64") {
        double v;
        std::memcpy(&v, b, 8);
        o[j] = static_cast<float>(v);
      } else {
        uint16_t h;
        std::memcpy(&h, b, 2);
        o[j] = t.dtype == "BF16" ? bf16_to_float(h) : half_to_float(h);
      }
    }
  }
  return out;
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  require_float(name);
  const TensorInfo& t = info(name);
  std::vector<float> out(t.numel);
  const uint64_t bytes = t.end - t.begin;
  const std::string what = "tensor '" + name + "'";
  if (t.dtype == "F32") {
    file_.read_at(data_start_ + t.begin, out.data(), bytes, what.c_str());
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    std::vector<uint16_t> raw(t.numel);
    file_.read_at(data_start_ + t.begin, raw.data(), bytes, what.c_str());
    const bool bf = t.dtype == "BF16";
    for (size_t i = 0; i < raw.size(); ++i) out[i] = bf ? bf16_to_float(raw[i]) : half_to_float(raw[i]);
  } else if (t.dtype == "F64") {
    std::vector<double> raw(t.numel);
    file_.read_at(data_start_ + t.begin, raw.data(), bytes, what.c_str());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = static_cast<float>(raw[i]);
  } else {
    throw Error(path() + ": " + what + " has dtype " + t.dtype + ", expected F32, BF16, F16 or F64");
  }
  return out;
}

}  // namespace ffn::io

namespace ffn {

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const io::SafetensorsReader r(path);
  SafetensorsHeader h;
  for (const auto& [name, t] : r.tensors()) h.tensors[name] = SafetensorsEntry{t.dtype, t.shape};
  h.metadata = r.metadata();
  return h;
}

SafetensorsFile read_safetensors(const std::string& path) {
  io::SafetensorsReader r(path);
  SafetensorsFile f;
  f.metadata = r.metadata();
  for (const auto& [name, info] : r.tensors()) {
    if (info.dtype == "I8") {
      const std::vector<uint8_t> raw = r.read_raw(name);
      std::vector<float> v(raw.size());
      for (size_t i = 0; i < raw.size(); ++i) v[i] = float(int8_t(raw[i]));
      f.tensors[name] = NamedTensor{info.shape, std::move(v)};
    } else {
      f.tensors[name] = NamedTensor{info.shape, r.read_f32(name)};
    }
  }
  return f;
}

namespace io {

SafetensorsLayout safetensors_layout(const std::string& path, const std::map<std::string, TensorSpec>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  SafetensorsLayout l;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw Error(path + ": '__metadata__' cannot be a tensor name");
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    const int size = dtype_size(t.dtype);
    if (size == 0) throw Error(path + ": tensor '" + name + "' has unknown dtype '" + t.dtype + "'");
    const uint64_t bytes = numel * uint64_t(size);
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    l.offset[name] = offset;
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  l.head.resize(8);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) l.head[size_t(i)] = char(static_cast<unsigned char>(n >> (8 * i)));
  l.head += text;
  for (auto& [name, o] : l.offset) o += l.head.size();
  l.size = l.head.size() + offset;
  return l;
}

}  // namespace io

void write_safetensors(const std::string& path, const SafetensorsFile& f) {
  std::map<std::string, io::TensorSpec> specs;
  for (const auto& [name, t] : f.tensors) {
    specs[name] = io::TensorSpec{t.dtype, t.shape};
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t bytes = t.dtype == "F32" ? t.data.size() * 4 : t.raw.size();
    if (io::dtype_size(t.dtype) != 0 && numel * uint64_t(io::dtype_size(t.dtype)) != bytes)
      throw Error(path + ": tensor '" + name + "' data does not match its shape");
  }
  const io::SafetensorsLayout l = io::safetensors_layout(path, specs, f.metadata);
  io::write_file_atomic(path, [&](std::FILE* out) {
    io::write_all(out, l.head.data(), l.head.size(), path);
    for (const auto& [name, t] : f.tensors) {
      if (t.dtype == "F32") io::write_all(out, t.data.data(), t.data.size() * 4, path);
      else io::write_all(out, t.raw.data(), t.raw.size(), path);
    }
  });
}

}  // namespace ffn

