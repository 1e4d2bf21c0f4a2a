// Backends as units (issue 45; ggml's tests/test-backend-ops.cpp): every op
// of every kernel set against its reference, on odd sizes.
//
// The kernel sets are kernel_sets(): each built-in set this CPU supports
// (worst first), then the one this file registers, which exists only in this
// test binary: the scalar set plus a product for "T4", a quant type that
// this file also registers (signed 4-bit weights, see below). Neither
// touches a line of the library: they show that a quant type and a kernel
// set plug in through the table (src/core/quant_types.hpp) and the registry
// (src/backends/cpu/kernel_config.hpp), and that the ops reach them only
// through the context.
//
// Op                       checked against                          tolerance
// nn::Linear (fp32, int8,  the ops above on the same weights;       bit for bit
//   blocks; its rows)        W's rows, the type's dequantize
// qlinear (every native    reference::qlinear_forward (the file's   bit for bit (the integer rule)
//   type, T4 included)       own blocks, the type's reference)
// linear fp32 fwd/bwd      the reference path                        kFusedVsReference
// linear int8 (where the   the reference path (the integer rule)     bit for bit
//   set has one)
// fused FFN forward        reference::forward (double sums)          kFusedVsReference
// attention forward        reference::attention_forward              kAttentionForwardVsReference
// activate, sum_rows,      the scalar set's                          bit for bit (both compiled
//   qacts                                                              without contraction)
// exp_rows                 std::exp of the same inputs               1e-6 relative (exp_approx's bound)
// The tolerances are those of tests/tolerances.hpp, justified there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/context.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/qgemm.hpp"
#include "backends/cpu/quantize.hpp"
#include "core/quant_types.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "ffn/quant.hpp"
#include "ffn/random.hpp"
#include "ops/attention.hpp"
#include "reference/attention_reference.hpp"
#include "ops/fused_forward.hpp"
#include "ops/linear.hpp"
#include "ops/qlinear.hpp"
#include "reference/ffn_reference.hpp"
#include "reference/linear_reference.hpp"
#include "reference/qlinear_reference.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

using namespace ffn;

namespace {

// ---- T4, a quant type of this test only ----
// File block (18 bytes): f16 d, then 16 bytes; element j is the low nibble
// of byte j, element j + 16 the high one, each a two's-complement 4-bit
// integer q ∈ −8..7; w = d · q. (Q4_0 reads the same nibbles as q − 8, so a
// kernel that treated T4 as Q4_0 gives other bits.) Panels: Q4_0's layout.
constexpr GgmlType kT4 = GgmlType(nn::kFirstExtensionType + 7);
constexpr int64_t kT4Bytes = 18;

int t4(uint8_t nibble) { return int(nibble & 7) - int(nibble & 8); }

void t4_dequantize(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / 32; ++b, src += kT4Bytes, dst += 32) {
    uint16_t dh;
    std::memcpy(&dh, src, 2);
    const float d = nn::fp16_to_float(dh);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(t4(src[2 + j]));
      dst[16 + j] = d * float(t4(src[2 + j] >> 4));
    }
  }
}
void t4_pack(const uint8_t* blk, int64_t r, uint8_t* out) {
  std::memcpy(out + 256 + 2 * r, blk, 2);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t e = 0; e < 4; ++e) out[i * 64 + 4 * r + e] = blk[2 + 4 * i + e];
}
void t4_unpack(const uint8_t* blk, int64_t lane, float* o) {
  uint16_t dh;
  std::memcpy(&dh, blk + 256 + 2 * lane, 2);
  const float d = nn::fp16_to_float(dh);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t e = 0; e < 4; ++e) {
      const uint8_t byte = blk[i * 64 + 4 * lane + e];
      o[4 * i + e] = d * float(t4(byte));
      o[16 + 4 * i + e] = d * float(t4(byte >> 4));
    }
}
// The rule: isum = Σ q · Q exactly, acc = fma(d · dx, isum, acc).
float t4_reference(const uint8_t* row, int64_t k, const nn::QActs& a, int64_t t) {
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = row + b * kT4Bytes;
    int32_t isum = 0;
    for (int64_t j = 0; j < 32; ++j) {
      const int64_t at = t * k + b * 32 + j;
      const int32_t q = 255 * a.hi[size_t(at)] + a.lo[size_t(at)];
      isum += t4(j < 16 ? blk[2 + j] : blk[2 + j - 16] >> 4) * q;
    }
    uint16_t dh;
    std::memcpy(&dh, blk, 2);
    acc = std::fma(nn::fp16_to_float(dh) * a.d[size_t(t * (k / 32) + b)], float(isum), acc);
  }
  return acc;
}
// Its kernel, from the panels (the test set's only product).
void t4_gemm(const nn::QPanels& w, const nn::QActs& x, int64_t g0, int64_t g1, int64_t t0, int64_t t1, float* y,
             int64_t ldy) {
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t lane = 0; lane < nn::kQRows && g * nn::kQRows + lane < w.m; ++lane)
      for (int64_t t = t0; t < t1; ++t) {
        float acc = 0.0f;
        for (int64_t b = 0; b < w.blocks; ++b) {
          const uint8_t* blk = w.at(g, b);
          int32_t isum = 0;
          for (int64_t i = 0; i < 4; ++i)
            for (int64_t e = 0; e < 4; ++e) {
              const uint8_t byte = blk[i * 64 + 4 * lane + e];
              const int64_t at = t * w.k + b * 32;
              isum += t4(byte) * (255 * x.hi[size_t(at + 4 * i + e)] + x.lo[size_t(at + 4 * i + e)]);
              isum += t4(byte >> 4) * (255 * x.hi[size_t(at + 16 + 4 * i + e)] + x.lo[size_t(at + 16 + 4 * i + e)]);
            }
          uint16_t dh;
          std::memcpy(&dh, blk + 256 + 2 * lane, 2);
          acc = std::fma(nn::fp16_to_float(dh) * x.d[size_t(t * w.blocks + b)], float(isum), acc);
        }
        y[t * ldy + g * nn::kQRows + lane] = acc;
      }
}

