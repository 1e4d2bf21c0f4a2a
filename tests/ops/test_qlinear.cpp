// The block-quantized linear (src/ops/qlinear.hpp) on every ISA against its
// reference (src/reference/qlinear_reference.hpp, which reads the file's own
// rows): bit for bit, on Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K rows of random bytes
// and scales, row counts around the 16-row groups and 8-row halves, k of 1 to
// 18 blocks of 32 (the K-quants: 1 to 3 blocks of 256),
// 1 to 35 tokens (the kernels' tiles of 4, 2 and AMX's 16, and their
// tails), 1 and 2 threads. Also the repacked rows dequantize as ggml's (ffn::dequantize).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/quantize.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "ops/linear.hpp"
#include "ops/qlinear.hpp"
#include "reference/qlinear_reference.hpp"

using namespace ffn;

namespace {

// The native types, and a row length of each's blocks about k32 (the
// 32-weight types' k32; the K-quants' 256-weight blocks: 256 or more).
const GgmlType kNative[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,
                            GgmlType::q8_0, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};
int64_t row_length(GgmlType t, int64_t k32) {
  const int64_t b = nn::quant_type(t).block;
  return std::max<int64_t>(b, (k32 + b - 1) / b * b);
}

// Where a file block's f16 scale d lies, and its minimum (Q4_1's m, Q4_K's
// dmin; -1: none).
int64_t d_at(GgmlType t) { return t == GgmlType::q6_k ? 208 : 0; }
int64_t m_at(GgmlType t) {
  return t == GgmlType::q4_1 || t == GgmlType::q5_1 || t == GgmlType::q4_k || t == GgmlType::q5_k ? 2 : -1;
}

// A matrix of m rows of k / block file blocks each: random quant bytes
// (K-quants: their 6- and 8-bit sub-block scales too), scales d ∈ ±[0.001,
// 0.05] (and the minimum ∈ ±0.05) as f16.
std::vector<uint8_t> random_rows(GgmlType t, int64_t m, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), sign(-1.0f, 1.0f);
  const nn::QuantType& qt = nn::quant_type(t);
  const int64_t fb = qt.block_bytes, nb = k / qt.block;
  std::vector<uint8_t> v(size_t(m * nb * fb));
  for (int64_t r = 0; r < m * nb; ++r) {
    uint8_t* blk = v.data() + r * fb;
    for (int64_t i = 0; i < fb; ++i) blk[i] = uint8_t(rng());
    const uint16_t d = nn::float_to_fp16(scale(rng) * (sign(rng) < 0 ? -1.0f : 1.0f));
    std::memcpy(blk + d_at(t), &d, 2);
    if (m_at(t) >= 0) {
      const uint16_t mm = nn::float_to_fp16(0.05f * sign(rng));
      std::memcpy(blk + m_at(t), &mm, 2);
    }
  }
  return v;
}

std::vector<const uint8_t*> row_pointers(const std::vector<uint8_t>& v, GgmlType t, int64_t m, int64_t k) {
  std::vector<const uint8_t*> rows;
  for (int64_t r = 0; r < m; ++r) rows.push_back(v.data() + r * nn::quant_type(t).row_bytes(k));
  return rows;
}

class QLinearPerIsa : public ::testing::TestWithParam<Isa> {};

