// ffn encode, encode-grad, init --encoder and bench --encoder: results
// against PyTorch from files saved by PyTorch, and bad input (one line, exit
// 2, nothing written).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/encoder.hpp"
#include "encoder_golden.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;
using test::Result;

fs::path dir() {
  static const fs::path d = test::scratch_dir("encoder_cli");
  return d;
}
Result ffn_cli(const std::string& args) { return test::run_ffn(args, dir()); }
std::string tmp(const std::string& name) { return (dir() / name).string(); }

const SafetensorsFile& golden() { return test::encoder_golden(); }
using Case = test::EncoderCase;
std::vector<Case> encoder_cases() { return test::encoder_cases("encoder"); }

// The case's parameters as PyTorch's state_dict saved them (no __metadata__),
// its input and dL/dy as .npy, and its lengths; returns the flags naming them.
std::string write_case(const Case& c, const std::string& name) {
  SafetensorsFile w;
  for (const auto& [key, t] : golden().tensors) {
    if (key.rfind(c.prefix, 0) != 0) continue;
    const std::string rest = key.substr(c.prefix.size());
    if (rest.rfind("layers.", 0) == 0 || rest.rfind("norm.", 0) == 0) w.tensors[rest] = t;
  }
  write_safetensors(tmp(name + "_w.safetensors"), w);
  write_npy(tmp(name + "_x.npy"), Array{c.t("x").shape, c.t("x").data});
  write_npy(tmp(name + "_dy.npy"), Array{c.t("dy").shape, c.t("dy").data});
  std::string flags = "--weights " + tmp(name + "_w.safetensors") + " --input " + tmp(name + "_x.npy");
  if (c.meta["has_lengths"].get<bool>()) {
    std::vector<int64_t> lengths;
    for (float v : c.t("lengths").data) lengths.push_back(int64_t(v));
    test::write_int_npy(tmp(name + "_lengths.npy"), lengths);
    flags += " --lengths " + tmp(name + "_lengths.npy");
  }
  if (c.meta["causal"].get<bool>()) flags += " --causal";
  return flags;
}

std::string settings(const Case& c) {
  std::ostringstream s;
  s << " --heads " << c.meta["heads"].get<int>() << " --activation " << c.meta["activation"].get<std::string>()
    << " --norm " << (c.meta["norm_first"].get<bool>() ? "pre" : "post") << " --eps " << c.meta["eps"].get<double>();
  return s.str();
}

TEST(EncoderCli, EncodeAndEncodeGradMatchPyTorchOnItsOwnFiles) {
  int ran = 0;
  for (const Case& c : encoder_cases()) {
    SCOPED_TRACE(c.prefix + c.meta.dump());
    const std::string name = c.prefix.substr(0, c.prefix.size() - 1);
    const std::string flags = write_case(c, name);
    // A state_dict from PyTorch records no heads: refused, naming the flag.
    const Result no_heads = ffn_cli("encode " + flags + " --output " + tmp(name + "_y.npy"));
    EXPECT_EQ(no_heads.status, 2);
    EXPECT_NE(no_heads.err.find("--heads"), std::string::npos) << no_heads.err;
    EXPECT_FALSE(fs::exists(tmp(name + "_y.npy")));
    const Result r = ffn_cli("encode " + flags + settings(c) + " --threads 2 --output " + tmp(name + "_y.npy"));
    ASSERT_EQ(r.status, 0) << r.err;
    const Array y = read_npy(tmp(name + "_y.npy"));
    ASSERT_EQ(y.shape, c.t("y").shape);
    const Comparison cy = compare(y.data.data(), c.t("y").data.data(), y.data.size());
    EXPECT_TRUE(cy.ok(test::kVsTorchY)) << cy.describe();

    const Result g = ffn_cli("encode-grad " + flags + settings(c) + " --grad-output " + tmp(name + "_dy.npy") +
                             " --output-dir " + tmp(name + "_grads"));
    ASSERT_EQ(g.status, 0) << g.err;
    const Array dx = read_npy(tmp(name + "_grads/grad_input.npy"));
    const Comparison cdx = compare(dx.data.data(), c.t("grad_input").data.data(), dx.data.size());
    EXPECT_TRUE(cdx.ok(test::kVsTorchDx)) << cdx.describe();
    const SafetensorsFile grads = read_safetensors(tmp(name + "_grads/grads.safetensors"));
    size_t compared = 0;
    for (const auto& [gname, t] : grads.tensors) {
      const NamedTensor& want = c.t("grad." + gname);  // PyTorch's parameter names, no prefix
      const Comparison cg = compare(t.data.data(), want.data.data(), t.data.size());
      EXPECT_TRUE(cg.ok(test::kVsTorchDw)) << gname << ": " << cg.describe();
      ++compared;
    }
    size_t params = 0;  // every parameter gradient of the case is in the file
    for (const auto& [key, t] : golden().tensors)
      if (key.rfind(c.prefix + "grad.", 0) == 0) ++params;
    EXPECT_EQ(compared, params);
    ++ran;
  }
  EXPECT_GE(ran, 7);
}

