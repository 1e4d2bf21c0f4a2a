// The bf16 compute mode (RunOptions::compute = bf16): every bf16 product
// kernel of every ISA this CPU has against double sums of the same bf16
// operands, on odd sizes and every edge class (partial row tiles, partial
// panels, k steps, strides, accumulate); row results independent of the
// other rows; the layer against its reference exactly on small-integer data
// and within kBf16VsReference on random data; invariance over threads and
// batch composition; accuracy against fp32; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cli_util.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "backends/cpu/quantize.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace ffn {
namespace {

uint16_t bf(float v) { return nn::float_to_bf16(v); }
float fl(uint16_t h) { return nn::bf16_to_float(h); }

class Bf16PerIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << to_string(GetParam()) << " not supported here";
    std::printf("  [%s] bf16 product: %s\n", std::string(to_string(GetParam())).c_str(), kernels().instr);
  }
  const nn::Bf16Kernels& kernels() const { return *nn::kernel_config(nn::resolve_isa(GetParam())).bf16; }
};

// A [m, k] (row stride lda) and B given as PyTorch-layout [n, k], both bf16 bits.
struct Problem {
  int64_t m, n, k, lda, ldc;
  std::vector<uint16_t> a;
  std::vector<float> bt;  // [n, k] float values (bf16-exact)
  std::vector<float> c0;  // initial C [m, ldc]
};

Problem make_problem(int64_t m, int64_t n, int64_t k, int64_t lda_extra, int64_t ldc_extra, uint64_t seed,
                     bool small_integers) {
  Problem p{m, n, k, nn::bf16_kpad(k) + lda_extra, n + ldc_extra, {}, {}, {}};
  std::mt19937 g{uint32_t(seed)};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto value = [&] { return small_integers ? float(int(g() % 17) - 8) : nd(g); };
  p.a.assign(size_t(m * p.lda), 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < k; ++q) p.a[size_t(i * p.lda + q)] = bf(value());
  // Garbage in the stride past kpad (pack_a_bf16 reads k columns only).
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = nn::bf16_kpad(k); q < p.lda; ++q) p.a[size_t(i * p.lda + q)] = bf(1e30f);
  p.bt.resize(size_t(n * k));
  for (float& v : p.bt) v = fl(bf(value()));
  p.c0.resize(size_t(m * p.ldc));
  for (float& v : p.c0) v = small_integers ? float(int(g() % 9) - 4) : nd(g);
  return p;
}

// c = (acc ? c0 : 0) + A·Bᵀ through the kernel, rows [row0, row0 + rows) of
// A packed into the kernel's A layout by pack_a_bf16 (from the rows' float
// values, read with the stride lda: exact, as they are bf16 values).
std::vector<float> run_kernel(const nn::Bf16Kernels& kern, const Problem& p, bool accumulate, int64_t row0 = 0,
                              int64_t rows = -1) {
  if (rows < 0) rows = p.m;
  const auto packed = nn::pack_panels_bf16(p.bt.data(), p.k, p.n);
  const int64_t kpad = nn::bf16_kpad(p.k);
  std::vector<float> af(p.a.size());
  for (size_t i = 0; i < af.size(); ++i) af[i] = fl(p.a[i]);
  std::vector<uint16_t> a(size_t(nn::bf16_a_size(kern, rows, kpad)), 0xffff);
  nn::pack_a_bf16(kern, af.data() + row0 * p.lda, rows, p.k, p.lda, kpad, a.data());
  std::vector<float> c = p.c0;
  nn::Bf16GemmArgs g;
  g.m = rows; g.n = p.n; g.kp = kpad / 2;
  g.a = a.data();
  g.b = packed.data(); g.psb = 32 * g.kp;
  g.c = c.data() + row0 * p.ldc; g.ldc = p.ldc;
  g.accumulate = accumulate;
  kern.gemm(g);
  return c;
}

TEST_P(Bf16PerIsa, ProductWithinFp32SummationBoundOfDoubleSums) {
  int cases = 0;
  for (int64_t m : {1, 2, 3, 11, 12, 13, 16, 17, 31, 32, 33, 50})
    for (int64_t n : {1, 15, 16, 17, 32, 33, 50})
      for (int64_t k : {1, 31, 32, 33, 64, 100, 512})
        for (bool acc : {false, true}) {
          const Problem p = make_problem(m, n, k, (m + n) % 3 * 32, n % 5, uint64_t(m * 10007 + n * 101 + k), false);
          const std::vector<float> c = run_kernel(kernels(), p, acc);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < p.ldc; ++j) {
              const float got = c[size_t(i * p.ldc + j)];
              if (j >= n) {  // past n: untouched
                ASSERT_EQ(got, p.c0[size_t(i * p.ldc + j)]) << "m=" << m << " n=" << n << " k=" << k;
                continue;
              }
              double s = acc ? double(p.c0[size_t(i * p.ldc + j)]) : 0.0, mag = std::fabs(s);
              for (int64_t q = 0; q < k; ++q) {
                const double t = double(fl(p.a[size_t(i * p.lda + q)])) * double(p.bt[size_t(j * k + q)]);
                s += t;
                mag += std::fabs(t);
              }
              const double bound = test::kBf16SumUlps * double(k + 1) * 0x1p-24 * mag + 1e-30;
              ASSERT_LE(std::fabs(double(got) - s), bound)
                  << "m=" << m << " n=" << n << " k=" << k << " acc=" << acc << " at (" << i << ", " << j << ")";
            }
          }
          ++cases;
        }
  EXPECT_EQ(cases, 12 * 7 * 7 * 2);
}

