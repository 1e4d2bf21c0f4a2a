// The decoder against PyTorch in float64 (tests/data/decoder_golden.safetensors,
// scripts/make_decoder_golden.py): nn.TransformerDecoder(Layer) and whole
// nn.Transformer models, forward and every gradient; the tiled cross-attention
// against the reference; generation steps bitwise equal to the whole prefix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "decoder_golden.hpp"
#include "ffn/decoder.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/encoder.hpp"
#include "ops/attention.hpp"
#include "reference/attention_reference.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace ffn {
namespace {

using test::randn;
using Case = test::DecoderCase;

std::vector<float> valid(const std::vector<float>& v, const Shape& s, int64_t d) {
  std::vector<float> out;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = s.lengths.empty() ? s.seq : s.lengths[size_t(b)];
    out.insert(out.end(), v.begin() + b * s.seq * d, v.begin() + (b * s.seq + len) * d);
  }
  return out;
}

void expect_padding_zero(const std::vector<float>& v, const Shape& s, int64_t d, const std::string& what) {
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = s.lengths.empty() ? s.seq : s.lengths[size_t(b)];
    for (int64_t i = len * d; i < s.seq * d; ++i) ASSERT_EQ(v[size_t(b * s.seq * d + i)], 0.0f) << what;
  }
}

double worst_seen = 0;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Comparison c = compare(got.data(), want.data(), got.size());
  worst_seen = std::max(worst_seen, c.max_error);
  EXPECT_TRUE(c.ok(tol)) << what << ": " << c.describe();
}

DecoderLoadOptions options(const Case& c, const std::string& sub) {
  DecoderLoadOptions o;
  o.prefix = c.prefix + sub;
  o.heads = c.meta["heads"].get<int64_t>();
  o.activation = parse_activation(c.meta["activation"].get<std::string>());
  o.norm = c.meta["norm_first"].get<bool>() ? NormPlacement::pre : NormPlacement::post;
  o.eps = c.meta["eps"].get<float>();
  return o;
}

// Every gradient of `names_of` (under the case's prefix + sub) against the golden's.
size_t expect_gradients(const SafetensorsFile& gf, const Case& c) {
  size_t checked = 0;
  for (const auto& [name, t] : gf.tensors) {
    EXPECT_EQ(name.rfind(c.prefix, 0), 0u) << name;
    const std::string want = c.prefix + "grad." + name.substr(c.prefix.size());
    EXPECT_TRUE(test::decoder_golden().tensors.count(want)) << want;
    if (!test::decoder_golden().tensors.count(want)) continue;
    expect_close(t.data, test::decoder_golden().tensors.at(want).data, test::kVsTorchDw, name);
    ++checked;
  }
  return checked;
}

size_t golden_params(const Case& c) {
  size_t n = 0;
  for (const auto& [name, t] : test::decoder_golden().tensors)
    if (name.rfind(c.prefix + "grad.", 0) == 0) ++n;
  return n;
}

TEST(Decoder, MatchesTorchTransformerDecoder) {
  const auto cs = test::decoder_cases({"decoder", "layer"});
  ASSERT_GE(cs.size(), 8u);
  const auto dir = test::scratch_dir("decoder");
  worst_seen = 0;
  for (const Case& c : cs) {
    SCOPED_TRACE(c.prefix + c.meta.dump());
    const Decoder dec = Decoder::load(FFN_DECODER_GOLDEN, options(c, ""));
    EXPECT_EQ(dec.config().layers, c.meta["layers"].get<int64_t>());
    EXPECT_EQ(dec.config().final_norm, c.meta["final_norm"].get<bool>());
    const Shape s = c.shape(false), ms = c.shape(true);
    const int64_t d = dec.config().d_model;
    for (Path path : {Path::reference, Path::automatic}) {
      DecoderRunOptions ro;
      ro.path = path;
      ro.causal = c.meta["causal"];
      ro.threads = 2;
      std::vector<float> y(c.t("x").data.size(), -1.0f), dx(y.size(), -1.0f), dm(c.t("memory").data.size(), -1.0f);
      DecoderCache cache;
      dec.forward(c.t("x").data.data(), s, c.t("memory").data.data(), ms, y.data(), ro, &cache);
      expect_padding_zero(y, s, d, "y");
      expect_close(valid(y, s, d), valid(c.t("y").data, s, d), test::kVsTorchY, c.prefix + " y");
      DecoderWeights g;
      dec.backward(c.t("x").data.data(), c.t("dy").data.data(), s, c.t("memory").data.data(), ms, cache, dx.data(),
                   dm.data(), g, ro);
      expect_padding_zero(dx, s, d, "dx");
      expect_padding_zero(dm, ms, d, "dmemory");
      expect_close(valid(dx, s, d), valid(c.t("grad_input").data, s, d), test::kVsTorchDx, c.prefix + " dx");
      expect_close(valid(dm, ms, d), valid(c.t("grad_memory").data, ms, d), test::kVsTorchDx, c.prefix + " dmemory");
      const std::string gp = (dir / "g.safetensors").string();
      dec.save_gradients(gp, g);
      EXPECT_EQ(expect_gradients(read_safetensors(gp), c), golden_params(c)) << "every parameter's gradient is compared";
    }
  }
  std::printf("[ measured ] decoder vs PyTorch (float64): worst scaled error %.2e (tolerance 1e-5)\n", worst_seen);
}

