// The `ffn` program end to end: run and grad on golden cases, init, bench,
// and every kind of bad input: one line on stderr naming the file, tensor or
// flag, exit status 2, no output file written, an existing one untouched.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/quant_types.hpp"
#include "ffn/diagnostics.hpp"
#include "cli_util.hpp"
#include "golden.hpp"
#include "test_util.hpp"
#include "tolerances.hpp"

namespace fs = std::filesystem;
using namespace ffn;
using namespace ffn::test;

namespace {

fs::path temp_dir() {
  static const fs::path d = ffn::test::scratch_dir("cli");
  return d;
}

Result ffn_cli(const std::string& args) { return run_ffn(args, temp_dir()); }

std::string tmp(const std::string& name) { return (temp_dir() / name).string(); }

// The options that make the CLI load case c like the golden test does.
std::string case_flags(const GoldenCase& c, const std::string& x_path) {
  const auto& m = c.meta;
  std::ostringstream s;
  s << "--weights " << FFN_GOLDEN << " --prefix " << c.prefix << " --activation " << m["activation"].get<std::string>()
    << " --norm " << m["norm"].get<std::string>() << " --norm-type " << m["norm_type"].get<std::string>()
    << " --eps " << m["eps"].get<double>() << " --layout " << m["layout"].get<std::string>() << " --input " << x_path;
  return s.str();
}

void write_case_inputs(const GoldenCase& c, std::string& flags) {
  write_npy(tmp(c.name + "_x.npy"), Array{c.tensor("x").shape, c.tensor("x").data});
  write_npy(tmp(c.name + "_dy.npy"), Array{c.tensor("dy").shape, c.tensor("dy").data});
  flags = case_flags(c, tmp(c.name + "_x.npy"));
  if (c.meta.contains("lengths")) {
    write_int_npy(tmp(c.name + "_len.npy"), c.meta["lengths"].get<std::vector<int64_t>>(), "<i4");
    flags += " --lengths " + tmp(c.name + "_len.npy");
  }
}

}  // namespace

TEST(Cli, RunMatchesPyTorchOnGoldenCases) {
  int ran = 0;
  for (const GoldenCase& c : golden_cases()) {
    if (c.meta["training"].get<bool>()) continue;
    if (std::stoi(c.name.substr(4)) % 9 != 0 && c.meta["naming"] == "native") continue;  // a sample keeps it quick
    std::string flags;
    write_case_inputs(c, flags);
    const std::string y_path = tmp(c.name + "_y.npy");
    const Result r = ffn_cli("run " + flags + " --output " + y_path + " --threads 2");
    ASSERT_EQ(r.status, 0) << c.describe() << "\n" << r.err;
    const Array y = read_npy(y_path);
    EXPECT_EQ(y.shape, c.tensor("y").shape);
    const Comparison cmp = compare(y.data.data(), c.tensor("y").data.data(), y.data.size());
    EXPECT_TRUE(cmp.ok(kVsTorchY)) << c.describe() << ": " << cmp.describe();
    ++ran;
  }
  EXPECT_GE(ran, 30);
}

TEST(Cli, GradMatchesPyTorchWithDropout) {
  int ran = 0;
  for (const GoldenCase& c : golden_cases()) {
    const bool training = c.meta["training"].get<bool>();
    if (!training && c.meta["naming"] == "native") continue;
    std::string flags;
    write_case_inputs(c, flags);
    const std::string dir = tmp(c.name + "_grads");
    std::ostringstream extra;
    if (training) {
      extra << " --dropout-hidden " << c.meta["dropout_hidden"].get<double>() << " --dropout-output "
            << c.meta["dropout_output"].get<double>() << " --seed " << c.meta["seed"].get<uint64_t>();
    }
    const Result r =
        ffn_cli("grad " + flags + " --grad-output " + tmp(c.name + "_dy.npy") + " --output-dir " + dir + extra.str());
    ASSERT_EQ(r.status, 0) << c.describe() << "\n" << r.err;
    const Array dx = read_npy(dir + "/grad_input.npy");
    const Comparison cdx = compare(dx.data.data(), c.tensor("grad_input").data.data(), dx.data.size());
    EXPECT_TRUE(cdx.ok(kVsTorchDx)) << c.describe() << ": " << cdx.describe();
    // grads.safetensors holds each gradient under its parameter's name in the weights file.
    const SafetensorsFile g = read_safetensors(dir + "/grads.safetensors");
    int params = 0;
    for (const auto& [name, t] : c.file->tensors) {
      if (name.rfind(c.prefix + "grad.", 0) != 0) continue;
      const std::string param = c.prefix + name.substr(c.prefix.size() + 5);
      ASSERT_TRUE(g.tensors.count(param)) << param << " missing in grads.safetensors";
      EXPECT_EQ(g.tensors.at(param).shape, t.shape);
      const Comparison cg = compare(g.tensors.at(param).data.data(), t.data.data(), t.data.size());
      EXPECT_TRUE(cg.ok(kVsTorchDw)) << param << ": " << cg.describe();
      ++params;
    }
    EXPECT_EQ(size_t(params), g.tensors.size());
    ++ran;
  }
  EXPECT_GE(ran, 20);
}