// Small integers: every product and every partial sum is exact in fp32, so
// any kernel must give the double result exactly.
TEST_P(Bf16PerIsa, ProductExactOnSmallIntegers) {
  for (int64_t m : {1, 5, 16, 19, 40})
    for (int64_t n : {3, 16, 47})
      for (int64_t k : {7, 32, 96}) {
        const Problem p = make_problem(m, n, k, 0, 0, uint64_t(m + n + k), true);
        for (bool acc : {false, true}) {
          const std::vector<float> c = run_kernel(kernels(), p, acc);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = acc ? double(p.c0[size_t(i * p.ldc + j)]) : 0.0;
              for (int64_t q = 0; q < k; ++q) s += double(fl(p.a[size_t(i * p.lda + q)])) * p.bt[size_t(j * k + q)];
              ASSERT_EQ(double(c[size_t(i * p.ldc + j)]), s) << "m=" << m << " n=" << n << " k=" << k;
            }
        }
      }
}

// A row's result is the same bits whichever rows share the call (batch
// composition) and wherever in the tile it falls.
TEST_P(Bf16PerIsa, RowResultsIndependentOfTheOtherRows) {
  const Problem p = make_problem(45, 37, 160, 0, 3, 5, false);
  const std::vector<float> all = run_kernel(kernels(), p, true);
  for (int64_t row0 : {0, 1, 7, 15, 16, 29})
    for (int64_t rows : {1, 2, 13, 16}) {
      if (row0 + rows > p.m) continue;
      const std::vector<float> part = run_kernel(kernels(), p, true, row0, rows);
      for (int64_t i = row0; i < row0 + rows; ++i)
        for (int64_t j = 0; j < p.n; ++j)
          ASSERT_EQ(part[size_t(i * p.ldc + j)], all[size_t(i * p.ldc + j)]) << "row " << i << " of [" << row0 << ", +" << rows << ")";
    }
}

// pack_a_bf16 writes the layout gemm.hpp defines for the kernel's a_rows:
// every element rounded as float_to_bf16, the padding zero, nothing past
// bf16_a_size.
TEST_P(Bf16PerIsa, PackAMatchesLayout) {
  const nn::Bf16Kernels& kern = kernels();
  const int64_t R = kern.a_rows;
  for (int64_t m : {1, 15, 16, 17, 33})
    for (int64_t n : {1, 31, 32, 33, 70}) {
      const int64_t k = nn::bf16_kpad(n), lds = n + 3;
      const std::vector<float> src = test::randn(size_t(m * lds), uint64_t(m * 100 + n));
      const int64_t size = nn::bf16_a_size(kern, m, k);
      ASSERT_EQ(size, (m + R - 1) / R * R * k);
      std::vector<uint16_t> dst(size_t(size) + 1, 0x1234);
      nn::pack_a_bf16(kern, src.data(), m, n, lds, k, dst.data());
      for (int64_t i = 0; i < (m + R - 1) / R * R; ++i)
        for (int64_t p = 0; p < k; ++p) {
          const uint16_t got = dst[size_t((i / R) * R * k + (p / 32) * 32 * R + (i % R) * 32 + p % 32)];
          const uint16_t want = i < m && p < n ? bf(src[size_t(i * lds + p)]) : uint16_t(0);
          ASSERT_EQ(got, want) << "m=" << m << " n=" << n << " at (" << i << ", " << p << ")";
        }
      ASSERT_EQ(dst[size_t(size)], 0x1234) << "wrote past bf16_a_size, m=" << m << " n=" << n;
    }
}