// A whole nn.Transformer: our encoder on the source, our decoder on the
// target and the encoder's output; backward through both.
TEST(Decoder, MatchesTorchTransformer) {
  const auto cs = test::decoder_cases({"transformer"});
  ASSERT_GE(cs.size(), 2u);
  const auto dir = test::scratch_dir("transformer");
  worst_seen = 0;
  for (const Case& c : cs) {
    SCOPED_TRACE(c.prefix + c.meta.dump());
    const DecoderLoadOptions eo = options(c, "encoder."), dopt = options(c, "decoder.");
    const Encoder enc = Encoder::load(FFN_DECODER_GOLDEN, eo);
    const Decoder dec = Decoder::load(FFN_DECODER_GOLDEN, dopt);
    EXPECT_EQ(enc.config().layers, c.meta["encoder_layers"].get<int64_t>());
    EXPECT_TRUE(enc.config().final_norm && dec.config().final_norm);
    const Shape s = c.shape(false), ms = c.shape(true);
    const int64_t d = dec.config().d_model;
    for (Path path : {Path::reference, Path::automatic}) {
      EncoderRunOptions er;
      er.path = path;
      er.threads = 2;
      DecoderRunOptions dr;
      dr.path = path;
      dr.threads = 2;
      const auto& src = c.t("memory").data;
      std::vector<float> mem(src.size()), y(c.t("x").data.size()), dx(y.size()), dmem(src.size()), dsrc(src.size());
      EncoderCache ec;
      DecoderCache dc;
      enc.forward(src.data(), mem.data(), ms, er, &ec);
      dec.forward(c.t("x").data.data(), s, mem.data(), ms, y.data(), dr, &dc);
      expect_close(valid(y, s, d), valid(c.t("y").data, s, d), test::kVsTorchY, c.prefix + " y");
      DecoderWeights dg;
      EncoderWeights eg;
      dec.backward(c.t("x").data.data(), c.t("dy").data.data(), s, mem.data(), ms, dc, dx.data(), dmem.data(), dg, dr);
      enc.backward(src.data(), dmem.data(), ms, ec, dsrc.data(), eg, er);
      expect_close(valid(dx, s, d), valid(c.t("grad_input").data, s, d), test::kVsTorchDx, c.prefix + " dtgt");
      expect_close(valid(dsrc, ms, d), valid(c.t("grad_memory").data, ms, d), test::kVsTorchDx, c.prefix + " dsrc");
      const std::string ep = (dir / "e.safetensors").string(), dp = (dir / "d.safetensors").string();
      enc.save_gradients(ep, eg);
      dec.save_gradients(dp, dg);
      const size_t checked = expect_gradients(read_safetensors(ep), c) + expect_gradients(read_safetensors(dp), c);
      EXPECT_EQ(checked, golden_params(c)) << "every parameter's gradient is compared";
    }
  }
  std::printf("[ measured ] nn.Transformer vs PyTorch (float64): worst scaled error %.2e (tolerance 1e-5)\n",
              worst_seen);
}

// ---- cross-attention and cached keys: the tiled core against the reference ----