TEST(Cli, InitThenRunUsesTheFilesSettings) {
  const std::string w = tmp("init.safetensors");
  Result r = ffn_cli("init --d-model 8 --d-ff 24 --activation swiglu --no-bias --norm pre --norm-type rmsnorm --seed 3 --output " + w);
  ASSERT_EQ(r.status, 0) << r.err;
  const FeedForward l = FeedForward::load(w);
  EXPECT_EQ(l.config().activation, Activation::swiglu);
  EXPECT_EQ(l.config().norm, NormPlacement::pre);
  EXPECT_EQ(l.config().norm_type, NormType::rmsnorm);
  EXPECT_FALSE(l.config().bias);
  // Same seed, same file.
  const std::string w2 = tmp("init2.safetensors");
  ASSERT_EQ(ffn_cli("init --d-model 8 --d-ff 24 --activation swiglu --no-bias --norm pre --norm-type rmsnorm --seed 3 --output " + w2).status, 0);
  EXPECT_EQ(slurp(w), slurp(w2));
  // ffn run takes activation and norm from the metadata.
  Array x{{3, 8}, std::vector<float>(24)};
  for (size_t i = 0; i < 24; ++i) x.data[i] = float(i % 7) - 3.0f;
  write_npy(tmp("init_x.npy"), x);
  r = ffn_cli("run --weights " + w + " --input " + tmp("init_x.npy") + " --output " + tmp("init_y.npy"));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<float> want(24);
  l.forward(x.data.data(), want.data(), Shape::tokens(3));
  EXPECT_EQ(read_npy(tmp("init_y.npy")).data, want);
}