TEST_P(Bf16PerIsa, RoundingMatchesDefinition) {
  std::vector<float> v = test::randn(1000, 3);
  v[3] = NAN;
  v[5] = INFINITY;
  v[7] = -INFINITY;
  v[9] = 0.0f;
  v[11] = -0.0f;
  v[13] = 3.0e38f;  // rounds to +Inf in bf16
  v[15] = 1.00390625f;  // 1 + 2^-8: a tie, to even (1.0)
  v[17] = 1.01171875f;  // 1 + 3·2^-8: a tie, to even (1 + 2^-6)
  for (int64_t n : {1, 15, 16, 17, 1000}) {
    std::vector<uint16_t> got(size_t(n) + 1, 0x1234);
    kernels().to_bf16(v.data(), n, got.data());
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t want = nn::float_to_bf16(v[size_t(j)]);
      if (std::isnan(v[size_t(j)])) ASSERT_TRUE(std::isnan(fl(got[size_t(j)])));
      else ASSERT_EQ(got[size_t(j)], want) << "n=" << n << " j=" << j << " v=" << v[size_t(j)];
    }
    ASSERT_EQ(got[size_t(n)], 0x1234) << "wrote past n=" << n;
  }
}

std::vector<float> run(const FeedForward& l, const std::vector<float>& x, Isa isa, Path path = Path::automatic,
                       int threads = 2, Compute compute = Compute::bf16) {
  const int64_t t = int64_t(x.size()) / l.config().d_model;
  std::vector<float> y(x.size());
  RunOptions o;
  o.isa = isa;
  o.path = path;
  o.threads = threads;
  o.compute = compute;
  l.forward(x.data(), y.data(), Shape::tokens(t), o);
  return y;
}

// Small integers through the whole layer (ReLU, no norm): x, W1, b1, W2, b2
// integers small enough that every product, sum and hidden value (≤ 256) is
// exact in bf16 and fp32, so fast path and reference agree to the bit.
TEST_P(Bf16PerIsa, LayerExactOnSmallIntegers) {
  Config cfg;
  cfg.d_model = 37;
  cfg.d_ff = 300;  // chunks 256 + 44: a last chunk that is not a whole k step
  cfg.norm = NormPlacement::none;
  std::mt19937 g(3);
  Weights w = Weights::zeros(cfg);
  auto small = [&](std::vector<float>& v, int range) {
    for (float& e : v) e = float(int(g() % uint32_t(2 * range + 1)) - range);
  };
  small(w.w1, 1), small(w.b1, 2), small(w.w2, 1), small(w.b2, 3);
  const FeedForward layer(cfg, w);
  for (int64_t t : {1, 5, 16, 17, 150, 300}) {
    std::vector<float> x(size_t(t * cfg.d_model));
    small(x, 3);
    const std::vector<float> got = run(layer, x, GetParam());
    const std::vector<float> want = run(layer, x, GetParam(), Path::reference);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "t=" << t << " i=" << i;
  }
}

TEST_P(Bf16PerIsa, LayerMatchesBf16Reference) {
  double worst = 0;
  for (Activation act : {Activation::relu, Activation::gelu, Activation::swiglu})
    for (NormPlacement norm : {NormPlacement::none, NormPlacement::pre, NormPlacement::post})
      for (WeightDtype dtype : {WeightDtype::fp32, WeightDtype::bf16, WeightDtype::fp16}) {
        Config cfg;
        cfg.d_model = 37;
        cfg.d_ff = 301;
        cfg.activation = act;
        cfg.norm = norm;
        const FeedForward layer = FeedForward(cfg, uint64_t(11)).converted(dtype);
        for (int64_t t : {1, 13, 100}) {
          const std::vector<float> x = test::randn(size_t(t * cfg.d_model), uint64_t(t));
          const std::vector<float> got = run(layer, x, GetParam());
          const std::vector<float> want = run(layer, x, GetParam(), Path::reference);
          const Comparison c = compare(got.data(), want.data(), got.size());
          worst = std::max(worst, c.max_error);
          ASSERT_TRUE(c.ok(test::kBf16VsReference)) << to_string(act) << " " << to_string(norm) << " "
                                                    << to_string(dtype) << " t=" << t << ": " << c.describe();
        }
      }
  std::printf("  worst scaled error against the bf16 reference: %.2e (tolerance %.0e)\n", worst,
              test::kBf16VsReference);
}

