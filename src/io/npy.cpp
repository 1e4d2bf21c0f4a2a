// NumPy .npy reader and writer (format versions 1.0, 2.0 and 3.0).
// Layout: "\x93NUMPY", major, minor, header length (u16 for 1.0, u32 after),
// then a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and '\n', then the raw data.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "ffn/io.hpp"
#include "ffn/types.hpp"
#include "io/file_util.hpp"

namespace ffn {
namespace {

// numpy.load(allow_pickle=False) refuses headers longer than this
// (numpy.lib.format._MAX_HEADER_SIZE); so do we.
constexpr uint64_t kMaxHeader = 10000;
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

// The header is a Python dict literal, which NumPy reads with
// ast.literal_eval: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// This parses the subset NumPy accepts: string keys, the three keys exactly
// (in any order), a string descr, True/False, a tuple of non-negative
// integers; whitespace anywhere between tokens; nothing but whitespace after.
class HeaderParser {
 public:
  // version: Python-2 long integers ((2L, 3L)) are read in versions 1.0 and
  // 2.0, as NumPy does.
  HeaderParser(const std::string& text, const std::string& path, int version)
      : s_(text), path_(path), longs_(version < 3) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal("a key");
      expect(':');
      if (key == "descr") {
        h.descr = string_literal("'descr'");
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran = bool_literal();
        have_fortran = true;
      } else if (key == "shape") {
        h.shape = int_tuple();
        have_shape = true;
      } else {
        bad(path_, "header has the key '" + key + "', expected only 'descr', 'fortran_order' and 'shape'");
      }
      skip_space();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') fail("',' or '}'");
    }
    ++i_;
    skip_space();
    if (i_ != s_.size()) fail("the end of the header");
    if (!have_descr) bad(path_, "header has no 'descr'");
    if (!have_fortran) bad(path_, "header has no 'fortran_order'");
    if (!have_shape) bad(path_, "header has no 'shape'");
    return h;
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  // Whitespace as Python's tokenizer has it (form feed included), and
  // comments to the end of the line.
  void skip_space() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }
  [[noreturn]] void fail(const std::string& wanted) {
    bad(path_, "header is not a valid dict literal: expected " + wanted + " at byte " + std::to_string(i_));
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("'") + c + "'");
    ++i_;
  }
  std::string string_literal(const std::string& what) {
    skip_space();
    if ((peek() == 'u' || peek() == 'U') && i_ + 1 < s_.size() && (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"'))
      ++i_;  // u'...' is the same str
    const char q = peek();
    if (q != '\'' && q != '"') fail(what + " as a quoted string");
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) fail("the closing quote of " + what);
    std::string v = s_.substr(i_ + 1, end - i_ - 1);
    if (v.find('\\') != std::string::npos || v.find('\n') != std::string::npos)
      bad(path_, what + " has an escape or a line break");
    i_ = end + 1;
    return v;
  }
  bool bool_literal() {
    skip_space();
    if (s_.compare(i_, 4, "True") == 0 && !ident_char(i_ + 4)) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0 && !ident_char(i_ + 5)) {
      i_ += 5;
      return false;
    }
    bad(path_, "'fortran_order' is not True or False");
  }
  bool ident_char(size_t j) const {
    return j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_');
  }
  std::vector<int64_t> int_tuple() {
    expect('(');
    std::vector<int64_t> dims;
    bool comma = false;  // a one-element tuple needs its trailing comma
    while (true) {
      skip_space();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') bad(path_, "'shape' is not a tuple of non-negative integers");
      uint64_t v = 0;
      const size_t first = i_;
      while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + uint64_t(s_[i_++] - '0');
        if (v > kMaxElements) bad(path_, "dimension too large in 'shape'");
      }
      if (s_[first] == '0' && i_ - first > 1) bad(path_, "'shape' has an integer with a leading zero");
      if (longs_ && (peek() == 'L' || peek() == 'l') && !ident_char(i_ + 1)) ++i_;
      if (ident_char(i_) || peek() == '.') bad(path_, "'shape' is not a tuple of non-negative integers");
      dims.push_back(int64_t(v));
      skip_space();
      comma = peek() == ',';
      if (comma) {
        ++i_;
        continue;
      }
      if (peek() != ')') fail("',' or ')' in 'shape'");
    }
    ++i_;
    if (dims.size() == 1 && !comma) bad(path_, "'shape' is (n) rather than the tuple (n,)");
    if (dims.size() > 32) bad(path_, "too many dimensions");
    return dims;
  }

  const std::string& s_;
  const std::string& path_;
  bool longs_;
  size_t i_ = 0;
};

