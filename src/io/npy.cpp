// NumPy .npy reader and writer (format versions 1.0, 2.0 and 3.0).
// Layout: "\x93NUMPY", major, minor, header length (u16 for 1.0, u32 after),
// then a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and '\n', then the raw data.
#include <cstring>
#include <string>
#include <vector>

#include "ffn/ffn.hpp"
#include "io/file_util.hpp"

namespace ffn {
namespace {

constexpr uint64_t kMaxHeader = 1 << 20;        // real headers are < 1 KiB
constexpr uint64_t kMaxElements = 1ull << 40;   // far above memory; guards overflow

struct NpyHeader {
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;
  uint64_t numel = 0;
};

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw Error(path + ": not a valid .npy file: " + why);
}

// Finds the value text after 'key': in the dict literal.
size_t find_key(const std::string& h, const std::string& key, const std::string& path) {
  for (const char* q : {"'", "\""}) {
    std::string k = std::string(q) + key + q;
    size_t p = h.find(k);
    if (p != std::string::npos) {
      p = h.find(':', p + k.size());
      if (p == std::string::npos) bad(path, "header key '" + key + "' has no value");
      p++;
      while (p < h.size() && h[p] == ' ') p++;
      return p;
    }
  }
  bad(path, "header has no '" + key + "'");
}

NpyHeader parse_header(const io::InputFile& f) {
  const std::string& path = f.path();
  unsigned char pre[10];
  if (f.size() < 10) bad(path, "file is shorter than the 10-byte preamble");
  f.read_at(0, pre, 10, "preamble");
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    if (const io::FileKind k = io::sniff(f); k != io::FileKind::unknown) throw Error(path + ": " + io::wrong_kind(k, ".npy"));
    bad(path, "missing \\x93NUMPY magic");
  }
  int major = pre[6];
  uint64_t hlen = 0, start = 0;
  if (major == 1) {
    hlen = pre[8] | (pre[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    unsigned char l4[4];
    f.read_at(8, l4, 4, "header length");
    hlen = uint64_t(l4[0]) | (uint64_t(l4[1]) << 8) | (uint64_t(l4[2]) << 16) | (uint64_t(l4[3]) << 24);
    start = 12;
  } else {
    bad(path, "unsupported format version " + std::to_string(major));
  }
  if (hlen > kMaxHeader || start + hlen > f.size()) bad(path, "header length " + std::to_string(hlen) + " out of range");
  std::string h(hlen, '\0');
  f.read_at(start, h.data(), hlen, "header");

  NpyHeader out;
  out.data_offset = start + hlen;
  // descr
  size_t p = find_key(h, "descr", path);
  if (p >= h.size() || (h[p] != '\'' && h[p] != '"')) bad(path, "'descr' is not a string");
  size_t e = h.find(h[p], p + 1);
  if (e == std::string::npos) bad(path, "unterminated 'descr'");
  out.descr = h.substr(p + 1, e - p - 1);
  // fortran_order
  p = find_key(h, "fortran_order", path);
  if (h.compare(p, 4, "True") == 0) out.fortran = true;
  else if (h.compare(p, 5, "False") == 0) out.fortran = false;
  else bad(path, "'fortran_order' is not True or False");
  // shape
  p = find_key(h, "shape", path);
  if (p >= h.size() || h[p] != '(') bad(path, "'shape' is not a tuple");
  e = h.find(')', p);
  if (e == std::string::npos) bad(path, "unterminated 'shape'");
  std::string dims = h.substr(p + 1, e - p - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) i++;
    if (i >= dims.size()) break;
    if (dims[i] < '0' || dims[i] > '9') bad(path, "'shape' has a non-integer entry");
    uint64_t v = 0;
    while (i < dims.size() && dims[i] >= '0' && dims[i] <= '9') {
      v = v * 10 + uint64_t(dims[i] - '0');
      if (v > kMaxElements) bad(path, "dimension too large in 'shape'");
      i++;
    }
    if (i < dims.size() && dims[i] != ',' && dims[i] != ' ') bad(path, "'shape' has a non-integer entry");
    out.shape.push_back(static_cast<int64_t>(v));
  }
  if (out.shape.size() > 32) bad(path, "too many dimensions");
  out.numel = io::checked_product(out.shape.data(), out.shape.size(), kMaxElements, path);
  return out;
}

int itemsize_of(const std::string& descr) {
  if (descr.size() == 3 && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=') &&
      (descr[2] == '4' || descr[2] == '8' || descr[2] == '2' || descr[2] == '1'))
    return descr[2] - '0';
  return 0;
}

void check_size(const io::InputFile& f, const NpyHeader& h, int itemsize) {
  uint64_t need = h.numel * uint64_t(itemsize);
  uint64_t have = f.size() - h.data_offset;
  if (have != need) {
    throw Error(f.path() + ": data is " + std::to_string(have) + " bytes, shape and dtype need " +
                std::to_string(need) + (have < need ? " (file truncated)" : " (trailing bytes)"));
  }
}

// Fortran (column-major) data → C order.
template <typename T>
std::vector<T> fortran_to_c(const std::vector<T>& src, const std::vector<int64_t>& shape) {
  size_t nd = shape.size();
  std::vector<T> dst(src.size());
  if (src.empty()) return dst;
  std::vector<int64_t> idx(nd, 0);
  for (size_t c = 0; c < src.size(); ++c) {
    // c is the row-major index of idx; compute the column-major offset.
    int64_t off = 0, stride = 1;
    for (size_t k = 0; k < nd; ++k) {
      off += idx[k] * stride;
      stride *= shape[k];
    }
    dst[c] = src[off];
    for (size_t k = nd; k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return dst;
}

std::string shape_text(const std::vector<int64_t>& s) {
  if (s.size() == 1) return "(" + std::to_string(s[0]) + ",)";
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + ")";
}

}  // namespace

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Array read_npy(const std::string& path) {
  io::InputFile f(path);
  NpyHeader h = parse_header(f);
  if (h.descr != "<f4" && h.descr != "=f4") {
    throw Error(path + ": dtype '" + h.descr + "' not supported, expected float32 ('<f4')");
  }
  check_size(f, h, 4);
  Array a;
  a.shape = h.shape;
  a.data.resize(h.numel);
  f.read_at(h.data_offset, a.data.data(), h.numel * 4, "array data");
  if (h.fortran && h.shape.size() > 1) a.data = fortran_to_c(a.data, a.shape);
  return a;
}

std::vector<int64_t> read_npy_int(const std::string& path, std::vector<int64_t>* shape) {
  io::InputFile f(path);
  NpyHeader h = parse_header(f);
  int size = itemsize_of(h.descr);
  if (!(h.descr.size() == 3 && h.descr[1] == 'i' && (size == 4 || size == 8))) {
    throw Error(path + ": dtype '" + h.descr + "' not supported, expected int32 ('<i4') or int64 ('<i8')");
  }
  check_size(f, h, size);
  std::vector<int64_t> out(h.numel);
  if (size == 4) {
    std::vector<int32_t> tmp(h.numel);
    f.read_at(h.data_offset, tmp.data(), h.numel * 4, "array data");
    for (size_t i = 0; i < tmp.size(); ++i) out[i] = tmp[i];
  } else {
    f.read_at(h.data_offset, out.data(), h.numel * 8, "array data");
  }
  if (h.fortran && h.shape.size() > 1) out = fortran_to_c(out, h.shape);
  if (shape) *shape = h.shape;
  return out;
}

void write_npy(const std::string& path, const Array& a) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(a.shape) + ", }";
  // Pad so that the data starts at a multiple of 64 bytes; end with '\n'.
  size_t total = 10 + header.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  header += std::string(pad, ' ') + "\n";
  if (static_cast<int64_t>(a.data.size()) != a.numel()) throw Error(path + ": array data does not match its shape");
  io::write_file_atomic(path, [&](std::FILE* f) {
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             static_cast<unsigned char>(header.size() & 0xff),
                             static_cast<unsigned char>(header.size() >> 8)};
    io::write_all(f, pre, 10, path);
    io::write_all(f, header.data(), header.size(), path);
    io::write_all(f, a.data.data(), a.data.size() * 4, path);
  });
}

}  // namespace ffn
