// Finite-difference checks, in double, of the reference backward for every
// parameter and the input, over every activation x norm placement x norm
// type x bias, with and without dropout (training mode: the mask is a fixed
// function of the seed, so the loss is deterministic and backward must use
// the forward's mask to agree).
#include <gtest/gtest.h>

#include <random>

#include "ffn/diagnostics.hpp"
#include "reference/ffn_reference.hpp"
#include "tolerances.hpp"

using namespace ffn;

namespace {

struct Problem {
  Config cfg;
  int64_t n = 3;
  std::vector<double> x, dy, w1, b1, wg, bg, w2, b2, gamma, beta;
  std::vector<int64_t> pos;
  reference::DropoutState drop;

  reference::Params<double> params() const {
    auto p = [](const std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
    return {p(w1), p(b1), p(wg), p(bg), p(w2), p(b2), p(gamma), p(beta)};
  }
  // L = Σ y · dy
  double loss() const {
    std::vector<double> y(x.size());
    reference::forward<double>(cfg, params(), x.data(), n, pos.data(), drop, y.data(), nullptr);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * dy[i];
    return l;
  }
};

Problem make_problem(const Config& cfg, bool training, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](std::vector<double>& v, size_t size, double scale, double offset = 0) {
    v.resize(size);
    for (double& e : v) e = offset + scale * normal(rng);
  };
  Problem p;
  p.cfg = cfg;
  const size_t d = size_t(cfg.d_model), F = size_t(cfg.d_ff);
  const bool gated = is_gated(cfg.activation);
  fill(p.x, p.n * d, 1.0);
  fill(p.dy, p.n * d, 1.0);
  fill(p.w1, F * d, 0.6);
  fill(p.w2, d * F, 0.6);
  if (gated) fill(p.wg, F * d, 0.6);
  if (cfg.bias) {
    fill(p.b1, F, 0.3);
    fill(p.b2, d, 0.3);
    if (gated) fill(p.bg, F, 0.3);
  }
  if (cfg.norm != NormPlacement::none) {
    fill(p.gamma, d, 0.2, 1.0);
    if (cfg.norm_type == NormType::layernorm) fill(p.beta, d, 0.2);
  }
  p.pos = {0, 5, 6};  // global positions (dropout keys), not consecutive on purpose
  p.drop = {training, 99 + seed};
  return p;
}

// Central difference of the loss with respect to every element of v.
std::vector<double> numeric_grad(Problem& p, std::vector<double>& v) {
  const double h = 1e-6;
  std::vector<double> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double lp = p.loss();
    v[i] = keep - h;
    const double lm = p.loss();
    v[i] = keep;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

class GradCheck : public ::testing::TestWithParam<std::tuple<Activation, int, bool, bool>> {};

TEST_P(GradCheck, EveryParameterAndInput) {
  const auto [act, norm_case, bias, training] = GetParam();
  const std::pair<NormPlacement, NormType> norms[] = {{NormPlacement::none, NormType::layernorm},
                                                      {NormPlacement::post, NormType::layernorm},
                                                      {NormPlacement::post, NormType::rmsnorm},
                                                      {NormPlacement::pre, NormType::layernorm},
                                                      {NormPlacement::pre, NormType::rmsnorm}};
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 6;
  cfg.activation = act;
  cfg.bias = bias;
  cfg.norm = norms[norm_case].first;
  cfg.norm_type = norms[norm_case].second;
  cfg.dropout_hidden = 0.3f;
  cfg.dropout_output = 0.25f;
  Problem p = make_problem(cfg, training, uint64_t(norm_case * 7 + int(act)));

  // Analytic gradients.
  std::vector<double> y(p.x.size()), dx(p.x.size());
  const size_t d = size_t(cfg.d_model), F = size_t(cfg.d_ff);
  std::vector<double> saved_z1(p.n * F), saved_zg(p.n * F), mean(p.n), rstd(p.n), xhat(p.n * d);
  reference::Saved<double> s{saved_z1.data(), saved_zg.data(), mean.data(), rstd.data(), xhat.data()};
  reference::forward<double>(cfg, p.params(), p.x.data(), p.n, p.pos.data(), p.drop, y.data(), &s);
  std::vector<double> gw1(p.w1.size()), gb1(p.b1.size()), gwg(p.wg.size()), gbg(p.bg.size()), gw2(p.w2.size()),
      gb2(p.b2.size()), ggamma(p.gamma.size()), gbeta(p.beta.size());
  auto ptr = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  reference::Grads<double> g{ptr(gw1), ptr(gb1), ptr(gwg), ptr(gbg), ptr(gw2), ptr(gb2), ptr(ggamma), ptr(gbeta)};
  reference::backward<double>(cfg, p.params(), p.x.data(), p.n, p.pos.data(), p.drop, s, p.dy.data(), dx.data(), g);

  const std::pair<const char*, std::pair<std::vector<double>*, std::vector<double>*>> checks[] = {
      {"x", {&p.x, &dx}},      {"w1", {&p.w1, &gw1}}, {"b1", {&p.b1, &gb1}},
      {"wg", {&p.wg, &gwg}},   {"bg", {&p.bg, &gbg}}, {"w2", {&p.w2, &gw2}},
      {"b2", {&p.b2, &gb2}},   {"gamma", {&p.gamma, &ggamma}}, {"beta", {&p.beta, &gbeta}}};
  int checked = 0;
  for (const auto& [name, vg] : checks) {
    auto& [value, analytic] = vg;
    if (value->empty()) continue;
    const std::vector<double> numeric = numeric_grad(p, *value);
    const Comparison c = compare(analytic->data(), numeric.data(), numeric.size());
    EXPECT_TRUE(c.ok(test::kFiniteDifference)) << name << ": " << c.describe();
    // A gradient check of an all-zero gradient proves nothing.
    EXPECT_GT(nonzero_fraction(numeric.data(), numeric.size()), 0.0) << name;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

std::string grad_check_name(const ::testing::TestParamInfo<GradCheck::ParamType>& info) {
  static const char* const norms[] = {"none", "post_ln", "post_rms", "pre_ln", "pre_rms"};
  return std::string(to_string(std::get<0>(info.param))) + "_" + norms[std::get<1>(info.param)] +
         (std::get<2>(info.param) ? "_bias" : "_nobias") + (std::get<3>(info.param) ? "_dropout" : "");
}

INSTANTIATE_TEST_SUITE_P(
    AllVariants, GradCheck,
    ::testing::Combine(::testing::Values(Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu,
                                         Activation::swiglu, Activation::geglu, Activation::reglu,
                                         Activation::geglu_tanh),
                       ::testing::Range(0, 5), ::testing::Bool(), ::testing::Bool()),
    grad_check_name);

// The analytic backward with the wrong mask (another seed) must disagree
// with the finite differences: the check above can detect a mask mismatch.
TEST(GradCheckSensitivity, AnotherSeedsMaskIsDetected) {
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 6;
  cfg.norm = NormPlacement::none;
  cfg.dropout_hidden = 0.5f;
  Problem p = make_problem(cfg, true, 3);
  const size_t d = 4, F = 6;
  std::vector<double> y(p.x.size()), dx(p.x.size()), z1(p.n * F), xhat(p.n * d), m(p.n), r(p.n);
  reference::Saved<double> s{z1.data(), nullptr, m.data(), r.data(), xhat.data()};
  reference::forward<double>(cfg, p.params(), p.x.data(), p.n, p.pos.data(), p.drop, y.data(), &s);
  std::vector<double> gw1(F * d), gb1(F), gw2(d * F), gb2(d);
  reference::Grads<double> g{gw1.data(), gb1.data(), nullptr, nullptr, gw2.data(), gb2.data(), nullptr, nullptr};
  reference::DropoutState other = p.drop;
  other.seed += 1;
  reference::backward<double>(cfg, p.params(), p.x.data(), p.n, p.pos.data(), other, s, p.dy.data(), dx.data(), g);
  const std::vector<double> numeric = numeric_grad(p, p.w1);
  EXPECT_FALSE(compare(gw1.data(), numeric.data(), numeric.size()).ok(test::kFiniteDifference));
}

}  // namespace