TEST(EncoderCli, InitThenEncodeUsesTheFilesSettings) {
  const std::string w = tmp("init_w.safetensors");
  const Result i = ffn_cli("init --encoder --layers 2 --heads 4 --d-model 32 --d-ff 48 --activation gelu --norm pre "
                           "--final-norm --seed 3 --output " + w);
  ASSERT_EQ(i.status, 0) << i.err;
  const Encoder e = Encoder::load(w);
  EXPECT_EQ(e.config().layers, 2);
  EXPECT_EQ(e.config().heads, 4);
  EXPECT_EQ(e.config().norm, NormPlacement::pre);
  EXPECT_EQ(e.config().activation, Activation::gelu);
  EXPECT_TRUE(e.config().final_norm);
  const Array x{{2, 9, 32}, test::randn(2 * 9 * 32, 4)};
  write_npy(tmp("init_x.npy"), x);
  test::write_int_npy(tmp("init_len.npy"), {9, 5});
  const Result r = ffn_cli("encode --weights " + w + " --input " + tmp("init_x.npy") + " --lengths " + tmp("init_len.npy") +
                           " --causal --output " + tmp("init_y.npy"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "") << "nothing assumed: the file records its settings";
  Array want{x.shape, std::vector<float>(x.data.size())};
  EncoderRunOptions o;
  o.causal = true;
  e.forward(x.data.data(), want.data.data(), Shape{2, 9, Layout::tokens, {9, 5}}, o);
  EXPECT_EQ(read_npy(tmp("init_y.npy")).data, want.data);
  // [S, d]: one sequence.
  write_npy(tmp("init_x2.npy"), Array{{9, 32}, std::vector<float>(x.data.begin(), x.data.begin() + 9 * 32)});
  ASSERT_EQ(ffn_cli("encode --weights " + w + " --input " + tmp("init_x2.npy") + " --causal --output " + tmp("init_y2.npy")).status, 0);
  const Array y2 = read_npy(tmp("init_y2.npy"));
  EXPECT_EQ(y2.shape, (std::vector<int64_t>{9, 32}));
  EXPECT_TRUE(std::equal(y2.data.begin(), y2.data.end(), want.data.begin()));
}

// Issue 31: encode --dtype as run and embed have it. Each dtype gives the
// bits of the library's Encoder::converted (the same conversion), and differs
// from fp32 (so the flag is not ignored) by less than the FFN's int8/bf16
// tolerance on this small stack (0.05 relative: 8-bit weights, 2 layers).
TEST(EncoderCli, EncodeTakesDtype) {
  const std::string w = tmp("dtype_w.safetensors");
  ASSERT_EQ(ffn_cli("init --encoder --layers 2 --heads 4 --d-model 32 --d-ff 48 --activation gelu --seed 5 --output " + w)
                .status, 0);
  const Array x{{2, 7, 32}, test::randn(2 * 7 * 32, 6)};
  write_npy(tmp("dtype_x.npy"), x);
  const Encoder e = Encoder::load(w);
  Array fp32{x.shape, std::vector<float>(x.data.size())};
  e.forward(x.data.data(), fp32.data.data(), Shape{2, 7, Layout::tokens, {}});
  for (const std::string dtype : {"fp32", "bf16", "fp16", "int8"}) {
    const std::string out = tmp("dtype_y_" + dtype + ".npy");
    const Result r = ffn_cli("encode --weights " + w + " --input " + tmp("dtype_x.npy") + " --dtype " + dtype +
                             " --output " + out);
    ASSERT_EQ(r.status, 0) << dtype << ": " << r.err;
    const WeightDtype wd = parse_weight_dtype(dtype);
    const Encoder conv = wd == WeightDtype::fp32 ? Encoder::load(w) : Encoder::load(w).converted(wd);
    Array want{x.shape, std::vector<float>(x.data.size())};
    conv.forward(x.data.data(), want.data.data(), Shape{2, 7, Layout::tokens, {}});
    const Array y = read_npy(out);
    EXPECT_EQ(y.data, want.data) << dtype;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < y.data.size(); ++i) {
      worst = std::max(worst, double(std::fabs(y.data[i] - fp32.data[i])));
      scale = std::max(scale, double(std::fabs(fp32.data[i])));
    }
    if (dtype == "fp32") EXPECT_EQ(worst, 0.0);
    else EXPECT_GT(worst, 0.0) << dtype << ": the same bits as fp32: --dtype ignored?";
    EXPECT_LT(worst, 0.05 * scale) << dtype;
  }
  const Result bad = ffn_cli("encode --weights " + w + " --input " + tmp("dtype_x.npy") + " --dtype int4 --output " +
                             tmp("dtype_bad.npy"));
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("--dtype"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("int4"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(tmp("dtype_bad.npy")));
}

TEST(EncoderCli, BenchEncoderPrintsJsonAndPassesItsCheck) {
  const Result r = ffn_cli("bench --encoder --d-model 32 --heads 4 --d-ff 48 --layers 2 --batch 2 --seq 20 --causal "
                           "--repeats 2 --warmup 0 --backward --json --threads 2");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["check_ok"].get<bool>());
  EXPECT_EQ(j["layers"], 2);
  EXPECT_GT(j["gflops"].get<double>(), 0.0);
  EXPECT_GT(j["attention_gflops"].get<double>(), 0.0);
}