// A file without ffn's __metadata__ (as a PyTorch state_dict saved to
// safetensors): run, grad and quantize refuse to guess the activation and the
// norm placement (issue 31: a wrong guess was silently wrong by tenths) and
// name the flags to add; with them given, the norm type and eps still taken
// from PyTorch's defaults are named on one stderr line. Nothing is said when
// the flags or the metadata give every setting.
TEST(Cli, SettingsAFileDoesNotRecordMustBeGiven) {
  Config cfg;
  cfg.d_model = 8;
  cfg.d_ff = 16;
  cfg.activation = Activation::gelu;
  cfg.norm = NormPlacement::pre;
  SafetensorsFile f = FeedForward(cfg, 4).to_safetensors();
  const std::string with_meta = tmp("meta.safetensors"), bare = tmp("bare.safetensors");
  write_safetensors(with_meta, f);
  f.metadata.clear();
  write_safetensors(bare, f);
  write_npy(tmp("bare_x.npy"), Array{{2, 8}, test::randn(16, 5)});
  const std::string out = tmp("bare_y.npy");
  const std::string io = " --input " + tmp("bare_x.npy") + " --output " + out;

  fs::remove(out);
  Result r = ffn_cli("run --weights " + bare + io);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(bare + " does not record its activation and norm placement (a plain PyTorch state_dict carries "
                             "no settings): add --activation and --norm (ffn will not guess activation relu, norm post)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
  r = ffn_cli("run --weights " + bare + io + " --activation gelu");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("does not record its norm placement"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("add --norm (ffn will not guess norm post)"), std::string::npos) << r.err;
  // Given both, what is still assumed (PyTorch's defaults) is named.
  r = ffn_cli("run --weights " + bare + io + " --activation gelu --norm pre");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("assumed norm type layernorm, eps 1e-05 (set with --norm-type, --eps)"), std::string::npos) << r.err;
  r = ffn_cli("run --weights " + bare + io + " --activation gelu --norm none");  // no norm: its type and eps do not matter
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  r = ffn_cli("run --weights " + bare + io + " --activation gelu --norm pre --norm-type layernorm --eps 1e-5");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  r = ffn_cli("run --weights " + with_meta + io);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // With the flags the result is the layer's own.
  ASSERT_EQ(ffn_cli("run --weights " + with_meta + io).status, 0);
  const std::vector<float> want = read_npy(out).data;
  ASSERT_EQ(ffn_cli("run --weights " + bare + io + " --activation gelu --norm pre").status, 0);
  EXPECT_EQ(read_npy(out).data, want);

  write_npy(tmp("bare_dy.npy"), Array{{2, 8}, test::randn(16, 6)});
  r = ffn_cli("grad --weights " + bare + " --input " + tmp("bare_x.npy") + " --grad-output " + tmp("bare_dy.npy") +
              " --output-dir " + tmp("bare_grads"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("add --activation and --norm"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp("bare_grads")));
  r = ffn_cli("quantize --weights " + bare + " --dtype int8 --output " + tmp("bare_q.safetensors"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("add --activation and --norm"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp("bare_q.safetensors")));
  // quantize takes the same overrides, and writes them into the file.
  r = ffn_cli("quantize --weights " + bare + " --dtype int8 --activation gelu --norm pre --norm-type layernorm --eps 1e-5 "
              "--output " + tmp("bare_q2.safetensors"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const FeedForward q = FeedForward::load(tmp("bare_q2.safetensors"));
  EXPECT_EQ(q.config().activation, Activation::gelu);
  EXPECT_EQ(q.config().norm, NormPlacement::pre);
  // A bare file without norm tensors: the placement is known (none), the activation is not.
  Config plain = cfg;
  plain.norm = NormPlacement::none;
  SafetensorsFile g = FeedForward(plain, 4).to_safetensors();
  g.metadata.clear();
  write_safetensors(tmp("bare_nonorm.safetensors"), g);
  r = ffn_cli("run --weights " + tmp("bare_nonorm.safetensors") + io);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("does not record its activation (a plain PyTorch state_dict carries no settings): add "
                       "--activation (ffn will not guess activation relu)"),
            std::string::npos)
      << r.err;
}

TEST(Cli, VersionPrintsTheProjectVersion) {
  const Result r = ffn_cli("--version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ffn ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find('.'), std::string::npos) << r.out;  // "ffn 0.2"
}

// The help's list of native quant types is the quant table's (issue 63), not
// a copy: the built-in rows' (this test binary also registers a toy type,
// test_backend_ops.cpp's T4, which the program does not have).
TEST(Cli, GenerateHelpListsTheNativeTypesOfTheTable) {
  std::string native;
  for (const nn::QuantType& q : nn::kQuantTypes)
    if (q.native()) native += (native.empty() ? "" : "/") + std::string(q.name);
  const Result r = ffn_cli("generate --help");
  EXPECT_EQ(r.status, 0) << r.err;
  std::string flat = r.out;  // CLI11 wraps nothing, but be safe about line breaks
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  EXPECT_NE(flat.find("native (default): " + native + " matrices stay quantized"),
            std::string::npos)
      << r.out;
}

TEST(Cli, BenchPrintsJsonAndPassesItsCheck) {
  const Result r = ffn_cli("bench --tokens 40 --d-model 24 --d-ff 72 --repeats 3 --warmup 1 --threads 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"median_s", "min_s", "max_s", "gflops", "tokens_per_s", "check_max_error", "cpu"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_FALSE(j["cpu"].get<std::string>().empty());  // the figures name their machine
  EXPECT_TRUE(j["check_ok"].get<bool>());
  EXPECT_LE(j["min_s"].get<double>(), j["median_s"].get<double>());
  EXPECT_GT(j["gflops"].get<double>(), 0.0);
  const Result text = ffn_cli("bench --tokens 8 --d-model 16 --d-ff 32 --repeats 2 --backward");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("GFLOP/s"), std::string::npos);
}

// A bench that would run for minutes is refused up front (exit 2, one line
// with the estimate and the way out) unless --yes; 10002 calls on 20000
// tokens take many minutes on any CPU we know, and the refusal comes after
// one 512-token trial call.
TEST(Cli, BenchRefusesALongRunWithoutYes) {
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = ffn_cli("bench --tokens 20000 --repeats 10000 --threads 2");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  for (const char* needle : {"--tokens 20000", "10002 calls", "about", "--yes"})
    EXPECT_NE(r.err.find(needle), std::string::npos) << needle << " in: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  // --yes is accepted (a short run: nothing to confirm).
  const Result yes = ffn_cli("bench --tokens 8 --d-model 16 --d-ff 32 --repeats 2 --yes");
  EXPECT_EQ(yes.status, 0) << yes.err;
}

// The demos' console and SVG say the same: the interaction maps' titles carry
// the R² and accuracies printed on the console, rounded alike; approximate
// names sin as sin(pi x).
TEST(Cli, DemoConsoleAndPlotAgree) {
  const std::string svg = tmp("demo_i.svg");
  const Result r = ffn_cli("demo interaction --epochs 2 --train 512 --test 256 --plot " + svg);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string plot = slurp(svg);
  auto two_numbers = [&](const std::string& label) {
    const size_t at = r.out.find(label);
    EXPECT_NE(at, std::string::npos) << label;
    std::istringstream in(r.out.substr(at + label.size()));
    std::string a, b;
    in >> a >> b;
    return std::pair{a, b};
  };
  const auto [lin_r2, ffn_r2] = two_numbers("R^2 on the test set");
  const auto [lin_acc, ffn_acc] = two_numbers("accuracy");
  for (const std::string& t : {"(R² " + lin_r2 + ")", "(R² " + ffn_r2 + ")", "(accuracy " + lin_acc + ")",
                               "(accuracy " + ffn_acc + ")"})
    EXPECT_NE(plot.find(t), std::string::npos) << t;
  const Result s = ffn_cli("demo approximate --function sin --neurons 3 --steps 10 --plot " + tmp("demo_a.svg"));
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_NE(s.out.find("f(x) = sin(pi x) on [-1, 1]"), std::string::npos) << s.out;
  EXPECT_NE(slurp(tmp("demo_a.svg")).find("sin(πx)"), std::string::npos);
}

// ---- bad input ----------------------------------------------------------------

namespace {

struct BadFixture {
  std::string w, x, dy, len;
};

const BadFixture& bad_fixture() {
  static const BadFixture f = [] {
    BadFixture b;
    b.w = tmp("bad_w.safetensors");
    Config cfg;
    cfg.d_model = 4;
    cfg.d_ff = 6;
    FeedForward(cfg, 1).save(b.w);
    b.x = tmp("bad_x.npy");
    write_npy(b.x, Array{{2, 3, 4}, std::vector<float>(24, 0.5f)});
    b.dy = tmp("bad_dy.npy");
    write_npy(b.dy, Array{{2, 3, 4}, std::vector<float>(24, 1.0f)});
    b.len = tmp("bad_len.npy");
    write_int_npy(b.len, {3, 1});
    return b;
  }();
  return f;
}

// Runs `args`, expects exit 2, one line on stderr containing every needle,
// and `output` (if any) not created.
void expect_bad(const std::string& what, const std::string& args, std::vector<std::string> needles,
                const std::string& output = "") {
  if (!output.empty()) fs::remove_all(output);
  const Result r = ffn_cli(args);
  EXPECT_EQ(r.status, 2) << what << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": not one line: " << r.err;
  EXPECT_EQ(r.err.rfind("ffn: error: ", 0), 0u) << what << ": " << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << what << ": '" << n << "' not in: " << r.err;
  if (!output.empty()) {
    EXPECT_FALSE(fs::exists(output)) << what << ": wrote " << output;
  }
  // No temporary file left behind either.
  for (const auto& e : fs::directory_iterator(temp_dir()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << what << ": left " << e.path();
}

void write_raw(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string st(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  return s + header + data;
}

}  // namespace

TEST(CliBadInput, FlagsAndValues) {
  const auto& f = bad_fixture();
  const std::string out = tmp("out.npy");
  const std::string run = "run --weights " + f.w + " --input " + f.x + " --output " + out;
  expect_bad("no command", "", {"subcommand"});
  expect_bad("unknown command", "frobnicate", {"frobnicate"});
  expect_bad("unknown flag", run + " --frobnicate 3", {"--frobnicate"}, out);
  // Issue 31: a mistyped flag is named with the nearest known one, not as the
  // required flag it was meant to be ("--weights is required").
  expect_bad("mistyped required flag", "run --weight " + f.w + " --input " + f.x + " --output " + out,
             {"run: unknown flag --weight; did you mean --weights? (see ffn run --help)"}, out);
  expect_bad("mistyped flag with =", run + " --threds=2", {"unknown flag --threds; did you mean --threads?"}, out);
  expect_bad("mistyped subcommand flag", "demo approximate --plto " + tmp("p.svg"),
             {"demo approximate: unknown flag --plto; did you mean --plot?"});
  expect_bad("missing required", "run --weights " + f.w + " --output " + out, {"--input"}, out);
  expect_bad("bad activation", run + " --activation tanh", {"--activation", "tanh", "relu"}, out);
  expect_bad("bad norm", run + " --norm middle", {"--norm", "middle"}, out);
  expect_bad("bad norm type", run + " --norm-type batchnorm", {"--norm-type", "batchnorm"}, out);
  expect_bad("bad layout", run + " --layout nhwc", {"--layout", "nhwc"}, out);
  expect_bad("threads not a number", run + " --threads many", {"--threads"}, out);
  expect_bad("negative threads", run + " --threads -2", {"--threads"}, out);
  expect_bad("bad eps", run + " --eps -1", {"--eps"}, out);
  expect_bad("dropout out of range", "grad --weights " + f.w + " --input " + f.x + " --grad-output " + f.dy +
                                         " --output-dir " + tmp("gd") + " --dropout 1.5",
             {"--dropout", "[0, 1]"}, tmp("gd"));
  expect_bad("init bad d_model", "init --d-model 0 --output " + tmp("i.st"), {"--d-model"}, tmp("i.st"));
  expect_bad("bench bad tokens", "bench --tokens 0", {"--tokens"});
}

TEST(CliBadInput, Files) {
  const auto& f = bad_fixture();
  const std::string out = tmp("out.npy");
  auto run = [&](const std::string& w, const std::string& x) {
    return "run --weights " + w + " --input " + x + " --output " + out;
  };
  expect_bad("missing weights", run(tmp("nope.safetensors"), f.x), {"nope.safetensors", "cannot open"}, out);
  expect_bad("missing input", run(f.w, tmp("nope.npy")), {"nope.npy", "cannot open"}, out);
  expect_bad("directory as weights", run(temp_dir().string(), f.x), {"is a directory"}, out);
  const std::string bad = tmp("bad.safetensors");
  write_raw(bad, "\x05");
  expect_bad("short safetensors", run(bad, f.x), {bad, "8-byte header"}, out);
  write_raw(bad, st("{\"linear1.weight\":{\"dtype\":\"F32\",\"shape\":[6,4],\"data_offsets\":[0,96]}", ""));
  expect_bad("bad json", run(bad, f.x), {bad, "JSON"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"F32","shape":[6,4],"data_offsets":[0,96]}})", std::string(8, 'a')));
  expect_bad("offsets out of range", run(bad, f.x), {bad, "linear1.weight", "past the data section"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"F32","shape":[6,5],"data_offsets":[0,96]}})", std::string(96, 'a')));
  expect_bad("shape x dtype != bytes", run(bad, f.x), {bad, "linear1.weight", "needs 120 bytes"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"Q4","shape":[6,4],"data_offsets":[0,96]}})", std::string(96, 'a')));
  expect_bad("unknown dtype", run(bad, f.x), {bad, "unknown dtype 'Q4'"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"F32","shape":[-6,4],"data_offsets":[0,96]}})", std::string(96, 'a')));
  expect_bad("negative dim", run(bad, f.x), {bad, "negative dimension"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,96]}})",
                    std::string(96, 'a')));
  expect_bad("huge dims", run(bad, f.x), {bad, "overflows"}, out);
  write_raw(bad, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  expect_bad("huge header length", run(bad, f.x), {bad, "100 MB"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"F32","shape":[6,4],"data_offsets":[0,96]}})", std::string(96, 'a')));
  expect_bad("missing tensor", run(bad, f.x), {bad, "linear2.weight", "not found"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"I32","shape":[6,4],"data_offsets":[0,96]},)"
                    R"("linear2.weight":{"dtype":"F32","shape":[4,6],"data_offsets":[96,192]}})",
                    std::string(192, 'a')));
  expect_bad("integer weights", run(bad, f.x), {bad, "linear1.weight", "I32"}, out);
  write_raw(bad, st(R"({"linear1.weight":{"dtype":"F32","shape":[6,4],"data_offsets":[0,96]},)"
                    R"("linear2.weight":{"dtype":"F32","shape":[6,4],"data_offsets":[96,192]}})",
                    std::string(192, 'a')));
  expect_bad("inconsistent shapes", run(bad, f.x), {bad, "linear2.weight", "[6, 4]", "expected [4, 6]"}, out);
  // Input problems.
  const std::string x5 = tmp("x5.npy");
  write_npy(x5, Array{{3, 5}, std::vector<float>(15)});
  expect_bad("width != d_model", run(f.w, x5), {x5, "[3, 5]", "d_model=4"}, out);
  const std::string x4d = tmp("x4d.npy");
  write_npy(x4d, Array{{1, 1, 3, 4}, std::vector<float>(12)});
  expect_bad("rank 4", run(f.w, x4d), {x4d, "4-D"}, out);
  const std::string x1d = tmp("x1d.npy");
  write_npy(x1d, Array{{4}, std::vector<float>(4)});
  expect_bad("rank 1", run(f.w, x1d), {x1d, "1-D"}, out);
  const std::string xf8 = tmp("xf8.npy");
  {
    std::string h = "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 4), }";
    h += std::string(64 - (10 + h.size() + 1) % 64, ' ') + "\n";
    write_raw(xf8, std::string("\x93NUMPY\x01\x00", 8) + char(h.size()) + char(0) + h + std::string(32, '\0'));
  }
  expect_bad("float64 input", run(f.w, xf8), {xf8, "'<f8'", "float32"}, out);
  const std::string xtrunc = tmp("xtrunc.npy");
  write_raw(xtrunc, slurp(f.x).substr(0, slurp(f.x).size() - 4));
  expect_bad("truncated input", run(f.w, xtrunc), {xtrunc, "truncated"}, out);
  // Lengths problems.
  const std::string lens = tmp("lens.npy");
  write_int_npy(lens, {3, 4});
  expect_bad("length > S", run(f.w, f.x) + " --lengths " + lens, {lens, "length 4", "0..3"}, out);
  write_int_npy(lens, {3, 1, 1});
  expect_bad("wrong count", run(f.w, f.x) + " --lengths " + lens, {lens, "[3]", "expected [2]"}, out);
  write_int_npy(lens, {-1, 1});
  expect_bad("negative length", run(f.w, f.x) + " --lengths " + lens, {lens, "length -1"}, out);
  write_npy(lens, Array{{2}, {1, 2}});
  expect_bad("float lengths", run(f.w, f.x) + " --lengths " + lens, {lens, "int32", "int64"}, out);
  // grad: grad-output of the wrong shape.
  const std::string dy_bad = tmp("dy_bad.npy");
  write_npy(dy_bad, Array{{2, 2, 4}, std::vector<float>(16)});
  const std::string gd = tmp("gd");
  expect_bad("grad-output shape", "grad --weights " + f.w + " --input " + f.x + " --grad-output " + dy_bad +
                                      " --output-dir " + gd,
             {dy_bad, "[2, 2, 4]", "[2, 3, 4]"}, gd);
  // Activation that does not fit the weights.
  expect_bad("gated activation, no gate", run(f.w, f.x) + " --activation swiglu", {f.w, "gate.weight"}, out);
}