const nn::QKernel kTestQ[] = {{kT4, &t4_gemm}};

// The test set: the scalar set with T4's product. Its other quant types
// fall back to the scalar set's kernels (qgemm_kernel).
const nn::KernelConfig& test_set() {
  static const nn::KernelConfig k = [] {
    nn::KernelConfig c = nn::kernel_config(Isa::scalar);
    c.qgemm = kTestQ;
    c.qgemm_instr = "T4 on a portable loop (registered by test_backend_ops.cpp)";
    return c;
  }();
  return k;
}

const bool kRegistered = [] {
  nn::register_quant_type({.id = kT4, .name = "T4", .block = 32, .block_bytes = kT4Bytes,
                           .dequantize = &t4_dequantize,
                           .panels = {.quant_bytes = 256, .scale_bytes = 32, .pack = &t4_pack, .unpack = &t4_unpack},
                           .reference = &t4_reference});
  nn::register_kernel_set(&test_set());
  return true;
}();

std::string set_name(const nn::KernelConfig* kc) {
  return kc == &test_set() ? std::string("test set") : std::string(to_string(kc->isa));
}

std::vector<float> uniform(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

// m rows of k / 32 blocks of type t: random bytes, then a scale d ∈ ±[0.001,
// 0.05] (and a second f16, Q4_1's minimum, in ±0.05) so no value is NaN or huge.
std::vector<uint8_t> random_blocks(const nn::QuantType& qt, int64_t m, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), sign(-1.0f, 1.0f);
  std::vector<uint8_t> v(size_t(m * qt.row_bytes(k)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(rng());
  for (int64_t b = 0; b < m * (k / qt.block); ++b) {
    uint8_t* blk = v.data() + b * qt.block_bytes;
    const uint16_t d = nn::float_to_fp16(scale(rng) * (sign(rng) < 0 ? -1.0f : 1.0f));
    const uint16_t m2 = nn::float_to_fp16(0.05f * sign(rng));
    std::memcpy(blk + (qt.id == GgmlType::q6_k ? 208 : 0), &d, 2);  // Q6_K's d is last
    if (qt.id == GgmlType::q4_1 || qt.id == GgmlType::q5_1 || qt.id == GgmlType::q4_k || qt.id == GgmlType::q5_k)
      std::memcpy(blk + 2, &m2, 2);
  }
  return v;
}

std::vector<nn::QuantType> native_types() {
  std::vector<nn::QuantType> v;
  for (const nn::QuantType* q : nn::quant_types())
    if (q->native()) v.push_back(*q);
  return v;
}

class BackendOps : public ::testing::TestWithParam<const nn::KernelConfig*> {};

TEST_P(BackendOps, QuantizedProductEveryNativeType) {
  ASSERT_TRUE(kRegistered);
  const nn::KernelConfig& kc = *GetParam();
  std::printf("[ INFO     ] %s: quantized products on %s\n", set_name(&kc).c_str(), kc.qgemm_instr);
  int checked = 0;
  for (const nn::QuantType& qt : native_types()) {
    const bool has = nn::qgemm_kernel(kc, qt.id) != nullptr;
    // Only the test set has T4's product; elsewhere it is a clear error.
    EXPECT_EQ(has, qt.id != kT4 || &kc == &test_set()) << qt.name;
    for (int64_t m : {1, 15, 17, 40})
      for (int64_t k32 : {32, 96, 288})
        for (int64_t n : {1, 3, 17, 70})
          for (int threads : {1, 2}) {
            const int64_t k = (k32 + qt.block - 1) / qt.block * qt.block;  // whole blocks (K-quants: 256)
            const std::string what = set_name(&kc) + " " + qt.name + " m=" + std::to_string(m) + " k=" +
                                     std::to_string(k) + " n=" + std::to_string(n) + " threads=" + std::to_string(threads);
            const std::vector<uint8_t> blocks = random_blocks(qt, m, k, uint64_t(m * 131 + k * 7 + n));
            std::vector<const uint8_t*> rows;
            for (int64_t r = 0; r < m; ++r) rows.push_back(blocks.data() + r * qt.row_bytes(k));
            const nn::QPanels p = nn::repack_rows(qt.id, rows, k);
            const std::vector<float> x = uniform(size_t(n * k), uint64_t(n + 3 * k));
            std::vector<float> got(size_t(n * m), -1.0f), want(got.size());
            nn::QActs acts;
            if (!has) {
              try {
                nn::qlinear_forward(nn::Context(kc, threads), p, x.data(), n, got.data(), acts);
                ADD_FAILURE() << what << ": no error without a kernel";
              } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find(std::string("no kernel for type ") + qt.name), std::string::npos)
                    << e.what();
              }
              continue;
            }
            nn::qlinear_forward(nn::Context(kc, threads), p, x.data(), n, got.data(), acts);
            reference::qlinear_forward(qt.id, rows, k, x.data(), n, want.data());
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
            ++checked;
          }
    // The panels give back what the type's dequantize gives (row 5 of 17 rows).
    const int64_t k = (96 + qt.block - 1) / qt.block * qt.block;
    const std::vector<uint8_t> blocks = random_blocks(qt, 17, k, 5);
    std::vector<const uint8_t*> rows;
    for (int64_t r = 0; r < 17; ++r) rows.push_back(blocks.data() + r * qt.row_bytes(k));
    std::vector<float> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
    nn::dequantize_panel_row(nn::repack_rows(qt.id, rows, k), 5, a.data());
    qt.dequantize(rows[5], k, b.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << qt.name << ": panel row 5";
  }
  EXPECT_GT(checked, 0);
}

TEST_P(BackendOps, ActivationQuantizerSameBitsAsScalar) {
  const nn::KernelConfig& kc = *GetParam();
  for (int64_t n : {1, 5, 33})
    for (int64_t k : {32, 160}) {
      std::vector<float> x = uniform(size_t(n * k), uint64_t(n * k), -3.0f, 3.0f);
      x[0] = 0.0f;
      if (n > 1) std::fill(x.begin() + k, x.begin() + k + 32, 0.0f);  // an all-zero block
      nn::QActs got, want;
      nn::size_acts(n, k, got);
      nn::size_acts(n, k, want);
      kc.qacts(x.data(), 0, n, got);
      nn::scalar_kernels().qacts(x.data(), 0, n, want);
      EXPECT_EQ(got.hi, want.hi);
      EXPECT_EQ(got.lo, want.lo);
      EXPECT_EQ(got.sum, want.sum);
      EXPECT_EQ(0, std::memcmp(got.d.data(), want.d.data(), got.d.size() * 4));
      EXPECT_EQ(0, std::memcmp(got.s.data(), want.s.data(), got.s.size() * 4));
    }
}

TEST_P(BackendOps, LinearFp32AndInt8) {
  const nn::KernelConfig& kc = *GetParam();
  for (int64_t n : {1, 13, 37})
    for (int64_t k : {7, 70})
      for (int64_t m : {17, 50}) {
        const std::string what = set_name(&kc) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                 " m=" + std::to_string(m);
        const auto x = uniform(size_t(n * k), 1), w = uniform(size_t(m * k), 2), b = uniform(size_t(m), 3),
                   dy = uniform(size_t(n * m), 4);
        const std::vector<float> packed = nn::pack_linear_weight(w.data(), k, m);
        std::vector<float> y(size_t(n * m)), y_ref(y.size());
        nn::linear_forward(nn::Context(kc, 2), x.data(), n, k, w.data(), packed, b.data(), m, y.data());
        nn::linear_forward(nn::Context(kc, 1, Path::reference), x.data(), n, k, w.data(), packed, b.data(), m,
                           y_ref.data());
        const Comparison cy = compare(y.data(), y_ref.data(), y.size());
        EXPECT_TRUE(cy.ok(test::kFusedVsReference)) << what << " y: " << cy.describe();
        std::vector<float> dx(x.size()), dx_ref(x.size()), dw(w.size()), dw_ref(w.size()), db(b.size()), db_ref(b.size());
        nn::linear_backward(nn::Context(kc, 2), x.data(), n, k, w.data(), m, dy.data(), dx.data(), false, dw.data(),
                            db.data());
        nn::linear_backward(nn::Context(kc, 1, Path::reference), x.data(), n, k, w.data(), m, dy.data(), dx_ref.data(),
                            false, dw_ref.data(), db_ref.data());
        const Comparison cx = compare(dx.data(), dx_ref.data(), dx.size()), cw = compare(dw.data(), dw_ref.data(), dw.size());
        EXPECT_TRUE(cx.ok(test::kFusedVsReference)) << what << " dx: " << cx.describe();
        EXPECT_TRUE(cw.ok(test::kFusedVsReference)) << what << " dw: " << cw.describe();
        if (!nn::int8_linear_supported(kc)) continue;
        const nn::Int8Linear q = nn::quantize_linear(w.data(), k, m, {}, "W");
        std::vector<float> yq(y.size()), yq_ref(y.size());
        nn::linear_forward_int8(nn::Context(kc, 2), q, x.data(), n, b.data(), yq.data());
        nn::linear_forward_int8(nn::Context(kc, 1, Path::reference), q, x.data(), n, b.data(), yq_ref.data());
        EXPECT_EQ(0, std::memcmp(yq.data(), yq_ref.data(), yq.size() * 4)) << what << " int8";
      }
}

// nn::Linear, the one linear layer, on each storage: its products are the
// ops' (bit for bit: the same calls), its rows are W's, and int8 weights
// are used for inference only.
TEST_P(BackendOps, LinearLayerEveryStorage) {
  const nn::KernelConfig& kc = *GetParam();
  const int64_t n = 13, k = 64, m = 37;
  const auto x = uniform(size_t(n * k), 41), w = uniform(size_t(m * k), 42), b = uniform(size_t(m), 43);
  const std::vector<float> packed = nn::pack_linear_weight(w.data(), k, m);
  for (const Path path : {Path::automatic, Path::reference}) {
    const nn::Context ctx(kc, 2, path);
    const std::string what = set_name(&kc) + (path == Path::reference ? " reference" : "");
    // fp32, with a bias
    const nn::Linear fp32(w.data(), k, m, b.data());
    std::vector<float> got(size_t(n * m)), want(got.size());
    fp32.forward(ctx, x.data(), n, got.data());
    nn::linear_forward(ctx, x.data(), n, k, w.data(), packed, b.data(), m, want.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << what << " fp32";
    std::vector<float> r(static_cast<size_t>(k));
    for (int64_t row : {int64_t(0), int64_t(15), int64_t(16), m - 1}) {
      fp32.row(row, r.data());
      EXPECT_EQ(0, std::memcmp(r.data(), w.data() + row * k, size_t(k) * 4)) << what << " fp32 row " << row;
    }
    // int8 beside fp32: inference on int8 where the set has the product (or on the reference), training on fp32
    nn::Linear q8(w.data(), k, m, b.data());
    auto q = std::make_shared<const nn::Int8Linear>(nn::quantize_linear(w.data(), k, m, {}, "W"));
    q8.set_int8(q);
    q8.forward(ctx, x.data(), n, got.data());
    if (path == Path::reference || nn::int8_linear_supported(kc))
      nn::linear_forward_int8(ctx, *q, x.data(), n, b.data(), want.data());
    else
      nn::linear_forward(ctx, x.data(), n, k, w.data(), packed, b.data(), m, want.data());
    if (path == Path::reference)  // the integer reference itself
      reference::linear_forward_int8(x.data(), n, k, q->q.data(), q->scale.data(), nullptr, 0, nullptr, b.data(), m,
                                     want.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << what << " int8";
    q8.forward(ctx, x.data(), n, got.data(), {.training = true});
    nn::linear_forward(ctx, x.data(), n, k, w.data(), packed, b.data(), m, want.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << what << " int8 layer, training: fp32";
    // bf16 and fp16 storage: the fp32 layer's bits on the widened W
    for (const WeightDtype dt : {WeightDtype::bf16, WeightDtype::fp16}) {
      const nn::Linear h = nn::Linear::rounded(w.data(), k, m, dt, b.data());
      EXPECT_EQ(dt, h.storage());
      std::vector<float> wide(w.size());
      for (int64_t row = 0; row < m; ++row) h.row(row, wide.data() + row * k);
      for (size_t i = 0; i < w.size(); ++i) {
        const float v = dt == WeightDtype::bf16 ? nn::bf16_to_float(nn::float_to_bf16(w[i]))
                                                : nn::fp16_to_float(nn::float_to_fp16(w[i]));
        ASSERT_EQ(v, wide[i]) << what << " " << to_string(dt) << " row element " << i;
      }
      EXPECT_EQ(size_t(nn::panels(m) * k * 16 * 2 + m * 4), h.bytes());
      // by column panels and by rows (2 threads), and a row block of 1
      for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{n, m}, {70, 300}, {400, 40}, {1, 37}}) {
        const auto xx = uniform(size_t(rows * k), 45);
        const auto ww = uniform(size_t(cols * k), 46), bb = uniform(size_t(cols), 47);
        const nn::Linear hh = nn::Linear::rounded(ww.data(), k, cols, dt, bb.data());
        std::vector<float> wwide(ww.size());
        for (int64_t row = 0; row < cols; ++row) hh.row(row, wwide.data() + row * k);
        const nn::Linear f32(wwide.data(), k, cols, bb.data());
        std::vector<float> g(size_t(rows * cols)), e(g.size());
        hh.forward(ctx, xx.data(), rows, g.data());
        f32.forward(nn::Context(kc, 1, path), xx.data(), rows, e.data());
        EXPECT_EQ(0, std::memcmp(g.data(), e.data(), g.size() * 4))
            << what << " " << to_string(dt) << " " << rows << "x" << cols;
      }
    }
    // blocks (Q8_0 rows)
    const nn::QuantType& qt = nn::quant_type(GgmlType::q8_0);
    const std::vector<uint8_t> blocks = random_blocks(qt, m, k, 44);
    std::vector<const uint8_t*> rows;
    for (int64_t i = 0; i < m; ++i) rows.push_back(blocks.data() + i * qt.row_bytes(k));
    const nn::Linear lq(nn::repack_rows(qt.id, rows, k));
    EXPECT_TRUE(lq.blocks());
    lq.forward(ctx, x.data(), n, got.data());
    reference::qlinear_forward(qt.id, rows, k, x.data(), n, want.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << what << " blocks";
    lq.row(20, r.data());
    std::vector<float> deq(static_cast<size_t>(k));
    qt.dequantize(rows[20], k, deq.data());
    EXPECT_EQ(0, std::memcmp(r.data(), deq.data(), size_t(k) * 4)) << what << " blocks row 20";
  }
  // 16-bit storage is bf16 or fp16; int8 weights go beside fp32 only.
  const std::vector<uint16_t> h16(32, 0);
  EXPECT_THROW(nn::Linear(h16.data(), 8, 4, WeightDtype::int8), Error);
  EXPECT_THROW(nn::Linear::rounded(uniform(32, 1).data(), 8, 4, WeightDtype::int8), Error);
  nn::Linear half = nn::Linear::rounded(uniform(32, 1).data(), 8, 4, WeightDtype::bf16);
  EXPECT_THROW(half.set_int8(std::make_shared<const nn::Int8Linear>(
                   nn::quantize_linear(uniform(size_t(4 * 8), 1).data(), 8, 4, {}, "W"))),
               Error);
  // int8 weights on a layer of blocks, or of another shape, are refused.
  nn::Linear small(uniform(size_t(4 * 8), 1).data(), 8, 4);
  EXPECT_THROW(small.set_int8(std::make_shared<const nn::Int8Linear>(
                   nn::quantize_linear(uniform(size_t(5 * 8), 1).data(), 8, 5, {}, "W"))),
               Error);
}

TEST_P(BackendOps, FusedForward) {
  const nn::KernelConfig& kc = *GetParam();
  for (Activation act : {Activation::relu, Activation::gelu, Activation::swiglu})
    for (NormPlacement norm : {NormPlacement::pre, NormPlacement::post})
      for (int64_t n : {1, 19}) {
        Config cfg;
        cfg.d_model = 37;
        cfg.d_ff = 70;
        cfg.activation = act;
        cfg.norm = norm;
        cfg.norm_type = act == Activation::swiglu ? NormType::rmsnorm : NormType::layernorm;
        cfg.bias = act != Activation::swiglu;
        Weights w = Weights::zeros(cfg);
        uint64_t id = 0;
        for (std::vector<float>* t : w.all()) fill_uniform(t->data(), t->size(), 0.3f, 11, ++id);
        for (float& g : w.norm_weight) g += 1.0f;
        const std::vector<float> x = uniform(size_t(n * cfg.d_model), 9);
        std::vector<int64_t> pos(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = i;
        const auto packed = nn::PackedWeights::make(cfg, w);
        std::vector<float> y(x.size()), y_ref(x.size());
        nn::fused_forward(nn::Context(kc, 2), cfg, w, *packed, x.data(), n, pos.data(), false, 0, y.data(), nullptr);
        reference::Params<float> p{w.w1.data(), w.b1.empty() ? nullptr : w.b1.data(),
                                   w.wg.empty() ? nullptr : w.wg.data(), w.bg.empty() ? nullptr : w.bg.data(),
                                   w.w2.data(), w.b2.empty() ? nullptr : w.b2.data(), w.norm_weight.data(),
                                   w.norm_bias.empty() ? nullptr : w.norm_bias.data()};
        reference::forward<float>(cfg, p, x.data(), n, pos.data(), {}, y_ref.data(), nullptr);
        const Comparison c = compare(y.data(), y_ref.data(), y.size());
        EXPECT_TRUE(c.ok(test::kFusedVsReference))
            << set_name(&kc) << " " << to_string(act) << " n=" << n << ": " << c.describe();
      }
}

TEST_P(BackendOps, AttentionForward) {
  const nn::KernelConfig& kc = *GetParam();
  for (bool causal : {false, true})
    for (int64_t kv_heads : {0, 1}) {
      nn::AttentionShape a;
      a.d = 24;
      a.heads = 3;
      a.kv_heads = kv_heads;
      a.S = 300;
      a.off = {0, 7, 300 + 7};  // two sequences: 7 and 300 rows (past a 256-key tile)
      a.causal = causal;
      const int64_t rows = a.rows();
      const std::vector<float> qkv = uniform(size_t(rows * 3 * a.d), 21);
      std::vector<float> got(size_t(rows * a.d)), want(got.size()), lse(size_t(rows * a.heads)), lse_ref(lse.size());
      if (kv_heads == 0) {
        nn::attention_forward(nn::Context(kc, 2), a, qkv.data(), got.data(), lse.data());
        reference::attention_forward(a, qkv.data(), want.data(), lse_ref.data());
      } else {  // GQA: Q [rows, d], K and V [rows, d / heads]
        const int64_t dk = a.d / a.heads;
        const nn::AttentionInput<float> in{qkv.data(), qkv.data() + a.d, qkv.data() + a.d + dk, 3 * a.d, 3 * a.d};
        nn::attention_forward(nn::Context(kc, 2), a, in, got.data(), lse.data());
        reference::attention_forward(a, in, want.data(), lse_ref.data());
      }
      const Comparison c = compare(got.data(), want.data(), got.size());
      EXPECT_TRUE(c.ok(test::kAttentionForwardVsReference))
          << set_name(&kc) << (causal ? " causal" : "") << " kv_heads=" << kv_heads << ": " << c.describe();
    }
}

// Today's LLM settings (inference): a sliding window (within a key tile,
// across tile edges, of 1 key, longer than the sequence), the logit soft-cap
// and a query scale, against the reference, with grouped-query heads; keys
// outside a query's window do not move its result by a bit, and a window
// longer than every sequence is no window, bit for bit.
TEST_P(BackendOps, AttentionForwardWindowSoftcapScale) {
  const nn::KernelConfig& kc = *GetParam();
  nn::AttentionShape a;
  a.d = 24;
  a.heads = 4;
  a.kv_heads = 2;
  a.S = 600;
  a.off = {0, 7, 7 + 300, 7 + 300 + 600};
  a.causal = true;
  const int64_t rows = a.rows(), dk = a.d / a.heads * a.kv_heads, width = a.d + 2 * dk;
  const std::vector<float> qkv = uniform(size_t(rows * width), 23, -2.0f, 2.0f);
  const nn::AttentionInput<float> in{qkv.data(), qkv.data() + a.d, qkv.data() + a.d + dk, width, width};
  auto run = [&](const nn::AttentionShape& s, const nn::AttentionInput<float>& i) {
    std::vector<float> out(size_t(rows * a.d)), lse(size_t(rows * a.heads));
    nn::attention_forward(nn::Context(kc, 2), s, i, out.data(), lse.data());
    return out;
  };
  const std::vector<float> plain = run(a, in);
  for (int64_t window : {0, 1, 5, 200, 257, 1000})
    for (float softcap : {0.0f, 3.0f})
      for (float scale : {0.0f, 0.3f}) {
        nn::AttentionShape w = a;
        w.window = window, w.softcap = softcap, w.scale = scale;
        const std::vector<float> got = run(w, in);
        std::vector<float> want(got.size()), lse_ref(size_t(rows * a.heads));
        reference::attention_forward(w, in, want.data(), lse_ref.data());
        const Comparison c = compare(got.data(), want.data(), got.size());
        EXPECT_TRUE(c.ok(test::kAttentionForwardVsReference))
            << set_name(&kc) << " window=" << window << " softcap=" << softcap << " scale=" << scale << ": "
            << c.describe();
        if ((window == 0 || window == 1000) && softcap == 0 && scale == 0) {
          EXPECT_EQ(0, std::memcmp(got.data(), plain.data(), got.size() * 4)) << set_name(&kc) << " window=" << window;
        }
      }
  // Keys before a query's window: the last query of each sequence with a
  // 5-key window sees its last 5 keys; the earlier rows' K and V changed.
  nn::AttentionShape w = a;
  w.window = 5;
  std::vector<float> moved = qkv;
  for (size_t b = 0; b + 1 < a.off.size(); ++b)
    for (int64_t r = a.off[b]; r < a.off[b + 1] - 5; ++r)
      for (int64_t c = a.d; c < width; ++c) moved[size_t(r * width + c)] += 1.0f;
  const nn::AttentionInput<float> in2{moved.data(), moved.data() + a.d, moved.data() + a.d + dk, width, width};
  const std::vector<float> x = run(w, in), y = run(w, in2);
  for (size_t b = 0; b + 1 < a.off.size(); ++b) {
    const int64_t last = a.off[b + 1] - 1;
    EXPECT_EQ(0, std::memcmp(x.data() + last * a.d, y.data() + last * a.d, size_t(a.d) * 4))
        << set_name(&kc) << " sequence " << b << ": keys outside the window moved the result";
  }
  const std::vector<float> x0 = run(a, in), y0 = run(a, in2);  // without the window the change shows
  EXPECT_NE(0, std::memcmp(x0.data() + (rows - 1) * a.d, y0.data() + (rows - 1) * a.d, size_t(a.d) * 4));
}

// MPNet's relative position bias (inference): each head's table of key
// offsets added to the scaled scores, on sequences of odd lengths across the
// 256-key tiles (1, 37, 300), self-attention and causal, with and without a
// soft-cap, against the reference; a zero table is no bias, bit for bit, and
// a sequence longer than the table's span is refused.
TEST_P(BackendOps, AttentionForwardRelativeBias) {
  const nn::KernelConfig& kc = *GetParam();
  nn::AttentionShape a;
  a.d = 30;
  a.heads = 3;
  a.S = 300;
  a.off = {0, 1, 1 + 37, 1 + 37 + 300};
  const int64_t rows = a.rows(), span = 301;
  const std::vector<float> qkv = uniform(size_t(rows * 3 * a.d), 31, -2.0f, 2.0f);
  const std::vector<float> table = uniform(size_t(a.heads * (2 * span - 1)), 32, -3.0f, 3.0f);
  const std::vector<float> zeros(table.size(), 0.0f);
  auto run = [&](const nn::AttentionShape& s) {
    std::vector<float> out(size_t(rows * a.d)), lse(size_t(rows * a.heads));
    nn::attention_forward(nn::Context(kc, 2), s, qkv.data(), out.data(), lse.data());
    return out;
  };
  for (bool causal : {false, true})
    for (float softcap : {0.0f, 4.0f}) {
      nn::AttentionShape w = a;
      w.causal = causal, w.softcap = softcap, w.rel_bias = table.data(), w.rel_span = span;
      const std::vector<float> got = run(w);
      std::vector<float> want(got.size()), lse_ref(size_t(rows * a.heads));
      reference::attention_forward(w, nn::AttentionInput<float>::packed(qkv.data(), a.d), want.data(), lse_ref.data());
      const Comparison c = compare(got.data(), want.data(), got.size());
      EXPECT_TRUE(c.ok(test::kAttentionForwardVsReference))
          << set_name(&kc) << " causal=" << causal << " softcap=" << softcap << ": " << c.describe();
      nn::AttentionShape none = w;
      none.rel_bias = nullptr;
      const std::vector<float> without = run(none);
      EXPECT_NE(0, std::memcmp(got.data(), without.data(), got.size() * 4)) << "the bias changed nothing";
      if (softcap == 0) {  // s·scale + 0 in one step is s·scale: the same bits as no bias
        nn::AttentionShape z = w;
        z.rel_bias = zeros.data();
        const std::vector<float> zero = run(z);
        EXPECT_EQ(0, std::memcmp(zero.data(), without.data(), got.size() * 4)) << set_name(&kc) << " causal=" << causal;
      }
    }
  nn::AttentionShape short_span = a;
  short_span.rel_bias = table.data();
  short_span.rel_span = 299;
  std::vector<float> out(size_t(rows * a.d)), lse(size_t(rows * a.heads));
  test::expect_error([&] { nn::attention_forward(nn::Context(kc, 2), short_span, qkv.data(), out.data(), lse.data()); },
                     "sequence 2 has 300 keys, past the relative position bias's span of 299");
}

// ModernBERT's local layers: non-causal attention where each query sees the
// keys within `local` positions of its own. The fast op against the
// reference on odd lengths (one key tile and several, windows narrower and
// wider than a tile); the reference against a direct masked softmax; a window
// wider than every sequence is plain attention, bit for bit.
TEST_P(BackendOps, AttentionForwardLocalWindow) {
  const nn::KernelConfig& kc = *GetParam();
  nn::AttentionShape a;
  a.d = 30;
  a.heads = 3;
  a.S = 600;
  a.off = {0, 1, 1 + 37, 1 + 37 + 600, 1 + 37 + 600 + 5};
  const int64_t rows = a.rows(), dh = a.d / a.heads;
  const std::vector<float> qkv = uniform(size_t(rows * 3 * a.d), 41, -2.0f, 2.0f);
  auto run = [&](const nn::AttentionShape& s) {
    std::vector<float> out(size_t(rows * a.d)), lse(size_t(rows * a.heads));
    nn::attention_forward(nn::Context(kc, 2), s, qkv.data(), out.data(), lse.data());
    return out;
  };
  const std::vector<float> plain = run(a);
  for (int64_t local : {1, 3, 64, 200, 1000}) {
    nn::AttentionShape w = a;
    w.local = local;
    const std::vector<float> got = run(w);
    std::vector<float> want(got.size()), lse_ref(size_t(rows * a.heads));
    reference::attention_forward(w, nn::AttentionInput<float>::packed(qkv.data(), a.d), want.data(), lse_ref.data());
    const Comparison c = compare(got.data(), want.data(), got.size());
    EXPECT_TRUE(c.ok(test::kAttentionForwardVsReference)) << set_name(&kc) << " local=" << local << ": " << c.describe();
    if (local >= 600) EXPECT_EQ(0, std::memcmp(got.data(), plain.data(), got.size() * 4)) << "local=" << local;
    else EXPECT_NE(0, std::memcmp(got.data(), plain.data(), got.size() * 4)) << "the window changed nothing";
    // The reference's window, directly: row 300 of the long sequence, head 1.
    if (&kc != &nn::scalar_kernels()) continue;
    const int64_t base = 38, s0 = 300, h = 1, i = base + s0;
    std::vector<double> p, o(size_t(dh), 0.0);
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < 600; ++j) {
      if (std::abs(j - s0) > local) continue;
      double dot = 0;
      for (int64_t e = 0; e < dh; ++e) dot += double(qkv[size_t(i * 90 + h * dh + e)]) * qkv[size_t((base + j) * 90 + 30 + h * dh + e)];
      p.push_back(dot / std::sqrt(double(dh)));
      mx = std::max(mx, p.back());
    }
    int64_t k = 0;
    for (int64_t j = 0; j < 600; ++j) {
      if (std::abs(j - s0) > local) continue;
      const double e = std::exp(p[size_t(k++)] - mx);
      sum += e;
      for (int64_t c2 = 0; c2 < dh; ++c2) o[size_t(c2)] += e * qkv[size_t((base + j) * 90 + 60 + h * dh + c2)];
    }
    for (int64_t c2 = 0; c2 < dh; ++c2)
      EXPECT_NEAR(o[size_t(c2)] / sum, want[size_t(i * a.d + h * dh + c2)], 1e-5) << "local=" << local << " column " << c2;
  }
  nn::AttentionShape bad = a;
  bad.local = 4;
  bad.causal = true;
  std::vector<float> out(size_t(rows * a.d)), lse(size_t(rows * a.heads));
  test::expect_error([&] { nn::attention_forward(nn::Context(kc, 2), bad, qkv.data(), out.data(), lse.data()); },
                     "a local window (local) is for non-causal attention");
}

TEST_P(BackendOps, ElementwiseKernelsSameBitsAsScalar) {
  const nn::KernelConfig& kc = *GetParam();
  const nn::KernelConfig& sc = nn::scalar_kernels();
  for (int64_t n : {1, 7, 16, 45, 130}) {
    const std::vector<float> z0 = uniform(size_t(n), 31, -6.0f, 6.0f), g = uniform(size_t(n), 32, -6.0f, 6.0f),
                             bz = uniform(size_t(n), 33), bg = uniform(size_t(n), 34), c = uniform(size_t(n), 35);
    for (nn::Unit u : {nn::Unit::relu, nn::Unit::gelu, nn::Unit::gelu_tanh, nn::Unit::silu})
      for (bool gated : {false, true}) {
        std::vector<float> a = z0, b = z0;
        kc.activate(u, a.data(), gated ? g.data() : nullptr, n, bz.data(), gated ? bg.data() : nullptr);
        sc.activate(u, b.data(), gated ? g.data() : nullptr, n, bz.data(), gated ? bg.data() : nullptr);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), size_t(n) * 4))
            << set_name(&kc) << " activate unit " << int(u) << (gated ? " gated" : "") << " n=" << n;
      }
    std::vector<float> s1(static_cast<size_t>(n)), s2(static_cast<size_t>(n));
    kc.sum_rows(s1.data(), z0.data(), g.data(), c.data(), n);
    sc.sum_rows(s2.data(), z0.data(), g.data(), c.data(), n);
    EXPECT_EQ(0, std::memcmp(s1.data(), s2.data(), size_t(n) * 4)) << set_name(&kc) << " sum_rows n=" << n;
    std::vector<float> p(static_cast<size_t>(n));
    const float sum = kc.exp_rows(z0.data(), n, 0.5f, 1.0f, p.data());
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp(double(z0[size_t(i)]) * 0.5 - 1.0);
      want_sum += e;
      EXPECT_NEAR(p[size_t(i)], e, 1e-6 * e) << set_name(&kc) << " exp_rows i=" << i;
    }
    EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum) << set_name(&kc) << " exp_rows sum";
  }
}

