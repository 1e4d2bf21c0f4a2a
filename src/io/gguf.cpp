// GGUF reader (include/ffn/gguf.hpp).
#include "ffn/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "ffn/types.hpp"
#include "io/file_util.hpp"
#include "core/quant_types.hpp"

namespace ffn {
namespace {

constexpr int kMaxDims = 4;                        // GGML_MAX_DIMS
constexpr uint64_t kMaxArrayDepth = 4;             // arrays of arrays of ...
constexpr uint64_t kMaxKeyBytes = 65536;           // llama.cpp's keys are under 100 bytes

// A cursor over the mapped header: every read checks the bytes remain, so a
// count or length taken from the file can never make it read or allocate past
// the end.
struct Cursor {
  const uint8_t* p;
  uint64_t pos, size;
  const std::string& path;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path + ": " + what + " (at byte " + std::to_string(pos) + " of " + std::to_string(size) + ")");
  }
  uint64_t left() const { return size - pos; }
  void need(uint64_t n, const char* what) const {
    if (n > left()) fail(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, " +
                         std::to_string(left()) + " left");
  }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str(const char* what, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
    const uint64_t n = get<uint64_t>(what);
    if (n > max_len) fail(std::string(what) + " is " + std::to_string(n) + " bytes long, more than " + std::to_string(max_len));
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p + pos), size_t(n));
    pos += n;
    return s;
  }
};

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    default: return 0;  // string, array: variable
  }
}

bool known_type(uint32_t t) { return t <= uint32_t(GgufType::f64); }

// One scalar of type t into v (integers in i / u, floats in f, strings in s).
void read_scalar(Cursor& c, GgufType t, GgufValue& v, const std::string& key) {
  switch (t) {
    case GgufType::u8: v.i = c.get<uint8_t>("a u8 value"); break;
    case GgufType::i8: v.i = c.get<int8_t>("an i8 value"); break;
    case GgufType::u16: v.i = c.get<uint16_t>("a u16 value"); break;
    case GgufType::i16: v.i = c.get<int16_t>("an i16 value"); break;
    case GgufType::u32: v.i = c.get<uint32_t>("a u32 value"); break;
    case GgufType::i32: v.i = c.get<int32_t>("an i32 value"); break;
    case GgufType::f32: v.f = c.get<float>("an f32 value"); break;
    case GgufType::f64: v.f = c.get<double>("an f64 value"); break;
    case GgufType::i64: v.i = c.get<int64_t>("an i64 value"); break;
    case GgufType::u64:
      v.u = c.get<uint64_t>("a u64 value");
      if (v.u > uint64_t(std::numeric_limits<int64_t>::max())) v.u_big = true;
      else v.i = int64_t(v.u);
      break;
    case GgufType::boolean: {
      const uint8_t b = c.get<uint8_t>("a bool value");
      if (b > 1) c.fail("metadata \"" + key + "\": a bool is " + std::to_string(b) + ", expected 0 or 1");
      v.i = b;
      break;
    }
    case GgufType::string: v.s = c.str("a string value"); break;
    default: c.fail("metadata \"" + key + "\": not a scalar type");
  }
  if (t != GgufType::u64) v.u = uint64_t(v.i);
}

void read_value(Cursor& c, GgufType t, GgufValue& v, const std::string& key, uint64_t depth) {
  v.type = t;
  if (t != GgufType::array) return read_scalar(c, t, v, key);
  if (depth >= kMaxArrayDepth) c.fail("metadata \"" + key + "\": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  const uint32_t et = c.get<uint32_t>("an array's element type");
  if (!known_type(et)) c.fail("metadata \"" + key + "\": unknown array element type " + std::to_string(et));
  v.elem = GgufType(et);
  v.count = c.get<uint64_t>("an array's length");
  // Each element takes at least its scalar size, a string at least its 8-byte
  // length, an array its 12-byte head: a count the rest of the file cannot
  // hold is refused before anything is allocated.
  const uint64_t min_each = v.elem == GgufType::string ? 8 : v.elem == GgufType::array ? 12 : scalar_size(v.elem);
  if (v.count > c.left() / min_each)
    c.fail("metadata \"" + key + "\": an array of " + std::to_string(v.count) + " " + gguf_type_name(v.elem) +
           " elements does not fit in the file");
  const size_t n = size_t(v.count);
  switch (v.elem) {
    case GgufType::string:
      v.strings.reserve(n);
      for (size_t i = 0; i < n; ++i) v.strings.push_back(c.str("an array's string"));
      break;
    case GgufType::array:
      v.items.resize(n);
      for (size_t i = 0; i < n; ++i) read_value(c, GgufType::array, v.items[i], key, depth + 1);
      break;
    case GgufType::f32:
    case GgufType::f64:
      v.floats.resize(n);
      for (size_t i = 0; i < n; ++i) {
        GgufValue e;
        read_scalar(c, v.elem, e, key);
        v.floats[i] = e.f;
      }
      break;
    default:
      v.ints.resize(n);
      for (size_t i = 0; i < n; ++i) {
        GgufValue e;
        read_scalar(c, v.elem, e, key);
        if (e.u_big) c.fail("metadata \"" + key + "\": a u64 element beyond int64's range");
        v.ints[i] = e.i;
      }
  }
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
                                      "u64", "i64", "f64"};
  return known_type(uint32_t(t)) ? names[uint32_t(t)] : "unknown";
}

