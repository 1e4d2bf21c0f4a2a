// Philox4x32-10 against the known-answer vectors of Random123 (kat_vectors),
// and the dropout rule's statistics.
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.hpp"

using namespace ffn::nn;

TEST(Philox, KnownAnswers) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, StreamsAndSeedsDiffer) {
  EXPECT_NE(random_bits(1, Stream::dropout_hidden, 5), random_bits(1, Stream::dropout_output, 5));
  EXPECT_NE(random_bits(1, Stream::dropout_hidden, 5), random_bits(2, Stream::dropout_hidden, 5));
  EXPECT_EQ(random_bits(1, Stream::dropout_hidden, 5), random_bits(1, Stream::dropout_hidden, 5));
}

// The fraction dropped over n elements is Binomial(n, p)/n: within 5 standard
// deviations (sqrt(p(1-p)/n)) of p; a rule that ignored p, or used the wrong
// comparison, misses by far more.
TEST(Dropout, FractionWithinStatisticalBounds) {
  const uint64_t n = 1 << 20;
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    const auto rule = DropoutRule::make(p);
    uint64_t dropped = 0;
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const float f = rule.factor(42, Stream::dropout_hidden, i);
      dropped += f == 0.0f;
      sum += f;
    }
    const double frac = double(dropped) / double(n);
    const double sd = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(frac, p, 5 * sd) << "p=" << p;
    // Inverted scaling keeps the expectation: mean factor ≈ 1.
    EXPECT_NEAR(sum / double(n), 1.0, 5 * sd / (1 - p)) << "p=" << p;
  }
}

TEST(Dropout, EdgeProbabilities) {
  EXPECT_FALSE(DropoutRule::make(0.0f).active());
  EXPECT_EQ(DropoutRule::make(0.0f).factor(1, Stream::dropout_hidden, 3), 1.0f);
  const auto all = DropoutRule::make(1.0f);
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(all.factor(7, Stream::dropout_output, i), 0.0f);
  EXPECT_FLOAT_EQ(DropoutRule::make(0.2f).scale, 1.25f);
}