NpyHeader parse_header(const io::InputFile& f) {
  const std::string& path = f.path();
  unsigned char pre[10];
  if (f.size() < 10) bad(path, "file is shorter than the 10-byte preamble");
  f.read_at(0, pre, 10, "preamble");
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    if (const io::FileKind k = io::sniff(f); k != io::FileKind::unknown) throw Error(path + ": " + io::wrong_kind(k, ".npy"));
    bad(path, "missing \\x93NUMPY magic");
  }
  const int major = pre[6], minor = pre[7];
  uint64_t hlen = 0, start = 0;
  if (minor != 0 || major < 1 || major > 3)
    bad(path, "unsupported format version " + std::to_string(major) + "." + std::to_string(minor) +
                  " (expected 1.0, 2.0 or 3.0)");
  if (major == 1) {
    hlen = pre[8] | (pre[9] << 8);
    start = 10;
  } else {
    if (f.size() < 12) bad(path, "file is shorter than the 12-byte preamble");
    unsigned char l4[4];
    f.read_at(8, l4, 4, "header length");
    hlen = uint64_t(l4[0]) | (uint64_t(l4[1]) << 8) | (uint64_t(l4[2]) << 16) | (uint64_t(l4[3]) << 24);
    start = 12;
  }
  if (hlen > kMaxHeader)
    bad(path, "header length " + std::to_string(hlen) + " exceeds NumPy's limit of " + std::to_string(kMaxHeader));
  if (start + hlen > f.size()) bad(path, "header length " + std::to_string(hlen) + " is past the end of the file");
  std::string h(hlen, '\0');
  f.read_at(start, h.data(), hlen, "header");
  NpyHeader out = HeaderParser(h, path, major).parse();
  out.data_offset = start + hlen;
  out.numel = io::checked_product(out.shape.data(), out.shape.size(), kMaxElements, path);
  return out;
}

// The element type a descr names, as NumPy reads it: a byte order
// ('<' little, '>' big, '=' or '|' or none: native, little endian here) and
// a type code ('f4' or 'f', 'i4', 'i8'), or a name ('float32', 'int32', 'int64').
struct Elem {
  char kind = 0;   // 'f' or 'i'; 0 unknown
  int size = 0;
  bool big_endian = false;
};
Elem parse_descr(const std::string& d) {
  Elem e;
  if (d == "float32") return {'f', 4, false};
  if (d == "int32") return {'i', 4, false};
  if (d == "int64") return {'i', 8, false};
  std::string t = d;
  if (!t.empty() && (t[0] == '<' || t[0] == '>' || t[0] == '=' || t[0] == '|')) {
    e.big_endian = t[0] == '>';
    t = t.substr(1);
  }
  if (t == "f4" || t == "f") return {'f', 4, e.big_endian};
  if (t == "i4" || t == "i") return {'i', 4, e.big_endian};
  if (t == "i8") return {'i', 8, e.big_endian};
  return {};
}

template <typename T>
void from_big_endian(std::vector<T>& v) {
  for (T& x : v) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    std::reverse(b, b + sizeof(T));
    std::memcpy(&x, b, sizeof(T));
  }
}

void check_size(const io::InputFile& f, const NpyHeader& h, int itemsize) {
  // Bytes after the data are ignored, as NumPy does.
  const uint64_t need = h.numel * uint64_t(itemsize), have = f.size() - h.data_offset;
  if (have < need)
    throw Error(f.path() + ": data is " + std::to_string(have) + " bytes, shape and dtype need " +
                std::to_string(need) + " (file truncated)");
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
  const Elem e = parse_descr(h.descr);
  if (e.kind != 'f' || e.size != 4)
    throw Error(path + ": dtype '" + h.descr + "' not supported, expected float32 ('<f4')");
  check_size(f, h, 4);
  Array a;
  a.shape = h.shape;
  a.data.resize(h.numel);
  f.read_at(h.data_offset, a.data.data(), h.numel * 4, "array data");
  if (e.big_endian) from_big_endian(a.data);
  if (h.fortran && h.shape.size() > 1) a.data = fortran_to_c(a.data, a.shape);
  return a;
}

std::vector<int64_t> read_npy_int(const std::string& path, std::vector<int64_t>* shape) {
  io::InputFile f(path);
  NpyHeader h = parse_header(f);
  const Elem e = parse_descr(h.descr);
  if (e.kind != 'i')
    throw Error(path + ": dtype '" + h.descr + "' not supported, expected int32 ('<i4') or int64 ('<i8')");
  check_size(f, h, e.size);
  std::vector<int64_t> out(h.numel);
  if (e.size == 4) {
    std::vector<int32_t> tmp(h.numel);
    f.read_at(h.data_offset, tmp.data(), h.numel * 4, "array data");
    if (e.big_endian) from_big_endian(tmp);
    for (size_t i = 0; i < tmp.size(); ++i) out[i] = tmp[i];
  } else {
    f.read_at(h.data_offset, out.data(), h.numel * 8, "array data");
    if (e.big_endian) from_big_endian(out);
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