TEST_P(QLinearPerIsa, SameBitsAsTheReference) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << ": not supported by this CPU";
  const nn::KernelConfig& kc = nn::kernel_config(isa);
  std::printf("[ INFO     ] %s: block-quantized product on %s\n", std::string(to_string(isa)).c_str(), kc.qgemm_instr);
  int checked = 0;
  for (GgmlType t : kNative)
    for (int64_t m : {1, 7, 8, 9, 16, 17, 33, 50})
      for (int64_t k32 : {32, 96, 576})
        for (int64_t n : {1, 2, 3, 5, 9, 16, 17, 35}) {
          const int64_t k = row_length(t, k32);
          SCOPED_TRACE("type " + std::to_string(int(t)) + " m " + std::to_string(m) + " k " + std::to_string(k) +
                       " n " + std::to_string(n));
          const auto bytes = random_rows(t, m, k, uint64_t(m * 1000 + k * 10 + n));
          const auto rows = row_pointers(bytes, t, m, k);
          std::mt19937_64 rng(uint64_t(n * 7 + m));
          std::normal_distribution<float> g(0.0f, 1.0f);
          std::vector<float> x(size_t(n * k));
          for (auto& e : x) e = g(rng);
          if (k > 32) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block (dx = 0)
          std::vector<float> want(size_t(n * m)), got(want.size(), -1.0f);
          reference::qlinear_forward(t, rows, k, x.data(), n, want.data());
          const nn::QPanels p = nn::repack_rows(t, rows, k);
          nn::QActs acts;
          for (int threads : {1, 2}) {
            nn::qlinear_forward(nn::Context(isa, threads), p, x.data(), n, got.data(), acts);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << threads << " thread(s)";
          }
          ++checked;
        }
  EXPECT_EQ(checked, 8 * 8 * 3 * 8);
  // Several work units (4 groups × 64 tokens each) on 2 threads: 100 rows ×
  // 70 tokens; 29 rows (the second group's second half partial) × 65 tokens
  // (a unit of one token, the generation path, at token 64); 200 rows × 1
  // token (that path over several group units).
  for (GgmlType t : kNative)
    for (auto [m, n] : {std::pair<int64_t, int64_t>{100, 70}, {29, 65}, {200, 1}, {29, 1}}) {
      const int64_t k = row_length(t, 96);
      const auto bytes = random_rows(t, m, k, 4242);
      const auto rows = row_pointers(bytes, t, m, k);
      std::vector<float> x(size_t(n * k));
      std::mt19937_64 rng(3);
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (auto& e : x) e = g(rng);
      std::vector<float> want(size_t(n * m)), got(want.size());
      reference::qlinear_forward(t, rows, k, x.data(), n, want.data());
      nn::QActs acts;
      nn::qlinear_forward(nn::Context(isa, 2), nn::repack_rows(t, rows, k), x.data(), n, got.data(), acts);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
          << "type " << int(t) << ", several units, m " << m << " n " << n;
    }
}

// A NaN or Inf activation makes its block's products NaN on every ISA (as
// float arithmetic would), and leaves the other tokens' results alone.
TEST_P(QLinearPerIsa, NonFiniteActivationsGiveNaN) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << ": not supported by this CPU";
  for (GgmlType t : kNative) {
    const int64_t m = 19, k = row_length(t, 64), n = 18;  // 16 tokens: AMX's tile
    const auto bytes = random_rows(t, m, k, 7);
    const auto rows = row_pointers(bytes, t, m, k);
    std::vector<float> x(size_t(n * k), 0.25f), y(size_t(n * m)), want(y.size());
    x[size_t(k + 5)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(2 * k + 40)] = std::numeric_limits<float>::infinity();
    const nn::QPanels p = nn::repack_rows(t, rows, k);
    nn::QActs acts;
    nn::qlinear_forward(nn::Context(isa, 2), p, x.data(), n, y.data(), acts);
    reference::qlinear_forward(t, rows, k, x.data(), n, want.data());
    for (int64_t r = 0; r < m; ++r) {
      EXPECT_TRUE(std::isfinite(y[size_t(r)])) << "token 0 is finite";
      EXPECT_TRUE(std::isnan(y[size_t(m + r)]) && std::isnan(y[size_t(2 * m + r)])) << "row " << r;
    }
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), size_t(m) * 4));
    EXPECT_EQ(0, std::memcmp(y.data() + 3 * m, want.data() + 3 * m, size_t((n - 3) * m) * 4)) << "tokens 3..";
    // Subnormal activations (32512 / amax overflows): the block counts as zero, the result is finite.
    std::fill(x.begin(), x.end(), 1e-39f);
    nn::qlinear_forward(nn::Context(isa, 1), p, x.data(), n, y.data(), acts);
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
}

