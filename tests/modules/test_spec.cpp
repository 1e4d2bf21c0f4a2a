// The model spec (src/modules/spec.hpp): the encoder's and decoder's layer
// settings come from it unchanged, contradictions are refused naming the
// field, and every feature the blocks do not run yet is refused by name.
#include <gtest/gtest.h>

#include "ffn/diagnostics.hpp"
#include "ffn/encoder.hpp"
#include "modules/stack_config.hpp"
#include "ops/rope.hpp"

#include <cmath>
#include <cstring>
#include <numbers>
#include "test_util.hpp"

namespace ffn {
namespace {

using test::expect_error;

nn::StackSpec causal() {
  nn::StackSpec s;
  s.kind = nn::StackKind::causal_lm;
  s.d_model = 64;
  s.layers = 3;
  s.norm = {nn::NormKind::rmsnorm, nn::NormSites::pre, 1e-6f};
  s.final_norm = true;
  s.attention.heads = 8;
  s.attention.kv_heads = 2;
  s.attention.causal = true;
  s.attention.rope.enabled = true;
  s.embedding.positions = nn::Positions::rotary;
  s.embedding.vocab = 100;
  s.ffn = {96, Activation::silu, true, false};
  return s;
}

// Every EncoderConfig's FFN and attention settings, through the spec, are
// the fields the encoder and decoder always read.
TEST(Spec, EncoderAndDecoderSettingsComeThroughUnchanged) {
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu, Activation::swiglu,
                       Activation::geglu, Activation::reglu, Activation::geglu_tanh})
    for (NormPlacement p : {NormPlacement::post, NormPlacement::pre})
      for (NormType t : {NormType::layernorm, NormType::rmsnorm})
        for (bool bias : {false, true}) {
          EncoderConfig c;
          c.d_model = 24, c.heads = 3, c.d_ff = 37, c.activation = a, c.norm = p, c.norm_type = t, c.bias = bias;
          c.eps = 1e-6f, c.dropout = 0.25f;
          const Config f = c.ffn_config();
          EXPECT_EQ(f.d_model, 24);
          EXPECT_EQ(f.d_ff, 37);
          EXPECT_EQ(f.activation, a);
          EXPECT_EQ(f.bias, bias);
          EXPECT_EQ(f.norm, p);
          EXPECT_EQ(f.norm_type, t);
          EXPECT_EQ(f.eps, 1e-6f);
          EXPECT_EQ(f.dropout_hidden, 0.25f);
          EXPECT_EQ(f.dropout_output, 0.25f);
          for (nn::StackKind k : {nn::StackKind::encoder, nn::StackKind::seq2seq_decoder}) {
            const nn::StackSpec s = nn::stack_spec(c, k);
            EXPECT_NO_THROW(s.validate());
            const nn::AttentionBlockConfig b = nn::attention_config(s, 0);
            EXPECT_EQ(b.d, 24);
            EXPECT_EQ(b.heads, 3);
            EXPECT_EQ(b.norm, p);
            EXPECT_EQ(b.norm_type, t);
            EXPECT_EQ(b.eps, 1e-6f);
            EXPECT_EQ(b.dropout, 0.25f);
            EXPECT_EQ(b.head_dim, 0);
            EXPECT_EQ(b.kv_heads, 0);
            EXPECT_EQ(s.attention.cross, k == nn::StackKind::seq2seq_decoder);
          }
        }
}

// The spec comes first: the public config is made from it, and the round
// trip config → spec → config gives every field back; what the config
// cannot hold is refused naming the spec's field.
TEST(Spec, TheEncoderConfigIsMadeFromTheSpec) {
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu, Activation::swiglu,
                       Activation::geglu, Activation::reglu, Activation::geglu_tanh})
    for (NormPlacement p : {NormPlacement::post, NormPlacement::pre})
      for (NormType t : {NormType::layernorm, NormType::rmsnorm})
        for (bool bias : {false, true})
          for (nn::StackKind k : {nn::StackKind::encoder, nn::StackKind::seq2seq_decoder}) {
            EncoderConfig c;
            c.d_model = 24, c.heads = 3, c.d_ff = 37, c.layers = 5, c.activation = a, c.norm = p, c.norm_type = t;
            c.bias = bias, c.eps = 1e-6f, c.dropout = 0.25f, c.final_norm = bias;
            EXPECT_EQ(nn::encoder_config(nn::stack_spec(c, k)), c) << to_string(a) << " " << to_string(p);
          }
  auto refused = [](auto change, const std::string& what) {
    nn::StackSpec s = nn::stack_spec(EncoderConfig{}, nn::StackKind::encoder);
    change(s);
    expect_error([&] { (void)nn::encoder_config(s); }, what);
  };
  refused([](nn::StackSpec& s) { s.attention.kv_heads = 2; }, "attention.kv_heads");
  refused([](nn::StackSpec& s) { s.attention.head_dim = 32; }, "attention.head_dim");
  refused([](nn::StackSpec& s) { s.attention.rope.enabled = true; }, "attention.rope");
  refused([](nn::StackSpec& s) { s.attention.relative_buckets = 32; }, "attention.relative_buckets");
  refused([](nn::StackSpec& s) { s.attention.local = {4}; }, "a local window (attention.local)");
  refused([](nn::StackSpec& s) { s.norm.first_attention_norm = false; }, "norm.first_attention_norm");
  refused([](nn::StackSpec& s) { s.norm.kind = nn::NormKind::rmsnorm_one_plus; }, "norm.kind");
  refused([](nn::StackSpec& s) { s.norm.sites = nn::NormSites::pre_and_post; }, "norm.sites");
  refused([](nn::StackSpec& s) { s.ffn.bias = false; }, "biases on some projections only");
  refused([](nn::StackSpec& s) { s.attention.causal = true; }, "attention.causal");
  nn::StackSpec fine = nn::stack_spec(EncoderConfig{}, nn::StackKind::encoder);
  fine.attention.head_dim = fine.d_model / fine.attention.heads;  // the default, spelled out
  fine.attention.kv_heads = fine.attention.heads;
  EXPECT_EQ(nn::encoder_config(fine), EncoderConfig{});
}