TEST(CliBadInput, MoreCases) {
  const auto& f = bad_fixture();
  const std::string out = tmp("out.npy");
  const std::string run = "run --weights " + f.w + " --input " + f.x + " --output " + out;
  expect_bad("threads too large", run + " --threads 100000", {"--threads", "0..1024"}, out);
  expect_bad("negative seed", "init --seed -1 --output " + tmp("s.st"), {"--seed"}, tmp("s.st"));
  expect_bad("huge layer", "init --d-model 16777216 --d-ff 16777216 --output " + tmp("h.st"),
             {"--d-model x --d-ff", "GiB"}, tmp("h.st"));
  expect_bad("huge bench", "bench --tokens 4611686018427387904 --d-model 4", {"--tokens", "GiB"});
  expect_bad("empty output", "run --weights " + f.w + " --input " + f.x + " --output ''", {"empty path"});
  expect_bad("prefix matches nothing", run + " --prefix encoder.layers.9", {"encoder.layers.9.linear1.weight", "not found"},
             out);
  // A tensor name with a newline in it still gives one line.
  const std::string nl = tmp("newline.safetensors");
  {
    const std::string h = "{\"bad\\nname\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((h.size() >> (8 * i)) & 0xff);
    write_raw(nl, bytes + h + "x");
  }
  expect_bad("newline in a name", "run --weights " + nl + " --input " + f.x + " --output " + out, {nl, "not found"}, out);
  // Half the biases (library test covers the message; here the exit status and the line).
  const std::string half = tmp("half_bias.safetensors");
  {
    SafetensorsFile w = read_safetensors(f.w);
    w.tensors.erase("linear2.bias");
    write_safetensors(half, w);
  }
  expect_bad("half the biases", "run --weights " + half + " --input " + f.x + " --output " + out,
             {half, "linear2.bias", "all present or all absent"}, out);
}