// The integer sums at their bounds: every activation at ±amax (Q = ±32512,
// both planes ±127) against weights at their extremes (Q4 nibbles all 0xF or
// all 0, Q8_0 bytes all -128 or all 127), and planes of alternating sign. These
// reach AVX2's int16 sums (4-bit: 8 · 3810 = 30480; Q8_0: 2 · 128 · 127 per
// pair; Q5: 4 · 7874; Q6_K: two pairs of 2 · 63 · 127), in its tiles of
// several tokens and in its one-token kernels, and VNNI's offset sums
// Σ(q + 128)·Q and Σ q·Q − 32 ΣQ (Q6_K, with scales −128 and 127), which
// Gaussian activations never do (their planes reach ±127 only at a block's
// maximum). 17 and 35 tokens: AMX's tiles and their VNNI tail, AVX2's tiles
// of 4, 2 and 1 tokens; 1 token: the generation kernels.
TEST_P(QLinearPerIsa, IntegerSumsAtTheirBounds) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << ": not supported by this CPU";
  const int64_t m = 17;
  for (GgmlType t : kNative)
    for (uint8_t fill : {uint8_t(0xff), uint8_t(0x00), uint8_t(0x80), uint8_t(0x7f)}) {
      if (t != GgmlType::q8_0 && (fill == 0x80 || fill == 0x7f)) continue;
      const nn::QuantType& qt = nn::quant_type(t);
      const int64_t k = row_length(t, 96), fb = qt.block_bytes, nb = k / qt.block;
      std::vector<uint8_t> bytes(size_t(m * nb * fb), fill);
      for (int64_t r = 0; r < m * nb; ++r) {
        uint8_t* blk = bytes.data() + r * fb;
        const uint16_t d = nn::float_to_fp16(r % 2 ? 0.03125f : -0.0625f), mm = nn::float_to_fp16(0.5f);
        std::memcpy(blk + d_at(t), &d, 2);
        if (m_at(t) >= 0) std::memcpy(blk + m_at(t), &mm, 2);
        if (t == GgmlType::q4_k || t == GgmlType::q5_k) std::memset(blk + 4, 0xff, 12);  // scales, minimums 63
        if (t == GgmlType::q6_k)
          for (int j = 0; j < 16; ++j) blk[192 + j] = j % 2 ? 0x80 : 0x7f;  // scales −128 and 127
      }
      const auto rows = row_pointers(bytes, t, m, k);
      const nn::QPanels p = nn::repack_rows(t, rows, k);
      for (int64_t n : {1, 17, 35}) {
        std::vector<float> x(size_t(n * k));
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < k; ++j)
            // token 0: all +2, token 1: all -2, then values of alternating sign
            x[size_t(i * k + j)] = i == 0 ? 2.0f : i == 1 ? -2.0f : ((j + i) % 2 ? 2.0f : -2.0f);
        std::vector<float> want(size_t(n * m)), got(want.size(), -1.0f);
        reference::qlinear_forward(t, rows, k, x.data(), n, want.data());
        nn::QActs acts;
        for (int threads : {1, 2}) {
          nn::qlinear_forward(nn::Context(isa, threads), p, x.data(), n, got.data(), acts);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4))
              << qt.name << " fill 0x" << std::hex << int(fill) << std::dec << " n " << n << ", " << threads
              << " thread(s)";
        }
        // And the value itself: the product of the dequantized weights (every
        // activation is exactly representable here, so only float rounding differs).
        std::vector<float> w(static_cast<size_t>(k));
        for (int64_t r = 0; r < m; ++r) {
          dequantize(t, rows[size_t(r)], k, w.data());
          double y0 = 0, mag = 0;
          for (float v : w) y0 += 2.0 * v, mag += 2.0 * std::fabs(v);
          EXPECT_NEAR(want[size_t(r)], y0, 1e-5 * mag + 1e-3) << qt.name << " row " << r;
          if (n > 1) {
            EXPECT_NEAR(want[size_t(m + r)], -y0, 1e-5 * mag + 1e-3) << qt.name << " row " << r;
          }
        }
      }
    }
}