TEST(Attention, CrossAndCachedKeysMatchTheReference) {
  // Queries and keys of separate lengths; causal queries as the last
  // positions of their keys (a cache); key rows in any order of the buffer.
  for (bool causal : {false, true})
    for (auto [d, H] : {std::pair<int64_t, int64_t>{24, 3}, {14, 2}, {33, 1}}) {
      SCOPED_TRACE(std::to_string(d) + "/" + std::to_string(H) + (causal ? " causal" : ""));
      reference::AttentionShape a;
      a.d = d;
      a.heads = H;
      a.causal = causal;
      const std::vector<int64_t> q_len{1, 7, 97, 0, 3}, k_len{1, 300, 97, 5, 260};
      a.off = {0};
      int64_t m = 0;
      for (size_t b = 0; b < q_len.size(); ++b) {
        a.off.push_back(a.off.back() + q_len[b]);
        a.kv_len.push_back(causal ? std::max(k_len[b], q_len[b]) : k_len[b]);
      }
      // Key rows of sequence b: the sequences' blocks in reverse order.
      for (size_t b = q_len.size(); b-- > 0;) {
        a.kv_base.insert(a.kv_base.begin(), 0);
        m += a.kv_len[b];
      }
      int64_t at = 0;
      for (size_t b = q_len.size(); b-- > 0;) {
        a.kv_base[b] = at;
        at += a.kv_len[b];
      }
      a.S = 300;
      const int64_t n = a.rows();
      const std::vector<float> q = randn(size_t(n * 2 * d), 3, 1.5f), kv = randn(size_t(m * 2 * d), 4, 1.5f),
                               dctx = randn(size_t(n * d), 5);
      const nn::AttentionInput<float> in{q.data(), kv.data(), kv.data() + d, 2 * d, 2 * d};
      std::vector<float> ref(size_t(n * d)), got(size_t(n * d)), lse_r(size_t(n * H)), lse(size_t(n * H));
      reference::attention_forward(a, in, ref.data(), lse_r.data());
      nn::attention_forward(nn::Context(Isa::automatic, 2), a, in, got.data(), lse.data());
      expect_close(got, ref, test::kAttentionForwardVsReference, "ctx");
      expect_close(lse, lse_r, test::kAttentionForwardVsReference, "lse");
      std::vector<float> dq_r(size_t(n * d)), dkv_r(size_t(m * 2 * d)), dq(size_t(n * d), NAN), dkv(size_t(m * 2 * d), NAN);
      reference::attention_backward(a, in, dctx.data(), {dq_r.data(), dkv_r.data(), dkv_r.data() + d, d, 2 * d});
      nn::attention_backward(nn::Context(Isa::automatic, 2), a, in, got.data(), lse.data(), dctx.data(), {dq.data(), dkv.data(), dkv.data() + d, d, 2 * d});
      expect_close(dq, dq_r, test::kAttentionBackwardVsReference, "dq");
      expect_close(dkv, dkv_r, test::kAttentionBackwardVsReference, "dk|dv");
    }
  reference::AttentionShape bad;
  bad.d = 4;
  bad.off = {0, 3};
  bad.kv_base = {0};
  bad.kv_len = {2};
  bad.causal = true;
  EXPECT_THROW(reference::check_attention_shape(bad), Error) << "3 causal queries over 2 keys";
  bad.causal = false;
  bad.kv_len = {0};
  EXPECT_THROW(reference::check_attention_shape(bad), Error) << "queries without keys";
}

// ---- generation ------------------------------------------------------------------

DecoderConfig small_config(NormPlacement norm, bool final_norm) {
  DecoderConfig cfg;
  cfg.d_model = 48;
  cfg.heads = 6;
  cfg.d_ff = 80;
  cfg.layers = 2;
  cfg.norm = norm;
  cfg.final_norm = final_norm;
  cfg.activation = Activation::gelu;
  return cfg;
}

// Row t of sequence b of a whole-prefix forward of x (rows [b][0..t]).
std::vector<float> prefix_row(const Decoder& dec, const std::vector<std::vector<float>>& xs, int64_t t,
                              const std::vector<float>& mem_b, int64_t mlen, int threads) {
  const int64_t d = dec.config().d_model;
  std::vector<float> x, y(size_t((t + 1) * d));
  for (int64_t i = 0; i <= t; ++i) x.insert(x.end(), xs[size_t(i)].begin(), xs[size_t(i)].end());
  DecoderRunOptions ro;
  ro.threads = threads;
  dec.forward(x.data(), Shape{1, t + 1, Layout::tokens, {}}, mem_b.data(), Shape{1, mlen, Layout::tokens, {}}, y.data(),
              ro);
  return {y.begin() + t * d, y.end()};
}

