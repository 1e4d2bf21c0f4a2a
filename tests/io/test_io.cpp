// .npy and safetensors: round trips, conversions, and every malformed file
// refused with a message naming the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ffn/ffn.hpp"
#include "test_util.hpp"
#include "io/safetensors.hpp"

namespace fs = std::filesystem;
using namespace ffn;

namespace {

fs::path temp_dir() {
  static const fs::path d = ffn::test::scratch_dir("io");
  return d;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a header string and a data section.
std::string st_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

// Expects read_safetensors to throw an Error whose message contains `needle` and the path.
void expect_st_error(const std::string& name, const std::string& bytes, const std::string& needle) {
  const fs::path p = temp_dir() / name;
  write_bytes(p, bytes);
  try {
    read_safetensors(p.string());
    ADD_FAILURE() << name << ": no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << name << ": message was: " << m;
    EXPECT_NE(m.find(p.string()), std::string::npos) << name << ": message does not name the file: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
  }
}

}  // namespace

TEST(Npy, RoundTrip) {
  Array a;
  a.shape = {2, 3, 4};
  for (int i = 0; i < 24; ++i) a.data.push_back(float(i) * 0.5f - 3);
  const auto p = (temp_dir() / "a.npy").string();
  write_npy(p, a);
  Array b = read_npy(p);
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.data, a.data);
  // 1-D and 0-D shapes are written as Python tuples: (5,) and ().
  a.shape = {24};
  write_npy(p, a);
  EXPECT_EQ(read_npy(p).shape, a.shape);
  // Data starts at a multiple of 64 bytes (NumPy's own alignment).
  EXPECT_EQ(fs::file_size(p) % 64, (24 * 4) % 64);
}

TEST(Npy, FortranOrderIsConverted) {
  // [[1, 2, 3], [4, 5, 6]] stored column-major: 1 4 2 5 3 6.
  std::string header = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }";
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + char(0) + header + floats({1, 4, 2, 5, 3, 6});
  write_bytes(temp_dir() / "f.npy", bytes);
  Array a = read_npy((temp_dir() / "f.npy").string());
  EXPECT_EQ(a.data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Npy, Malformed) {
  auto expect_error = [](const std::string& name, const std::string& bytes, const std::string& needle) {
    write_bytes(temp_dir() / name, bytes);
    try {
      read_npy((temp_dir() / name).string());
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  auto npy = [](const std::string& dict, const std::string& data) {
    std::string h = dict + "\n";
    return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h + data;
  };
  expect_error("empty.npy", "", "preamble");
  expect_error("magic.npy", "NOTNUMPYAT ALL", "magic");
  expect_error("f8.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')),
               "expected float32");
  expect_error("short.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", floats({1, 2})),
               "truncated");
  // Bytes after the data are ignored, as numpy.load does (tests/python/test_formats.py).
  write_bytes(temp_dir() / "long.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", floats({1, 2})));
  EXPECT_EQ(read_npy((temp_dir() / "long.npy").string()).data, std::vector<float>{1});
  expect_error("extra_key.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", floats({1})),
               "'x'");
  expect_error("not_tuple.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1), }", floats({1})),
               "tuple");
  expect_error("minor.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", floats({1})).replace(7, 1, "\x01"),
               "version 1.1");
  expect_error("huge.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", ""),
               "too large");
  expect_error("overflow.npy",
               npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000, 1000000000), }", ""),
               "overflow");
  expect_error("noshape.npy", npy("{'descr': '<f4', 'fortran_order': False, }", ""), "shape");
  expect_error("hdrlen.npy", std::string("\x93NUMPY\x01\x00\xff\xff", 10) + "{", "header length");
  expect_error("version.npy", std::string("\x93NUMPY\x09\x00\x00\x00", 10), "version");
  EXPECT_THROW(read_npy((temp_dir() / "does_not_exist.npy").string()), Error);
}

TEST(Npy, IntegerLengths) {
  auto npy = [](const std::string& descr, const std::string& data, int n) {
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }\n";
    return std::string("\x93NUMPY\x01\x00", 8) + char(h.size()) + char(0) + h + data;
  };
  int32_t v32[3] = {3, 0, 7};
  int64_t v64[2] = {1, 5};
  write_bytes(temp_dir() / "i4.npy", npy("<i4", std::string(reinterpret_cast<char*>(v32), 12), 3));
  write_bytes(temp_dir() / "i8.npy", npy("<i8", std::string(reinterpret_cast<char*>(v64), 16), 2));
  EXPECT_EQ(read_npy_int((temp_dir() / "i4.npy").string()), (std::vector<int64_t>{3, 0, 7}));
  EXPECT_EQ(read_npy_int((temp_dir() / "i8.npy").string()), (std::vector<int64_t>{1, 5}));
  write_bytes(temp_dir() / "u1.npy", npy("|u1", "abc", 3));
  EXPECT_THROW(read_npy_int((temp_dir() / "u1.npy").string()), Error);
}