// Each ISA's activation quantizer gives the scalar rule's planes, sums and
// scales bit for bit: random blocks, blocks of ties (x · id = j + 0.5),
// ±amax, zeros, subnormal (32512 / amax overflows), NaN and Inf, and huge values.
TEST_P(QLinearPerIsa, ActivationQuantizerSameBits) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << ": not supported by this CPU";
  const nn::KernelConfig& kc = nn::kernel_config(isa);
  const int64_t k = 32 * 9, n = 13;
  std::vector<float> x(size_t(n * k));
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (auto& e : x) e = g(rng);
  float* b1 = x.data() + 32;  // ties: amax 32512 (id = 1), values j + 0.5
  for (int i = 0; i < 32; ++i) b1[i] = float(i * 1000 - 16000) + 0.5f;
  b1[5] = 32512.0f;
  b1[6] = -32512.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);                          // zeros
  std::fill(x.begin() + 96, x.begin() + 128, -1e-39f);                      // subnormal
  x[130] = std::numeric_limits<float>::quiet_NaN();                          // NaN
  x[170] = -std::numeric_limits<float>::infinity();                          // Inf
  std::fill(x.begin() + 192, x.begin() + 224, 3e38f);                         // huge
  x[200] = -3.4e38f;
  for (int i = 0; i < 32; ++i) x[size_t(k + i)] = float(i) * 1e-30f;          // tiny but quantizable
  nn::QActs want, got;
  nn::quantize_acts(x.data(), n, k, want);
  nn::size_acts(n, k, got);
  kc.qacts(x.data(), 0, 6, got);
  kc.qacts(x.data(), 6, n, got);
  EXPECT_EQ(0, std::memcmp(got.hi.data(), want.hi.data(), want.hi.size()));
  EXPECT_EQ(0, std::memcmp(got.lo.data(), want.lo.data(), want.lo.size()));
  EXPECT_EQ(got.sum, want.sum);
  EXPECT_EQ(0, std::memcmp(got.d.data(), want.d.data(), want.d.size() * 4));
  EXPECT_EQ(0, std::memcmp(got.s.data(), want.s.data(), want.s.size() * 4));
  // The planes recompose Q within its range, and the ties went to even.
  for (size_t i = 0; i < want.hi.size(); ++i) {
    const int q = 255 * want.hi[i] + want.lo[i];
    ASSERT_LE(std::abs(q), nn::kQActMax);
    ASSERT_LE(std::abs(int(want.lo[i])), 127);
  }
  EXPECT_EQ(255 * want.hi[32] + want.lo[32], -16000) << "-15999.5 rounds to even";
  EXPECT_EQ(255 * want.hi[33] + want.lo[33], -15000) << "-14999.5 rounds to even";
  EXPECT_TRUE(std::isnan(want.d[4]) && std::isnan(want.s[4]));
  EXPECT_EQ(want.d[3], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Isas, QLinearPerIsa, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The result is close to the float product of the dequantized weights: the
// 16-bit activations' rounding, |Δy| ≤ Σ_b Σ_i |w_i| · dx_b / 2 (dx = amax /
// 32512), plus float32's: each block's term is rounded three times (the
// scale product, float(isum), the fma) and the sum once per block, so
// ≤ (blocks + 3) · 2^-24 · Σ|w x| (first order). The bound is far tighter than
// y's size and than 8-bit activations' error (checked: it would fail them),
// so a wrong scale or plane weight fails it.
TEST(QLinear, CloseToTheDequantizedProduct) {
  double worst_ratio = 0;
  for (GgmlType t : kNative) {
    const int64_t m = 21, k = row_length(t, 192), n = 3;
    const auto bytes = random_rows(t, m, k, 99);
    const auto rows = row_pointers(bytes, t, m, k);
    std::vector<float> x(size_t(n * k));
    std::mt19937_64 rng(5);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& e : x) e = g(rng);
    std::vector<float> y(size_t(n * m));
    reference::qlinear_forward(t, rows, k, x.data(), n, y.data());
    const nn::QPanels p = nn::repack_rows(t, rows, k);
    std::vector<float> w(static_cast<size_t>(k)), w_file(static_cast<size_t>(k)), mins(static_cast<size_t>(k), 0.0f);
    for (int64_t r = 0; r < m; ++r) {
      nn::dequantize_panel_row(p, r, w.data());
      dequantize(t, rows[size_t(r)], k, w_file.data());
      if (t == GgmlType::q4_k || t == GgmlType::q5_k) {  // −dmin · m of each weight: the row with its quants zeroed
        const int64_t fb = nn::quant_type(t).block_bytes;
        std::vector<uint8_t> z(rows[size_t(r)], rows[size_t(r)] + nn::quant_type(t).row_bytes(k));
        for (int64_t b = 0; b < k / 256; ++b) std::memset(z.data() + b * fb + 16, 0, size_t(fb - 16));
        dequantize(t, z.data(), k, mins.data());
      }
      ASSERT_EQ(0, std::memcmp(w.data(), w_file.data(), size_t(k) * 4)) << "row " << r << " dequantized";
      for (int64_t i = 0; i < n; ++i) {
        double exact = 0, bound = 0, bound8 = 0, wx = 0;
        for (int64_t c = 0; c < k; ++c) {
          exact += double(w[size_t(c)]) * double(x[size_t(i * k + c)]);
          // K-quants: the terms d·s·q and dmin·m are each up to |w| + |dmin·m|
          wx += (std::fabs(double(w[size_t(c)])) + 2 * std::fabs(double(mins[size_t(c)]))) *
                std::fabs(double(x[size_t(i * k + c)]));
        }
        for (int64_t b = 0; b < k / 32; ++b) {
          float amax = 0;
          for (int64_t c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(x[size_t(i * k + b * 32 + c)]));
          double wsum = 0;
          for (int64_t c = 0; c < 32; ++c) wsum += std::fabs(w[size_t(b * 32 + c)]);
          bound += wsum * (amax / 32512.0) / 2;
          bound8 += wsum * (amax / 127.0) / 2;
        }
        bound += double((nn::quant_type(t).block > 32 ? 2 : 1) * k / 32 + 3) * 0x1p-24 * wx;
        const double err = std::fabs(double(y[size_t(i * m + r)]) - exact);
        EXPECT_LE(err, 1.01 * bound) << "row " << r;
        worst_ratio = std::max(worst_ratio, err / bound);
        EXPECT_LT(bound, bound8 / 20) << "the bound separates 16-bit from 8-bit activations";
      }
    }
  }
  std::printf("[ INFO     ] worst |error| / bound: %.3f\n", worst_ratio);
}

}  // namespace