// Bitwise the same for any thread count and batch composition: the first
// tokens of a batch give the bits they give alone.
TEST_P(Bf16PerIsa, InvariantOverThreadsAndBatchComposition) {
  Config cfg;
  cfg.d_model = 64;
  cfg.d_ff = 512;
  cfg.activation = Activation::swiglu;
  const FeedForward layer(cfg, uint64_t(5));
  const int64_t t = 333;
  const std::vector<float> x = test::randn(size_t(t * cfg.d_model), 9);
  const std::vector<float> y1 = run(layer, x, GetParam(), Path::automatic, 1);
  for (int threads : {2, 3, 7}) {
    const std::vector<float> yt = run(layer, x, GetParam(), Path::automatic, threads);
    ASSERT_EQ(yt, y1) << threads << " threads";
  }
  for (int64_t sub : {1, 5, 17, 144, 200}) {
    const std::vector<float> xs(x.begin() + 3 * cfg.d_model, x.begin() + (3 + sub) * cfg.d_model);
    const std::vector<float> ys = run(layer, xs, GetParam(), Path::automatic, 2);
    for (size_t i = 0; i < ys.size(); ++i) ASSERT_EQ(ys[i], y1[3 * size_t(cfg.d_model) + i]) << sub << " tokens, i=" << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, Bf16PerIsa, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The accuracy of the mode against the fp32 layer, on the paper's layer: the
// FFN output (norm none), ‖y − y₃₂‖/‖y₃₂‖ and cosine over 256 tokens. bf16
// keeps 8 significant bits (relative rounding ≤ 2^-9 = 2e-3 per operand);
// random-sign errors over sums of 512 and 2048 terms average to about that
// size relative to the output. Bound 5e-3 and cosine ≥ 0.9999 (measured
// values printed).
TEST(Bf16Accuracy, AgainstFp32) {
  for (Activation act : {Activation::relu, Activation::gelu, Activation::swiglu}) {
    Config cfg;
    cfg.activation = act;
    cfg.norm = NormPlacement::none;
    const FeedForward layer(cfg, uint64_t(1));
    const std::vector<float> x = test::randn(size_t(256 * cfg.d_model), 2);
    const std::vector<float> y32 = run(layer, x, Isa::automatic, Path::automatic, 2, Compute::fp32);
    const std::vector<float> y16 = run(layer, x, Isa::automatic, Path::automatic, 2, Compute::bf16);
    const Agreement a = agreement(y16.data(), y32.data(), y16.size());
    std::printf("  512 -> 2048 %s: bf16 compute rel RMS %.2e, cosine %.7f\n", std::string(to_string(act)).c_str(),
                a.rel_rms, a.cosine);
    EXPECT_LE(a.rel_rms, 5e-3) << to_string(act);
    EXPECT_GE(a.cosine, 0.9999) << to_string(act);
  }
}

TEST(Bf16Compute, ErrorsNameWhatIsWrong) {
  Config cfg;
  cfg.d_model = 8;
  cfg.d_ff = 16;
  const FeedForward layer(cfg, uint64_t(1));
  std::vector<float> x(16, 0.5f), y(16);
  RunOptions o;
  o.compute = Compute::bf16;
  o.training = true;
  EXPECT_THROW(layer.forward(x.data(), y.data(), Shape::tokens(2), o), Error);
  o.training = false;
  ForwardCache cache;
  EXPECT_THROW(layer.forward(x.data(), y.data(), Shape::tokens(2), o, &cache), Error);
  const FeedForward q = layer.converted(WeightDtype::int8);
  try {
    q.forward(x.data(), y.data(), Shape::tokens(2), o);
    FAIL() << "int8 weights with compute bf16 must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_compute("fp8", "--compute"), Error);
  EXPECT_EQ(parse_compute("bf16"), Compute::bf16);
}

TEST(Bf16Compute, CliRunAndBench) {
  const auto dir = test::scratch_dir("bf16cli");
  ASSERT_EQ(test::run_ffn("init --d-model 16 --d-ff 40 --seed 1 --output " + (dir / "w.safetensors").string(), dir).status, 0);
  {
    Array x;
    x.shape = {5, 16};
    x.data = test::randn(80, 4);
    write_npy((dir / "x.npy").string(), x);
  }
  const std::string base = "run --weights " + (dir / "w.safetensors").string() + " --input " + (dir / "x.npy").string();
  auto r = test::run_ffn(base + " --compute bf16 --output " + (dir / "y16.npy").string(), dir);
  ASSERT_EQ(r.status, 0) << r.err;
  r = test::run_ffn(base + " --output " + (dir / "y32.npy").string(), dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const Array y16 = read_npy((dir / "y16.npy").string()), y32 = read_npy((dir / "y32.npy").string());
  EXPECT_NE(y16.data, y32.data);  // the mode changes the arithmetic
  EXPECT_GE(agreement(y16.data.data(), y32.data.data(), y16.data.size()).cosine, 0.999);
  r = test::run_ffn(base + " --compute fp8 --output " + (dir / "bad.npy").string(), dir);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--compute"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.npy"));
  r = test::run_ffn(base + " --dtype int8 --compute bf16 --output " + (dir / "bad.npy").string(), dir);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--compute bf16"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.npy"));
  r = test::run_ffn("bench --tokens 20 --d-model 16 --d-ff 40 --repeats 1 --warmup 0 --norm none --compute bf16", dir);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bf16 products"), std::string::npos) << r.out;
  r = test::run_ffn("bench --tokens 20 --repeats 1 --compute bf16 --backward", dir);
  EXPECT_EQ(r.status, 2);
}

}  // namespace
}  // namespace ffn