TEST(Spec, CausalAttentionTakesItsHeadsFromTheSpec) {
  nn::StackSpec s = causal();
  s.attention.head_dim = 16;  // heads · head_dim ≠ d_model (Gemma's shape)
  const nn::AttentionBlockConfig b = nn::attention_config(s, 2);
  EXPECT_EQ(b.dh(), 16);
  EXPECT_EQ(b.qd(), 128);
  EXPECT_EQ(b.kvd(), 32);
  EXPECT_EQ(b.norm, NormPlacement::pre);
  EXPECT_EQ(b.norm_type, NormType::rmsnorm);
  EXPECT_EQ(nn::ffn_config(s).activation, Activation::swiglu);
  s.norm.kind = nn::NormKind::rmsnorm_one_plus;  // (1 + w) is the loader's: the block's norm is RMSNorm
  EXPECT_EQ(nn::attention_config(s, 0).norm_type, NormType::rmsnorm);
}

TEST(Spec, ContradictionsAreRefusedNamingTheField) {
  EXPECT_NO_THROW(causal().validate());
  auto refused = [](auto change, const std::string& what) {
    nn::StackSpec s = causal();
    change(s);
    expect_error([&] { s.validate(); }, what);
  };
  refused([](nn::StackSpec& s) { s.attention.kv_heads = 3; }, "8 query heads cannot share 3 key/value heads");
  refused([](nn::StackSpec& s) { s.attention.window = {0, 4}; }, "attention.window has 2 entries for 3 layers");
  refused([](nn::StackSpec& s) { s.attention.rope.scaling = nn::RopeScaling::longrope; },
          "longrope needs 4 long and short factors (the rotated width / 2), got 0 and 0");
  refused([](nn::StackSpec& s) { s.attention.window = {0, 4, -1}; }, "attention.window must be at least 0");
  refused([](nn::StackSpec& s) { s.embedding.positions = nn::Positions::learned; }, "attention.rope.enabled");
  refused([](nn::StackSpec& s) { s.attention.cross = true; }, "cross-attention is a seq2seq decoder's");
  refused([](nn::StackSpec& s) { s.attention.causal = false; }, "a causal LM's self-attention is causal");
  refused([](nn::StackSpec& s) { s.attention.rope.fraction = 0.375; }, "the rotated part of a head must be even");
  refused([](nn::StackSpec& s) { s.attention.rope.layer_theta = {1e4}; }, "attention.rope.layer_theta has 1 entries");
  refused([](nn::StackSpec& s) { s.attention.local = {0, 4}; }, "attention.local has 2 entries for 3 layers");
  refused([](nn::StackSpec& s) { s.attention.local = {0, -4, 0}; }, "attention.local must be at least 0");
  refused([](nn::StackSpec& s) { s.norm.first_attention_norm = false; s.norm.sites = nn::NormSites::post; },
          "norm.first_attention_norm = false is for pre-norm stacks");
  refused([](nn::StackSpec& s) { s.attention.softcap = -1; }, "attention.softcap must be at least 0");
  refused([](nn::StackSpec& s) { s.ffn.unit = Activation::swiglu; }, "ffn.unit must be relu, gelu, gelu_tanh or silu");
  refused([](nn::StackSpec& s) { s.embedding.scale = 0; }, "embedding.scale must be positive");
  refused([](nn::StackSpec& s) { s.norm.eps = 0; }, "norm.eps must be positive");
}