TEST(Decoder, StepsAreBitwiseTheWholePrefix) {
  // fp32, and int8 with the attention's projections in int8 (translate --dtype int8).
  for (NormPlacement norm : {NormPlacement::post, NormPlacement::pre})
  for (bool int8 : {false, true}) {
    const Decoder fp32(small_config(norm, norm == NormPlacement::pre), 7);
    const Decoder dec = int8 ? fp32.converted(WeightDtype::int8, true) : fp32;
    SCOPED_TRACE(int8 ? "int8 (attention too)" : "fp32");
    const int64_t d = 48, B = 3, S = 40, T = 105;  // T crosses the 96-query tile
    const std::vector<int64_t> mlen{40, 1, 23};
    const std::vector<float> memory = randn(size_t(B * S * d), 8);
    const Shape ms{B, S, Layout::tokens, mlen};
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(to_string(norm)) + " threads " + std::to_string(threads));
      RunOptions ro;
      ro.threads = threads;
      DecoderState st = dec.start(memory.data(), ms, T, ro);
      EXPECT_EQ(st.live(), B);
      std::vector<std::vector<std::vector<float>>> xs(static_cast<size_t>(B));  // [b][t] rows
      size_t compared = 0;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> x = randn(size_t(B * d), uint64_t(100 + t)), y(size_t(B * d));
        dec.step(st, x.data(), y.data(), ro);
        for (int64_t b = 0; b < B; ++b) {
          xs[size_t(b)].emplace_back(x.begin() + b * d, x.begin() + (b + 1) * d);
          EXPECT_EQ(st.length(b), t + 1);
          if (t < 12 || t % 23 == 0 || t + 1 == T) {
            const std::vector<float> mem_b(memory.begin() + b * S * d, memory.begin() + (b * S + mlen[size_t(b)]) * d);
            const std::vector<float> want = prefix_row(dec, xs[size_t(b)], t, mem_b, mlen[size_t(b)], 3 - threads);
            ASSERT_EQ(std::memcmp(want.data(), y.data() + b * d, size_t(d) * sizeof(float)), 0)
                << "sequence " << b << " step " << t << ": not the bits of the whole prefix";
            ++compared;
          }
        }
      }
      EXPECT_GT(compared, 40u);
      EXPECT_THROW(dec.step(st, randn(size_t(B * d), 1).data(), std::vector<float>(size_t(B * d)).data(), ro), Error)
          << "past the capacity";
    }
  }
}

// converted(int8, attention_int8): the self- and cross-attention projections
// in int8 as well as the FFN's. The output stays within 3e-2 of the largest
// fp32 value (per-row weight and per-token activation scales: ~1/254 relative
// rounding per operand, summed over d_model with random signs, through two
// layers; measured below 1e-2), and differs from the FFN-only conversion
// (the attention is quantized).
TEST(Decoder, Int8AttentionStaysCloseToFp32) {
  const Decoder fp32(small_config(NormPlacement::post, false), 12);
  const Decoder ffn_only = fp32.converted(WeightDtype::int8), all = fp32.converted(WeightDtype::int8, true);
  EXPECT_THROW(fp32.converted(WeightDtype::bf16, true), Error) << "attention int8 for a bf16 conversion";
  const int64_t d = 48, B = 2, T = 7, S = 11;
  const Shape xs{B, T, Layout::tokens, {7, 3}}, ms{B, S, Layout::tokens, {11, 5}};
  const std::vector<float> x = randn(size_t(B * T * d), 13), mem = randn(size_t(B * S * d), 14);
  auto run = [&](const Decoder& dec) {
    std::vector<float> y(size_t(B * T * d));
    dec.forward(x.data(), xs, mem.data(), ms, y.data());
    return valid(y, xs, d);
  };
  const std::vector<float> want = run(fp32), a = run(ffn_only), b = run(all);
  const Comparison c = compare(b.data(), want.data(), want.size());
  std::printf("[ measured ] int8 attention + FFN vs fp32: scaled error %.2e (tolerance 3e-2)\n", c.max_error);
  EXPECT_TRUE(c.ok(3e-2)) << c.describe();
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "the attention was not quantized";
  const std::vector<float> again = run(all.converted(WeightDtype::int8));
  EXPECT_NE(std::memcmp(again.data(), b.data(), b.size() * sizeof(float)), 0)
      << "converting again without attention_int8 kept the int8 attention";
}