TEST(CliBadInput, GradWritesBothFilesOrNeither) {
  const auto& f = bad_fixture();
  const std::string d = tmp("grad_pair");
  fs::remove_all(d);
  fs::create_directories(d + "/grads.safetensors");  // the second output cannot be written
  write_raw(d + "/grad_input.npy", "old");
  const Result r = ffn_cli("grad --weights " + f.w + " --input " + f.x + " --grad-output " + f.dy + " --output-dir " + d);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("grads.safetensors"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(d + "/grad_input.npy"), "old") << "the first file must not be replaced alone";
  size_t entries = 0;
  for (auto it = fs::directory_iterator(d); it != fs::directory_iterator(); ++it) ++entries;
  EXPECT_EQ(entries, 2u) << "no staging directory left behind";
  // A run that creates the directory and fails removes it again.
  const std::string fresh = tmp("grad_fresh");
  fs::remove_all(fresh);
  const Result r2 = ffn_cli("grad --weights " + f.w + " --input " + f.x + " --grad-output " + f.x + "_missing --output-dir " + fresh);
  EXPECT_EQ(r2.status, 2);
  EXPECT_FALSE(fs::exists(fresh));
}

TEST(CliBadInput, SpecialOutputTargets) {
  const auto& f = bad_fixture();
  // A symlink is followed: the file it points to is replaced, the link stays.
  const std::string target = tmp("real_y.npy"), link = tmp("link_y.npy");
  write_raw(target, "old");
  fs::remove(link);
  fs::create_symlink(target, link);
  ASSERT_EQ(ffn_cli("run --weights " + f.w + " --input " + f.x + " --output " + link).status, 0);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_npy(target).shape, (std::vector<int64_t>{2, 3, 4}));
  // A FIFO (or device) is refused, not replaced.
  const std::string fifo = tmp("fifo.npy");
  fs::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_bad("fifo output", "run --weights " + f.w + " --input " + f.x + " --output " + fifo, {fifo, "not a regular file"});
  EXPECT_TRUE(fs::is_fifo(fifo));
  fs::remove(fifo);
}