TEST(Spec, WhatTheBlocksDoNotRunIsRefusedByName) {
  EXPECT_NO_THROW(causal().check_supported("m.gguf"));
  auto refused = [](auto change, const std::string& what) {
    nn::StackSpec s = causal();
    change(s);
    EXPECT_NO_THROW(s.validate());
    expect_error([&] { s.check_supported("m.gguf"); }, "m.gguf: " + what + " is not supported yet");
  };
  refused([](nn::StackSpec& s) { s.attention.rope.scaling = nn::RopeScaling::yarn; }, "yarn rotary scaling");
  refused([](nn::StackSpec& s) { s.attention.rope.layer_theta = {1e4, 1e4, 1e6}; },
          "a rotary base per layer outside an encoder");
  refused([](nn::StackSpec& s) { s.attention.local = {0, 4, 0}; }, "a local attention window outside an encoder");
  refused([](nn::StackSpec& s) { s.attention.rope.fraction = 0.5; }, "partial rotary positions");
  refused([](nn::StackSpec& s) { s.attention.relative_buckets = 32; }, "a relative position bias outside an encoder");
  // What runs: biases, (1 + w) norms before and after the sublayers, GELU-tanh
  // gating, an embedding scale, the soft-caps, a query scale, sliding windows,
  // per-head q/k norms (the causal LM's).
  nn::StackSpec s = causal();
  s.norm.sites = nn::NormSites::pre_and_post;
  s.ffn.unit = Activation::gelu_tanh;
  s.attention.qkv_bias = s.attention.out_bias = true;
  s.norm.kind = nn::NormKind::rmsnorm_one_plus;
  s.embedding.scale = 8.0f;
  s.embedding.final_softcap = 30.0f;
  s.attention.softcap = 50.0f;
  s.attention.query_scale = 0.0625f;
  s.attention.window = {4096, 0, 4096};
  s.attention.qk_norm = true;
  EXPECT_NO_THROW(s.check_supported("m.gguf"));
  const nn::AttentionBlockConfig b1 = nn::attention_config(s, 1), b2 = nn::attention_config(s, 2);
  EXPECT_EQ(b1.window, 0);
  EXPECT_EQ(b2.window, 4096);
  EXPECT_EQ(b2.softcap, 50.0f);
  EXPECT_EQ(b2.query_scale, 0.0625f);
  EXPECT_EQ(b2.norm, NormPlacement::pre);
  EXPECT_EQ(nn::ffn_config(s).activation, Activation::geglu_tanh);
  EXPECT_EQ(nn::ffn_config(s).norm, NormPlacement::pre);
  // ... and only there: the encoder's attention has none of them.
  EncoderConfig e;
  nn::StackSpec enc = nn::stack_spec(e, nn::StackKind::encoder);
  enc.attention.softcap = 50.0f;
  expect_error([&] { enc.check_supported("bert"); }, "bert: an attention logit soft-cap outside a causal LM");
  enc.attention.softcap = 0;
  enc.norm.sites = nn::NormSites::pre_and_post;
  expect_error([&] { enc.check_supported("bert"); }, "bert: a norm after each sublayer as well as before it");
  enc.norm.sites = nn::NormSites::pre;
  enc.attention.qk_norm = true;
  expect_error([&] { enc.check_supported("bert"); }, "bert: per-head q/k norm outside a causal LM");
}

}  // namespace
}  // namespace ffn

namespace ffn {
namespace {

// The rotary frequencies: without scaling bitwise the table's own; linear
// divides each by the factor; llama3 keeps the short wavelengths, divides the
// long ones by the factor and interpolates between (Llama 3.1's rule, here in
// double against the float32 form).
TEST(Spec, RopeFrequenciesFollowTheScalingRule) {
  nn::StackSpec s = causal();
  s.attention.rope.theta = 500000.0;
  s.attention.head_dim = 16;
  const std::vector<float> plain = nn::RopeTable::frequencies(16, 500000.0);
  EXPECT_EQ(0, std::memcmp(plain.data(), nn::rope_frequencies(s).data(), plain.size() * 4));
  s.attention.rope.scaling = nn::RopeScaling::linear;
  s.attention.rope.factor = 4.0;
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(nn::rope_frequencies(s)[i], plain[i] / 4.0f);
  s.attention.rope.scaling = nn::RopeScaling::llama3;
  s.attention.rope.factor = 8.0;
  s.attention.rope.low_freq_factor = 1.0;
  s.attention.rope.high_freq_factor = 4.0;
  s.attention.rope.original_context = 64;
  s.validate();
  const std::vector<float> got = nn::rope_frequencies(s);
  int bands[3] = {0, 0, 0};
  for (size_t i = 0; i < plain.size(); ++i) {
    const double f = plain[i], wavelen = 2 * std::numbers::pi / f;
    double want = f;
    if (wavelen > 64.0) want = f / 8, ++bands[2];
    else if (wavelen < 16.0) ++bands[0];
    else {
      const double smooth = (64.0 / wavelen - 1.0) / 3.0;
      want = (1 - smooth) * f / 8 + smooth * f;
      ++bands[1];
    }
    EXPECT_NEAR(got[i], want, 1e-6 * want) << "frequency " << i;
  }
  EXPECT_GT(bands[0], 0);  // each band taken
  EXPECT_GT(bands[1], 0);
  EXPECT_GT(bands[2], 0);
  s.attention.rope.freq_factors.assign(8, 2.0f);  // a GGUF's rope_freqs divide what the rule gives
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(nn::rope_frequencies(s)[i], got[i] / 2.0f);
  s.attention.rope.freq_factors.assign(7, 2.0f);
  expect_error([&] { s.validate(); }, "attention.rope.freq_factors has 7 values, expected head_dim / 2 = 8");
}

}  // namespace
}  // namespace ffn