TEST(Decoder, SelectedSequencesContinueBitwise) {
  // Beam search's bookkeeping: rearranged, repeated and dropped sequences
  // continue as if each had been generated alone (slots handed over, copied,
  // freed and reused, grown; repeats side by side form one cross-attention
  // group, repeats apart do not).
  const Decoder dec(small_config(NormPlacement::post, false), 9);
  const int64_t d = 48, B = 2, S = 9, T = 12;
  const std::vector<float> memory = randn(size_t(B * S * d), 10);
  const Shape ms{B, S, Layout::tokens, {9, 4}};
  DecoderState st = dec.start(memory.data(), ms, T);
  std::vector<std::vector<std::vector<float>>> hist(static_cast<size_t>(B));  // per live sequence: its rows
  auto steps = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = st.live();
      std::vector<float> x = randn(size_t(n * d), uint64_t(200 + t)), y(size_t(n * d));
      dec.step(st, x.data(), y.data());
      for (int64_t i = 0; i < n; ++i) {
        hist[size_t(i)].emplace_back(x.begin() + i * d, x.begin() + (i + 1) * d);
        const int64_t b = st.source(i), ml = ms.lengths[size_t(b)];
        const std::vector<float> mem_b(memory.begin() + b * S * d, memory.begin() + (b * S + ml) * d);
        const std::vector<float> want = prefix_row(dec, hist[size_t(i)], t, mem_b, ml, 2);
        ASSERT_EQ(std::memcmp(want.data(), y.data() + i * d, size_t(d) * sizeof(float)), 0)
            << "live " << i << " step " << t;
      }
    }
  };
  auto select = [&](const std::vector<int64_t>& from) {
    std::vector<std::vector<std::vector<float>>> next;
    for (int64_t f : from) next.push_back(hist[size_t(f)]);
    st.select(from);
    hist = std::move(next);
    ASSERT_EQ(st.live(), int64_t(from.size()));
  };
  steps(0, 3);
  select({1, 1, 0});  // sequence 1 twice side by side: a slot handed over, one copied
  EXPECT_EQ(st.source(0), 1);
  EXPECT_EQ(st.source(2), 0);
  steps(3, 6);
  select({2, 0, 2});  // live 1 dropped (its slot freed and reused), live 2 repeated apart
  EXPECT_EQ(st.source(0), 0);
  EXPECT_EQ(st.source(1), 1);
  steps(6, 8);
  select({1, 1, 1, 0, 2});  // more than before: the slots grow
  steps(8, T);
  select({2});
  EXPECT_EQ(st.live(), 1);
  EXPECT_EQ(st.length(0), T);
  EXPECT_THROW(st.select({1}), Error);
}

TEST(Decoder, SavedAndLoadedGivesTheSameBits) {
  const Decoder dec(small_config(NormPlacement::pre, true), 11);
  const auto dir = test::scratch_dir("decoder_save");
  const std::string p = (dir / "dec.safetensors").string();
  dec.save(p);
  const Decoder back = Decoder::load(p);
  EXPECT_TRUE(back.assumed_settings().empty());
  EXPECT_EQ(back.config().heads, 6);
  EXPECT_EQ(back.config().norm, NormPlacement::pre);
  const int64_t d = 48;
  const std::vector<float> x = randn(size_t(2 * 5 * d), 12), m = randn(size_t(2 * 3 * d), 13);
  std::vector<float> y1(x.size()), y2(x.size());
  const Shape s{2, 5, Layout::tokens, {5, 2}}, ms{2, 3, Layout::tokens, {}};
  dec.forward(x.data(), s, m.data(), ms, y1.data());
  back.forward(x.data(), s, m.data(), ms, y2.data());
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
  // Errors name what is wrong.
  try {
    dec.forward(x.data(), s, m.data(), Shape{1, 3, Layout::tokens, {}}, y1.data());
    ADD_FAILURE() << "batch mismatch accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory: batch 1"), std::string::npos) << e.what();
  }
  try {
    dec.forward(x.data(), s, m.data(), Shape{2, 3, Layout::tokens, {3, 0}}, y1.data());
    ADD_FAILURE() << "an empty memory accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 1 has no valid memory position"), std::string::npos) << e.what();
  }
  try {
    Decoder::load(FFN_ENCODER_GOLDEN);
    ADD_FAILURE() << "an encoder file loaded as a decoder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a decoder's state_dict"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ffn