TEST(CliBadInput, ExistingFilesAreNeverLost) {
  const auto& f = bad_fixture();
  const std::string out = tmp("keep.npy");
  write_raw(out, "precious");
  // A failing run leaves the old output as it was.
  const Result r = ffn_cli("run --weights " + f.w + " --input " + f.x + " --output " + out + " --activation swiglu");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(slurp(out), "precious");
  // Output naming an input is refused.
  const std::string x_copy = tmp("x_copy.npy");
  fs::copy_file(f.x, x_copy, fs::copy_options::overwrite_existing);
  const std::string before = slurp(x_copy);
  expect_bad("output is the input", "run --weights " + f.w + " --input " + x_copy + " --output " + x_copy,
             {"--output", "same file as --input"});
  EXPECT_EQ(slurp(x_copy), before);
  // A successful run replaces the old output completely.
  ASSERT_EQ(ffn_cli("run --weights " + f.w + " --input " + f.x + " --output " + out).status, 0);
  EXPECT_EQ(read_npy(out).shape, (std::vector<int64_t>{2, 3, 4}));
  // --output-dir that is a file.
  expect_bad("output-dir is a file", "grad --weights " + f.w + " --input " + f.x + " --grad-output " + f.dy +
                                         " --output-dir " + out,
             {"--output-dir", "not a directory"});
  EXPECT_EQ(read_npy(out).shape, (std::vector<int64_t>{2, 3, 4}));
  // Output into a directory that does not exist.
  expect_bad("output dir missing", "run --weights " + f.w + " --input " + f.x + " --output " + tmp("no/such/y.npy"),
             {"no/such", "does not exist"});
}