namespace {

// A product stacked from parts of different types (a file's Q, K and V):
// each part's rows are its own product's, bit for bit, on every ISA and
// thread count; nn::Linear over the parts gives the same, reads its rows
// back part by part, and counts every part's bytes.
TEST(QLinear, PartsOfDifferentTypesAreEachTheirOwnProduct) {
  const int64_t k = 512, n = 5;
  const std::vector<std::pair<GgmlType, int64_t>> spec = {
      {GgmlType::q4_k, 33}, {GgmlType::q6_k, 16}, {GgmlType::q8_0, 7}, {GgmlType::q4_1, 20}};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<nn::QPanels> parts;
  int64_t m = 0;
  for (const auto& [t, rows] : spec) {
    bytes.push_back(random_rows(t, rows, k, uint64_t(rows)));
    parts.push_back(nn::repack_rows(t, row_pointers(bytes.back(), t, rows, k), k));
    m += rows;
  }
  std::vector<float> x(size_t(n * k));
  std::mt19937_64 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& e : x) e = g(rng);
  std::vector<float> want(size_t(n * m));
  int64_t row0 = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    const auto [t, rows] = spec[i];
    std::vector<float> y(size_t(n * rows));
    reference::qlinear_forward(t, row_pointers(bytes[i], t, rows, k), k, x.data(), n, y.data());
    for (int64_t tok = 0; tok < n; ++tok)
      std::copy_n(y.begin() + tok * rows, rows, want.begin() + tok * m + row0);
    row0 += rows;
  }
  for (Isa isa : all_isas()) {
    if (!isa_supported(isa)) continue;
    for (int threads : {1, 2}) {
      std::vector<float> got(want.size(), -1.0f);
      nn::QActs acts;
      nn::qlinear_forward(nn::Context(isa, threads), parts, x.data(), n, got.data(), acts);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << to_string(isa) << " " << threads;
    }
  }
  size_t bytes_all = 0;
  for (const nn::QPanels& p : parts) bytes_all += p.bytes();
  const nn::Linear lin(parts);
  EXPECT_EQ(lin.m(), m);
  EXPECT_EQ(lin.bytes(), bytes_all);
  std::vector<float> got(want.size());
  lin.forward(nn::Context(Isa::scalar, 1), x.data(), n, got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
  std::vector<float> r(static_cast<size_t>(k)), r_file(static_cast<size_t>(k));
  lin.row(33 + 16 + 3, r.data());  // row 3 of the Q8_0 part
  dequantize(GgmlType::q8_0, row_pointers(bytes[2], GgmlType::q8_0, 7, k)[3], k, r_file.data());
  EXPECT_EQ(0, std::memcmp(r.data(), r_file.data(), size_t(k) * 4));
}

}  // namespace