TEST(EncoderCli, BadInputIsOneLineExitTwoAndNothingWritten) {
  const std::string w = tmp("bad_w.safetensors");
  ASSERT_EQ(ffn_cli("init --encoder --heads 2 --d-model 8 --d-ff 12 --output " + w).status, 0);
  write_npy(tmp("bad_x.npy"), Array{{2, 3, 8}, test::randn(48, 5)});
  write_npy(tmp("bad_x7.npy"), Array{{2, 3, 7}, test::randn(42, 5)});
  test::write_int_npy(tmp("bad_len.npy"), {3, 4});
  const std::string out = tmp("bad_y.npy");
  struct Bad {
    std::string args, expect;
  } cases[] = {
      {"encode --weights " + w + " --input " + tmp("bad_x7.npy") + " --output " + out, "d_model=8"},
      {"encode --weights " + w + " --input " + tmp("bad_x.npy") + " --lengths " + tmp("bad_len.npy") + " --output " + out,
       "length 4 of sequence 1"},
      {"encode --weights " + w + " --input " + tmp("bad_x.npy") + " --heads 3 --output " + out, "heads 3 does not divide"},
      {"encode --weights " + w + " --input " + tmp("bad_x.npy") + " --output " + tmp("bad_x.npy"), "refusing to overwrite an input"},
      {"encode --weights " + tmp("none.safetensors") + " --input " + tmp("bad_x.npy") + " --output " + out, "none.safetensors"},
      {"encode --weights " + tmp("bad_x.npy") + " --input " + tmp("bad_x.npy") + " --output " + out, "bad_x.npy"},
      {"encode --weights " + w + " --input " + tmp("bad_x.npy") + " --norm none --output " + out, "post or pre, got none (--norm)"},
      {"encode-grad --weights " + w + " --input " + tmp("bad_x.npy") + " --grad-output " + tmp("bad_x7.npy") +
           " --output-dir " + tmp("bad_g"), "grad-output has shape [2, 3, 7]"},
      {"encode-grad --weights " + w + " --input " + tmp("bad_x.npy") + " --grad-output " + tmp("bad_x.npy") +
           " --dropout 1.5 --output-dir " + tmp("bad_g"), "--dropout"},
      {"init --layers 2 --output " + tmp("bad_init.safetensors"), "--layers: needs --encoder"},
      {"init --encoder --heads 3 --d-model 8 --output " + tmp("bad_init.safetensors"), "--heads"},
      {"bench --encoder --tokens 5", "--tokens"},
      {"bench --seq 5", "--seq: needs --encoder"},
  };
  for (const Bad& b : cases) {
    const Result r = ffn_cli(b.args);
    EXPECT_EQ(r.status, 2) << b.args << "\n" << r.err;
    EXPECT_NE(r.err.find(b.expect), std::string::npos) << b.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(tmp("bad_g")));
    EXPECT_FALSE(fs::exists(tmp("bad_init.safetensors")));
  }
}

}  // namespace
}  // namespace ffn