INSTANTIATE_TEST_SUITE_P(Sets, BackendOps, ::testing::ValuesIn((void(kRegistered), nn::kernel_sets())),
                         [](const ::testing::TestParamInfo<const nn::KernelConfig*>& i) {
                           std::string s = set_name(i.param);
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// The built-in sets this CPU cannot run are said, not silently left out.
TEST(BackendOpsSets, TheSetsThisCpuCannotRun) {
  std::string missing;
  for (Isa i : all_isas())
    if (!isa_supported(i)) missing += (missing.empty() ? "" : ", ") + std::string(to_string(i));
  if (!missing.empty()) GTEST_SKIP() << "kernel sets not run, not supported by this CPU: " << missing;
}

// The table itself: ggml's numbers in order, each once; the facts of the
// types ffn reads are ggml's (ggml.h / ggml-common.h block structs).
TEST(QuantTypes, TableHoldsGgmlsFacts) {
  uint32_t last = 0;
  bool first = true;
  for (const nn::QuantType& q : nn::kQuantTypes) {
    if (!first) {
      EXPECT_GT(uint32_t(q.id), last) << q.name;
    }
    first = false;
    last = uint32_t(q.id);
    EXPECT_EQ(ggml_type_name(uint32_t(q.id)), q.name);
    EXPECT_EQ(nn::find_quant_type(uint32_t(q.id)), &q);
    if (q.native()) {
      EXPECT_TRUE(q.readable() && q.reference && q.panels.unpack) << q.name;
      EXPECT_EQ(q.block % nn::kQBlock, 0) << q.name;
    }
  }
  struct Fact {
    GgmlType t;
    int64_t block, bytes;
  };
  for (const Fact& f : {Fact{GgmlType::f32, 1, 4}, Fact{GgmlType::f16, 1, 2}, Fact{GgmlType::bf16, 1, 2},
                        Fact{GgmlType::q4_0, 32, 18}, Fact{GgmlType::q4_1, 32, 20}, Fact{GgmlType::q8_0, 32, 34},
                        Fact{GgmlType::q4_k, 256, 144}, Fact{GgmlType::q6_k, 256, 210}, Fact{GgmlType::q5_0, 32, 22},
                        Fact{GgmlType::q5_1, 32, 24}, Fact{GgmlType::q2_k, 256, 84}, Fact{GgmlType::q3_k, 256, 110},
                        Fact{GgmlType::q5_k, 256, 176}, Fact{GgmlType::iq4_nl, 32, 18},
                        Fact{GgmlType::iq4_xs, 256, 136}}) {
    int64_t e = 0, b = 0;
    EXPECT_TRUE(ggml_block(uint32_t(f.t), e, b)) << ggml_type_name(uint32_t(f.t));
    EXPECT_EQ(e, f.block) << ggml_type_name(uint32_t(f.t));
    EXPECT_EQ(b, f.bytes) << ggml_type_name(uint32_t(f.t));
  }
  int64_t e = 0, b = 0;
  EXPECT_FALSE(ggml_block(uint32_t(GgmlType::q8_k), e, b));  // named, not read
  EXPECT_EQ(ggml_type_name(15), "Q8_K");
  EXPECT_EQ(ggml_type_name(31), "unknown (31)");
  EXPECT_EQ(nn::find_quant_type(31), nullptr);
}

// The quant table owns every type fact (issue 63): a registered toy type
// appears in every list made from the table: the readable and native names
// (the CLI's --compute help, the Python binding's CausalLM.load doc) and the
// GGUF reader's message for a type it does not read.
TEST(QuantTypes, AToyTypeIsInEveryListMadeFromTheTable) {
  ASSERT_TRUE(kRegistered);
  const std::string readable = quant_type_names(QuantSet::readable), native = quant_type_names(QuantSet::native, "/");
  EXPECT_NE(readable.find(", T4"), std::string::npos) << readable;
  EXPECT_NE(native.find("/T4"), std::string::npos) << native;
  EXPECT_NE(native.find("Q4_K/Q5_K/Q6_K"), std::string::npos) << native;
  EXPECT_EQ(native.find("Q2_K"), std::string::npos) << native;  // read, dequantized: not native
  // A GGUF whose one tensor is IQ2_XXS (16): refused, listing what is read.
  const std::string path = ::testing::TempDir() + "toy_type.gguf";
  {
    std::string b = "GGUF";
    auto put = [&b](auto v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(uint32_t(3)), put(uint64_t(1)), put(uint64_t(0));  // version, tensors, metadata keys
    put(uint64_t(1)), b += "w", put(uint32_t(1)), put(uint64_t(256)), put(uint32_t(16)), put(uint64_t(0));
    b.append(64, '\0');
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_TRUE(f);
    std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
  }
  try {
    GgufFile g(path);
    ADD_FAILURE() << "an IQ2_XXS tensor was read";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("type IQ2_XXS, which this reader does not dequantize (" + readable + ")"), std::string::npos) << m;
  }
  std::remove(path.c_str());
}

TEST(QuantTypes, RegistrationIsChecked) {
  ASSERT_TRUE(kRegistered);
  EXPECT_EQ(ggml_type_name(uint32_t(kT4)), "T4");
  auto refused = [](const nn::QuantType& row, const char* why) {
    try {
      nn::register_quant_type(row);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused({.id = GgmlType(6), .name = "X", .block = 32, .block_bytes = 18, .dequantize = &t4_dequantize}, "is ggml's");
  refused({.id = kT4, .name = "X", .block = 32, .block_bytes = 18, .dequantize = &t4_dequantize}, "is taken by T4");
  refused({.id = GgmlType(5000), .name = "X", .block = 32}, "needs its block, bytes per block and dequantize");
  refused({.id = GgmlType(5001), .name = "X", .block = 32, .block_bytes = 18, .dequantize = &t4_dequantize,
           .panels = {.quant_bytes = 256, .scale_bytes = 32, .pack = &t4_pack}},
          "a native row needs");
  // Dequantizing through the public call reaches the registered row.
  std::vector<uint8_t> blk(kT4Bytes, 0);
  const uint16_t one = nn::float_to_fp16(1.0f);
  std::memcpy(blk.data(), &one, 2);
  blk[2] = 0x9f;  // element 0: 0xf = −1; element 16: 0x9 = −7
  std::vector<float> out(32);
  dequantize(kT4, blk.data(), 32, out.data());
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[16], -7.0f);
  EXPECT_EQ(out[1], 0.0f);
}

}  // namespace