// --check-finite: the first NaN or Inf of the input, a weight or a result is
// reported with its position; exit 2; nothing written. Without it, NaN and Inf
// propagate (exit 0).
TEST(CliBadInput, CheckFinite) {
  Config cfg;
  cfg.d_model = 4;
  cfg.d_ff = 6;
  cfg.norm = NormPlacement::none;
  const FeedForward layer(cfg, 3);
  const std::string w = tmp("cf_w.safetensors"), out = tmp("cf_y.npy");
  layer.save(w);
  Array x{{2, 3, 4}, std::vector<float>(24, 0.5f)};
  x.data[size_t((1 * 3 + 2) * 4 + 3)] = -INFINITY;
  write_npy(tmp("cf_x.npy"), x);
  auto expect_fail = [&](const std::string& args, const std::string& needle) {
    fs::remove(out);
    const Result r = ffn_cli(args + " --check-finite");
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out));
  };
  const std::string run = "run --weights " + w + " --output " + out + " --input ";
  expect_fail(run + tmp("cf_x.npy"), "input is -Inf at sequence 1, position 2, feature 3");
  // Without the flag the Inf propagates.
  ASSERT_EQ(ffn_cli(run + tmp("cf_x.npy")).status, 0);
  const Array y = read_npy(out);
  EXPECT_FALSE(std::isfinite(y.data[size_t((1 * 3 + 2) * 4)]));
  EXPECT_TRUE(std::isfinite(y.data[0]));
  // Padding is never read, so a NaN there is not an error.
  Array xp{{2, 3, 4}, std::vector<float>(24, 0.5f)};
  xp.data[size_t((1 * 3 + 2) * 4 + 1)] = NAN;
  write_npy(tmp("cf_xp.npy"), xp);
  write_int_npy(tmp("cf_len.npy"), {3, 2});
  EXPECT_EQ(ffn_cli(run + tmp("cf_xp.npy") + " --lengths " + tmp("cf_len.npy") + " --check-finite").status, 0);
  expect_fail(run + tmp("cf_xp.npy"), "input is NaN at sequence 1, position 2, feature 1");
  // A weight.
  Weights bad = layer.weights();
  bad.w2[size_t(2 * 6 + 5)] = NAN;
  FeedForward(cfg, bad).save(tmp("cf_bad.safetensors"));
  Array ok{{3, 4}, std::vector<float>(12, 0.25f)};
  write_npy(tmp("cf_ok.npy"), ok);
  expect_fail("run --weights " + tmp("cf_bad.safetensors") + " --output " + out + " --input " + tmp("cf_ok.npy"),
              "tensor 'linear2.weight' is NaN at [2, 5]");
  // A finite input whose result overflows.
  Weights huge = layer.weights();
  for (float& v : huge.w1) v = 1e30f;
  for (float& v : huge.w2) v = 1e30f;
  FeedForward(cfg, huge).save(tmp("cf_huge.safetensors"));
  expect_fail("run --weights " + tmp("cf_huge.safetensors") + " --output " + out + " --input " + tmp("cf_ok.npy"),
              "output is +Inf at token 0, feature 0");
  // grad: the grad-output is checked too, and neither file is written.
  Array dy{{3, 4}, std::vector<float>(12, 1.0f)};
  dy.data[7] = NAN;
  write_npy(tmp("cf_dy.npy"), dy);
  const Result g = ffn_cli("grad --weights " + w + " --input " + tmp("cf_ok.npy") + " --grad-output " + tmp("cf_dy.npy") +
                           " --output-dir " + tmp("cf_grads") + " --check-finite");
  EXPECT_EQ(g.status, 2);
  EXPECT_NE(g.err.find("grad-output is NaN at token 1, feature 3"), std::string::npos) << g.err;
  EXPECT_FALSE(fs::exists(tmp("cf_grads") + "/grad_input.npy"));
}