GgufFile::GgufFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + io::errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  size_ = uint64_t(st.st_size);
  if (size_ < 24) {
    ::close(fd);
    throw Error(path + ": " + std::to_string(size_) + " bytes, too short for a GGUF header (24)");
  }
  void* m = ::mmap(nullptr, size_t(size_), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw Error(path + ": cannot map: " + io::errno_text());
  base_ = static_cast<const uint8_t*>(m);
  try {
    Cursor c{base_, 0, size_, path_};
    if (std::memcmp(base_, "GGUF", 4) != 0) {
      if (std::memcmp(base_, "FUGG", 4) == 0) throw Error(path + ": a big-endian GGUF file; only little endian is read");
      throw Error(path + ": not a GGUF file (the first bytes are not \"GGUF\")");
    }
    c.pos = 4;
    version_ = c.get<uint32_t>("the version");
    if (version_ != 2 && version_ != 3)
      throw Error(path + ": GGUF version " + std::to_string(version_) + "; versions 2 and 3 are read" +
                  (version_ == 1 ? " (version 1 files are from before August 2023: convert them again)" : ""));
    const uint64_t n_tensors = c.get<uint64_t>("the tensor count");
    const uint64_t n_kv = c.get<uint64_t>("the metadata count");
    // Each metadata entry takes ≥ 8 + 4 bytes, each tensor info ≥ 8 + 4 + 4 + 8.
    if (n_kv > c.left() / 12) c.fail("the metadata count " + std::to_string(n_kv) + " does not fit in the file");
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = c.str("a metadata key", kMaxKeyBytes);
      const uint32_t t = c.get<uint32_t>("a metadata type");
      if (!known_type(t)) c.fail("metadata \"" + key + "\": unknown value type " + std::to_string(t));
      GgufValue v;
      read_value(c, GgufType(t), v, key, 0);
      if (!metadata_.emplace(key, std::move(v)).second) c.fail("metadata \"" + key + "\" appears twice");
    }
    if (const GgufValue* a = find("general.alignment")) {
      if (a->type != GgufType::u32) throw Error(path + ": metadata \"general.alignment\" is " +
                                                gguf_type_name(a->type) + ", expected u32");
      if (a->i == 0 || (a->i & (a->i - 1)) != 0 || a->i > 65536)
        throw Error(path + ": metadata \"general.alignment\" is " + std::to_string(a->i) +
                    ", expected a power of two up to 65536");
      alignment_ = uint64_t(a->i);
    }
    if (n_tensors > c.left() / 24) c.fail("the tensor count " + std::to_string(n_tensors) + " does not fit in the file");
    tensors_.reserve(size_t(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensor t;
      t.name = c.str("a tensor name", kMaxKeyBytes);
      const uint32_t nd = c.get<uint32_t>("a tensor's dimension count");
      if (nd == 0 || nd > kMaxDims)
        c.fail("tensor \"" + t.name + "\" has " + std::to_string(nd) + " dimensions, expected 1 to " + std::to_string(kMaxDims));
      uint64_t numel = 1;
      for (uint32_t d = 0; d < nd; ++d) {
        const uint64_t ne = c.get<uint64_t>("a tensor dimension");
        if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()) / numel)
          c.fail("tensor \"" + t.name + "\" dimension " + std::to_string(d) + " is " + std::to_string(ne) +
                 (ne == 0 ? ", expected ≥ 1" : ": the element count overflows"));
        numel *= ne;
        t.ne.push_back(int64_t(ne));
      }
      const uint32_t type = c.get<uint32_t>("a tensor type");
      int64_t be = 0, bb = 0;
      if (!ggml_block(type, be, bb))
        c.fail("tensor \"" + t.name + "\" has type " + ggml_type_name(type) +
               ", which this reader does not dequantize (" + quant_type_names(QuantSet::readable) + ")");
      t.type = GgmlType(type);
      if (t.ne[0] % be != 0)
        c.fail("tensor \"" + t.name + "\" rows of " + std::to_string(t.ne[0]) + " are not whole " +
               ggml_type_name(type) + " blocks of " + std::to_string(be));
      t.numel = int64_t(numel);
      t.bytes = numel / uint64_t(be) * uint64_t(bb);  // ≤ numel · 4: no overflow
      t.offset = c.get<uint64_t>("a tensor offset");
      if (t.offset % alignment_ != 0)
        c.fail("tensor \"" + t.name + "\" offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
               std::to_string(alignment_));
      if (!index_.emplace(t.name, tensors_.size()).second) c.fail("tensor \"" + t.name + "\" appears twice");
      tensors_.push_back(std::move(t));
    }
    data_start_ = (c.pos + alignment_ - 1) / alignment_ * alignment_;
    if (data_start_ > size_ && !tensors_.empty())
      throw Error(path + ": truncated: the tensor data would start at byte " + std::to_string(data_start_) + " of " +
                  std::to_string(size_));
    // Every tensor inside the file, none overlapping another.
    std::vector<const GgufTensor*> by_offset;
    for (const GgufTensor& t : tensors_) {
      const uint64_t room = size_ - std::min(size_, data_start_);
      if (t.offset > room || t.bytes > room - t.offset)
        throw Error(path + ": tensor \"" + t.name + "\" (" + std::to_string(t.bytes) + " bytes at data offset " +
                    std::to_string(t.offset) + ") ends past the end of the file (" + std::to_string(room) +
                    " bytes of data): truncated?");
      by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i)
      if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->bytes)
        throw Error(path + ": tensors \"" + by_offset[i - 1]->name + "\" and \"" + by_offset[i]->name + "\" overlap");
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(base_), size_t(size_));
    throw;
  }
}