TEST(Safetensors, RoundTripWithMetadata) {
  SafetensorsFile f;
  f.tensors["a"] = {{2, 2}, {1, 2, 3, 4}};
  f.tensors["b.c"] = {{3}, {-1, 0.5f, 1e-20f}};
  f.tensors["empty"] = {{0, 4}, {}};
  f.metadata["k"] = "v";
  const auto p = (temp_dir() / "rt.safetensors").string();
  write_safetensors(p, f);
  SafetensorsFile g = read_safetensors(p);
  ASSERT_EQ(g.tensors.size(), 3u);
  EXPECT_EQ(g.tensors["a"].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(g.tensors["a"].data, f.tensors["a"].data);
  EXPECT_EQ(g.tensors["b.c"].data, f.tensors["b.c"].data);
  EXPECT_EQ(g.metadata.at("k"), "v");
  // Header length is a multiple of 8 (data aligned).
  std::ifstream in(p, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, ConvertsHalfAndBfloat16) {
  // 1.0, -2.0, 65504 (max half), a subnormal 2^-24, +inf
  const uint16_t half[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00};
  // bf16: 1.0, -3.0, 1e38-ish (0x7f00), 2^-133 subnormal (0x0001)
  const uint16_t bf[4] = {0x3f80, 0xc040, 0x7f00, 0x0001};
  const double f64[2] = {0.25, -1e10};
  std::string data(reinterpret_cast<const char*>(half), 10);
  data += std::string(reinterpret_cast<const char*>(bf), 8);
  data += std::string(reinterpret_cast<const char*>(f64), 16);
  std::string h = R"({"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]},)"
                  R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[10,18]},)"
                  R"("d":{"dtype":"F64","shape":[2],"data_offsets":[18,34]}})";
  write_bytes(temp_dir() / "conv.safetensors", st_file(h, data));
  auto f = read_safetensors((temp_dir() / "conv.safetensors").string());
  EXPECT_EQ(f.tensors["h"].data[0], 1.0f);
  EXPECT_EQ(f.tensors["h"].data[1], -2.0f);
  EXPECT_EQ(f.tensors["h"].data[2], 65504.0f);
  EXPECT_EQ(f.tensors["h"].data[3], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f.tensors["h"].data[4]));
  EXPECT_EQ(f.tensors["b"].data[0], 1.0f);
  EXPECT_EQ(f.tensors["b"].data[1], -3.0f);
  EXPECT_EQ(f.tensors["b"].data[2], std::ldexp(1.0f, 127));
  EXPECT_EQ(f.tensors["b"].data[3], std::ldexp(1.0f, -133));
  EXPECT_EQ(f.tensors["d"].data[0], 0.25f);
  EXPECT_EQ(f.tensors["d"].data[1], -1e10f);
  // Every half value converts exactly like a hardware conversion would: check
  // all 2^16 against the arithmetic definition.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint32_t e = (b >> 10) & 0x1f, m = b & 0x3ff;
    const float sign = (b & 0x8000) ? -1.0f : 1.0f;
    const float got = io::half_to_float(uint16_t(b));
    if (e == 31) {
      EXPECT_TRUE(m ? std::isnan(got) : std::isinf(got)) << b;
      continue;
    }
    const float want = e == 0 ? sign * std::ldexp(float(m), -24) : sign * std::ldexp(float(m | 0x400), int(e) - 25);
    ASSERT_EQ(got, want) << "half bits " << b;
  }
}

TEST(Safetensors, MalformedFilesAreRefused) {
  const std::string ok_data = floats({1, 2});
  expect_st_error("tiny.safetensors", "abc", "shorter than the 8-byte header length");
  expect_st_error("hugelen.safetensors", le64(1ull << 60) + "{}", "exceeds the 100 MB limit");
  expect_st_error("pastend.safetensors", le64(100) + "{}", "exceeds the file size");
  expect_st_error("json.safetensors", st_file("{not json", ""), "not valid JSON");
  expect_st_error("array.safetensors", st_file("[1,2]", ""), "not a JSON object");
  expect_st_error("dtype.safetensors",
                  st_file(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", ok_data), "unknown dtype 'F17'");
  expect_st_error("negdim.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", ok_data), "negative dimension");
  expect_st_error("hugedim.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", ok_data),
                  "huge dimension");
  expect_st_error("overflow.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", ok_data),
                  "overflows");
  expect_st_error("mismatch.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", ok_data), "needs 12 bytes");
  expect_st_error("beyond.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", ok_data), "past the data section");
  expect_st_error("reversed.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", ok_data), "begin > end");
  expect_st_error("negoff.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", ok_data), "negative data offset");
  expect_st_error("nooffsets.safetensors", st_file(R"({"a":{"dtype":"F32","shape":[2]}})", ok_data), "data_offsets");
  expect_st_error("floatdim.safetensors",
                  st_file(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", ok_data), "non-integer");
  expect_st_error("meta.safetensors", st_file(R"({"__metadata__":{"k":1}})", ""), "not a string");
  expect_st_error("missing.safetensors", "", "shorter than");
  // An integer tensor is refused where floats are needed.
  expect_st_error("int.safetensors",
                  st_file(R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", ok_data), "expected F32");
}

TEST(Safetensors, MissingFile) {
  try {
    read_safetensors((temp_dir() / "nope.safetensors").string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}