// Issue 31: each output is checked before the work, not after it (a training
// epoch, a model load). The inputs here are missing too, so the error shows
// which check ran first: the output's names its directory; had the command
// started, the missing input would have been named instead. Nothing is written.
TEST(CliBadInput, OutputsAreCheckedBeforeTheWork) {
  const auto& f = bad_fixture();
  const std::string nodir = tmp("no_such_dir");
  fs::remove_all(nodir);
  const std::string missing = tmp("missing_input.npy"), missing_w = tmp("missing_w.safetensors");
  fs::remove(missing);
  fs::remove(missing_w);
  const std::vector<std::string> why = {nodir, "does not exist"};
  expect_bad("run", "run --weights " + missing_w + " --input " + missing + " --output " + nodir + "/y.npy", why);
  expect_bad("grad", "grad --weights " + missing_w + " --input " + missing + " --grad-output " + missing +
                         " --output-dir " + f.x + "/d",
             {"--output-dir", f.x, "not a directory"});
  expect_bad("encode-grad", "encode-grad --weights " + missing_w + " --input " + missing + " --heads 2 --activation relu"
                            " --norm post --grad-output " + missing + " --output-dir " + f.x + "/d",
             {"--output-dir", f.x, "not a directory"});
  expect_bad("encode", "encode --weights " + missing_w + " --input " + missing + " --heads 2 --activation relu --norm post"
                       " --output " + nodir + "/y.npy", why);
  expect_bad("init", "init --d-model 8 --d-ff 16 --output " + nodir + "/w.safetensors", why);
  expect_bad("quantize", "quantize --weights " + missing_w + " --dtype int8 --output " + nodir + "/q.safetensors", why);
  expect_bad("embed", "embed --model " + tmp("no_model_dir") + " --output " + nodir + "/e.npy hello", why);
  expect_bad("train output", "train --data " + missing + " --targets " + missing + " --output " + nodir + "/w.safetensors", why);
  // The weights' own path is fine, the plot's is not: no weights written either.
  const std::string w_out = tmp("trained_w.safetensors");
  expect_bad("train plot", "train --data " + missing + " --targets " + missing + " --output " + w_out + " --plot " +
                               nodir + "/p.svg",
             why, w_out);
  expect_bad("demo", "demo approximate --steps 10 --plot " + nodir + "/a.svg", why);
  // Unwritable directory (not for root, who may write anywhere).
  if (geteuid() != 0) {
    const std::string ro = tmp("read_only_dir");
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    expect_bad("read-only dir", "run --weights " + missing_w + " --input " + missing + " --output " + ro + "/y.npy",
               {ro, "cannot write"});
    fs::permissions(ro, fs::perms::owner_all);
  }
}