GgufFile::~GgufFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_t(size_));
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void wrong(const std::string& path, const std::string& key, const char* expected, const GgufValue* v) {
  throw Error(path + ": metadata \"" + key + "\" " +
              (v ? std::string("is ") + gguf_type_name(v->type) + ", expected " + expected
                 : std::string("is missing (expected ") + expected + ")"));
}
bool is_int(GgufType t) {
  return t != GgufType::f32 && t != GgufType::f64 && t != GgufType::string && t != GgufType::array &&
         t != GgufType::boolean;
}
}  // namespace

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || !is_int(v->type) || (v->i < 0 && !v->u_big)) wrong(path_, key, "an unsigned integer", v);
  return v->u;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v && (v->type == GgufType::f32 || v->type == GgufType::f64)) return v->f;
  if (v && is_int(v->type)) return v->u_big ? double(v->u) : double(v->i);
  wrong(path_, key, "a number", v);
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::string) wrong(path_, key, "a string", v);
  return v->s;
}

const std::vector<std::string>& GgufFile::get_strings(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::array || v->elem != GgufType::string) wrong(path_, key, "an array of strings", v);
  return v->strings;
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw Error(path_ + ": no tensor \"" + name + "\"");
  return tensors_[it->second];
}

void GgufFile::release(const GgufTensor& t) const {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = uintptr_t(data(t)), end = begin + uintptr_t(t.bytes);
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), size_t(last - first), MADV_DONTNEED);
}

std::vector<float> GgufFile::read_f32(const std::string& name) const {
  const GgufTensor& t = tensor(name);
  std::vector<float> out(size_t(t.numel));
  dequantize(t.type, data(t), t.numel, out.data());
  return out;
}

// ggml's dequantize_row_*, bitwise (src/core/quant_blocks.cpp).
void dequantize(GgmlType t, const uint8_t* src, int64_t n, float* dst) {
  const nn::QuantType* q = nn::find_quant_type(uint32_t(t));
  if (!q || !q->readable()) throw Error("dequantize: unsupported ggml type " + ggml_type_name(uint32_t(t)));
  q->dequantize(src, n, dst);
}

}  // namespace ffn
