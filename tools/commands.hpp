// Subcommands defined outside ffn_main.cpp. Each registers its options on
// the app and returns the action to run when it was chosen; the action
// returns the exit status and throws ffn::Error for bad input.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ffn/diagnostics.hpp"
#include "ffn/encoder.hpp"
#include "ffn/ffn.hpp"
#include "ffn/train.hpp"

namespace ffn::cli {

// Exit status of `ffn train` when a step's loss or gradient is NaN or Inf.
constexpr int kExitDiverged = 3;

// Refuses a job whose buffers would not fit in this machine's memory, naming the flags.
inline void check_memory(double bytes, const std::string& flags) {
  const double phys = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (bytes > phys) {
    throw Error(flags + ": needs " + num(bytes / double(1ull << 30)) + " GiB, more than this machine's " +
                num(phys / double(1ull << 30)) + " GiB of memory");
  }
}

// The ranks mpirun (Open MPI, MPICH, Intel MPI) started this process among; 0 if none.
inline int launched_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  return 0;
}

// "5 17 0" -> {5, 17, 0}: token ids, space-separated non-negative integers;
// `where` names the input (a line, a flag) in messages. Empty text: no ids.
inline std::vector<int64_t> parse_token_ids(const std::string& text, const std::string& where) {
  std::vector<int64_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i) break;
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + j, v);
    if (ec != std::errc() || end != text.data() + j || v < 0)
      throw Error(where + ": '" + text.substr(i, j - i) + "' is not a token id (--ids: space-separated non-negative integers)");
    ids.push_back(v);
    i = j;
  }
  return ids;
}

// (flag, path) pairs, e.g. {"--input", "x.npy"}; empty paths are skipped.
using Flags = std::vector<std::pair<std::string, std::string>>;

// Refuses an output path that names one of the inputs (the user's file would be replaced).
inline void check_not_an_input(const std::string& out, const std::string& flag, const Flags& inputs) {
  std::error_code ec;
  if (!std::filesystem::exists(out, ec)) return;
  for (const auto& [in_flag, in] : inputs) {
    if (!in.empty() && std::filesystem::equivalent(out, in, ec))
      throw Error(flag + " " + out + " is the same file as " + in_flag + "; refusing to overwrite an input");
  }
}

// Refuses two outputs with the same path (the second would replace the first).
inline void check_distinct(const Flags& outputs) {
  auto norm = [](const std::string& p) { return std::filesystem::absolute(p).lexically_normal(); };
  for (size_t i = 0; i < outputs.size(); ++i)
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[i].second.empty() && !outputs[j].second.empty() && norm(outputs[i].second) == norm(outputs[j].second))
        throw Error(outputs[j].first + " " + outputs[j].second + " is the same file as " + outputs[i].first);
}

// Flags that override a weights file's settings (run, grad, quantize).
struct SettingOverrides {
  std::string activation, norm, norm_type;
  std::optional<float> eps;

  void add(CLI::App* app) {
    app->add_option("--activation", activation, "relu, gelu, gelu_tanh, silu, swiglu, geglu, reglu, geglu_tanh (default: from the file)");
    app->add_option("--norm", norm, "post, pre or none (default: from the file)");
    app->add_option("--norm-type", norm_type, "layernorm or rmsnorm (default: from the file)");
    app->add_option("--eps", eps, "norm epsilon (default: from the file, else 1e-5)");
  }
  // Sets the options given; throws Error naming the flag.
  void apply(LoadOptions& o) const {
    if (!activation.empty()) o.activation = parse_activation(activation, "--activation");
    if (!norm.empty()) o.norm = parse_norm_placement(norm, "--norm");
    if (!norm_type.empty()) o.norm_type = parse_norm_type(norm_type, "--norm-type");
    if (eps) {
      if (!(*eps > 0.0f) || !std::isfinite(*eps)) throw Error("--eps: expected a positive number, got " + num(*eps));
      o.eps = eps;
    }
  }
};

// Settings a load took from a default or a guess (FeedForward::assumed_settings):
// one line on stderr saying so and which flags set them. A PyTorch
// state_dict carries no activation, norm placement or eps.
// A file that records neither the activation nor the norm placement (a plain
// PyTorch state_dict) is refused unless the command line gives them: a wrong
// guess is silently wrong by tenths. Names the flags to add.
inline void refuse_guessed_settings(const std::string& path, const std::vector<AssumedSetting>& assumed) {
  std::string what, flags;
  for (const auto& [w, f] : assumed)
    if (f == "--activation" || f == "--norm") {
      what += (what.empty() ? "" : ", ") + w;
      flags += (flags.empty() ? "" : " and ") + f;
    }
  if (!flags.empty())
    throw Error(path + " does not record its " + (flags.find(" and ") != std::string::npos ? "activation and norm placement"
                                                  : flags == "--norm" ? "norm placement" : "activation") +
                " (a plain PyTorch state_dict carries no settings): add " + flags + " (ffn will not guess " + what + ")");
}

// Refuses guessed activation/norm (above); notes on stderr the other settings
// taken from defaults (norm type, eps: PyTorch's own defaults).
inline void note_assumed(const std::string& path, const std::vector<AssumedSetting>& assumed) {
  refuse_guessed_settings(path, assumed);
  if (assumed.empty()) return;
  std::string what, flags;
  for (const auto& [w, f] : assumed) {
    what += (what.empty() ? "" : ", ") + w;
    flags += (flags.empty() ? "" : ", ") + f;
  }
  std::fprintf(stderr, "ffn: note: %s does not record %s; assumed %s (set with %s)\n", path.c_str(),
               assumed.size() == 1 ? "this setting" : "these settings", what.c_str(), flags.c_str());
}

// The flags that shape a fresh layer (ffn init, ffn train).
struct ArchitectureArgs {
  std::string activation = "relu", norm = "post", norm_type = "layernorm";
  bool no_bias = false;
  float eps = 1e-5f;
  // The options as registered, to tell a flag given from its default.
  CLI::Option *o_activation = nullptr, *o_norm = nullptr, *o_norm_type = nullptr, *o_eps = nullptr,
              *o_no_bias = nullptr;

  void add(CLI::App* app) {
    o_activation = app->add_option("--activation", activation, "relu (default), gelu, gelu_tanh, silu, swiglu, geglu, reglu, geglu_tanh");
    o_no_bias = app->add_flag("--no-bias", no_bias, "no b1, bg, b2");
    o_norm = app->add_option("--norm", norm, "post (default), pre or none");
    o_norm_type = app->add_option("--norm-type", norm_type, "layernorm (default) or rmsnorm");
    o_eps = app->add_option("--eps", eps, "norm epsilon (default 1e-5)");
  }
  void check_eps() const {
    if (!(eps > 0.0f) || !std::isfinite(eps)) throw Error("--eps: expected a positive number, got " + num(eps));
  }
  // Sets cfg's activation, norm, norm type, bias and eps; throws Error naming the flag.
  void apply(Config& cfg) const {
    cfg.activation = parse_activation(activation, "--activation");
    cfg.norm = parse_norm_placement(norm, "--norm");
    cfg.norm_type = parse_norm_type(norm_type, "--norm-type");
    cfg.bias = !no_bias;
    check_eps();
    cfg.eps = eps;
  }
  // For a layer loaded from a file: the settings given on the command line
  // override the file's (as in ffn run).
  void apply_given(LoadOptions& o) const {
    if (o_activation && o_activation->count()) o.activation = parse_activation(activation, "--activation");
    if (o_norm && o_norm->count()) o.norm = parse_norm_placement(norm, "--norm");
    if (o_norm_type && o_norm_type->count()) o.norm_type = parse_norm_type(norm_type, "--norm-type");
    if (o_eps && o_eps->count()) {
      check_eps();
      o.eps = eps;
    }
  }
};

// The flags every command takes, registered by tools/ffn_main.cpp's registry
// and handed to the command's run: the public calls a command makes take
// their ISA from here (RunOptions::isa and its kin), and nothing below
// chooses one.
struct Common {
  Isa isa = Isa::automatic;  // --isa: auto (FFN_ISA, else the best), scalar, avx2, avx512, amx
};

// What a command does when started under mpirun (tools/ffn_main.cpp refuses
// the commands that would run whole on every rank).
enum class Mpi { refused, tensor_parallel, data_parallel };

// A command: its CLI11 subcommand (its own flags), what it runs, and how it
// runs under mpirun. A command family adds one file and one line in
// tools/ffn_main.cpp's registry (CONTRIBUTING.md, "add a command").
struct Command {
  CLI::App* app = nullptr;
  std::function<int(const Common&)> run;
  Mpi mpi = Mpi::refused;
  const bool* tensor_parallel = nullptr;  // Mpi::tensor_parallel: the flag that asks for it
  bool writes_output = true;
};

// Without MPI the flag exists and says so.
[[noreturn]] inline void no_mpi(const char* flag) {
  throw Error(std::string(flag) + ": this ffn was built without MPI (scripts/setup.sh installs libopenmpi-dev; "
              "then cmake -DFFN_MPI=ON)");
}

Command add_run(CLI::App& app);       // ffn run (tools/run_cmd.cpp)
Command add_grad(CLI::App& app);      // ffn grad (tools/grad_cmd.cpp)
Command add_init(CLI::App& app);      // ffn init (tools/init_cmd.cpp)
Command add_quantize(CLI::App& app);  // ffn quantize (tools/quantize_cmd.cpp)
Command add_bench(CLI::App& app);     // ffn bench (tools/bench_cmd.cpp, its modes in tools/bench/)
// The encoder settings of ffn init and ffn bench --encoder from the FFN's
// flags plus --layers and --heads (tools/init_cmd.cpp).
EncoderConfig encoder_config(int64_t d_model, int64_t d_ff, const Config& ffn, int64_t layers, int64_t heads);

Command add_train(CLI::App& app);  // ffn train
Command add_generate(CLI::App& app);  // ffn generate (tools/generate_cmd.cpp)
Command add_tokenize(CLI::App& app);  // ffn tokenize
Command add_chat(CLI::App& app);      // ffn chat
Command add_serve(CLI::App& app);     // ffn serve (tools/serve_cmd.cpp, src/serve/)
Command add_rerank(CLI::App& app);    // ffn rerank (tools/rerank_cmd.cpp)
// ffn bench --generate: prompt processing and generation tokens/s.
int bench_generate(const std::string& model, const std::string& compute, int64_t prompt_tokens, int64_t new_tokens, int threads, int repeats,
                   int warmup, bool json, bool yes, Isa isa);
Command add_demo(CLI::App& app);   // ffn demo approximate | interaction
Command add_encode(CLI::App& app);       // ffn encode
Command add_encode_grad(CLI::App& app);  // ffn encode-grad
Command add_embed(CLI::App& app);        // ffn embed (tools/embed_cmd.cpp)
Command add_decode(CLI::App& app);       // ffn decode (tools/encoder_cmd.cpp)
Command add_translate(CLI::App& app);    // ffn translate (tools/translate_cmd.cpp)

// Lines of a UTF-8 text file ("\r\n" or "\n"; a last line without a newline
// counts), and up to n more lines of standard input (tools/embed_cmd.cpp).
std::vector<std::string> read_lines(const std::string& path);
std::vector<std::string> read_stdin_lines(int64_t n);
Command add_decode_grad(CLI::App& app);  // ffn decode-grad

// ---- shared by the commands (tools/common.cpp) ------------------------------

// The median of the timed calls (the figure every bench prints).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


// An input array and the shape it describes.
struct Input {
  Array x;
  Shape shape;
};
// Reads --input ([T, d] or [B, S, d]; ncw: [d, S] or [B, d, S]) and --lengths,
// checking the width against d (from `weights`).
Input read_input(const std::string& input, const std::string& lengths, Layout layout, int64_t d,
                 const std::string& weights);
// "NaN", "+Inf" or "-Inf".
const char* kind_of(float v);
// Throws Error at the first NaN or Inf of any parameter (or gradient), naming `what`, the tensor and the index.
void check_finite_weights(const Config& cfg, const Weights& w, const TensorNames& names, const std::string& what);
// Throws Error at the first NaN or Inf outside the padding, naming `what` and the position.
void check_finite_tokens(const float* v, const Shape& shape, int64_t d, bool three_d, const std::string& what);
// --threads checked: 0..kMaxThreads.
int threads_or_throw(int t);

// The two files of --output-dir (grad_input.npy, grads.safetensors), checked
// before any work: not an input, writable.
struct GradTargets {
  std::string dir, grad_input, grads;
  std::string grad_memory;  // decode-grad's third file (empty otherwise)
};
// memory: decode-grad's grad_memory.npy as well.
GradTargets grad_targets(const std::string& output_dir, const Flags& inputs, bool memory = false);
GradTargets grad_target_paths(const std::string& output_dir, bool memory = false);  // the paths alone, unchecked
// Writes the files (with dmemory: grad_memory.npy too) into a staging
// directory, then renames them into place: a failure or a signal leaves none
// (nor a directory this run created).
void write_gradient_pair(const GradTargets& t, const Array& dx, const std::function<void(const std::string&)>& save_grads,
                         const Array* dmemory = nullptr);

// ffn bench --encoder and ffn init --encoder (tools/encoder_cmd.cpp).
struct EncoderBenchArgs {
  int64_t batch = 8, seq = 128;
  bool causal = false;
};
// ffn bench --embed (tools/embed_cmd.cpp): texts per second of ffn embed.
struct EmbedBenchArgs {
  std::string model, input_file, text, dtype = "fp32", compute = "fp32", int8_outliers, int8_attention;  // "", on or off
  int64_t batch = 32;
  Isa isa = Isa::automatic;
};
int bench_embed(const EmbedBenchArgs& a, int threads, int repeats, int warmup, bool json);
// ffn bench --translate (tools/translate_cmd.cpp): generate on the sources of
// --input-file (token ids per line), timed.
struct TranslateBenchArgs {
  std::string model, input_file, dtype = "fp32";
  int64_t batch = 32;
  std::optional<int64_t> beams, max_new_tokens;
  Isa isa = Isa::automatic;
};
int bench_translate(const TranslateBenchArgs& a, int threads, int repeats, int warmup, bool json);
// ffn run / bench --tensor-parallel (tools/parallel_cmd.cpp, with MPI only).
struct ParallelArgs {  // what run and grad share
  std::string weights, input, lengths;
  Layout layout = Layout::tokens;
  LoadOptions load;
  int threads = 0;
  // The outputs' checks (rank 0, which writes, runs them first; every rank
  // then stops with its error, or none does).
  std::function<void()> check_outputs;
};
struct ParallelRunArgs : ParallelArgs {
  std::string output;
  Compute compute = Compute::fp32;
};
int run_tensor_parallel(const ParallelRunArgs& a);
struct ParallelGradArgs : ParallelArgs {
  std::string grad_output;
  bool training = false;
  uint64_t seed = 0;
  GradTargets targets;
};
int grad_tensor_parallel(const ParallelGradArgs& a);
// Data-parallel ffn train under mpirun: body on every rank with the team
// and agree (Comm::agree: collective; throws on every rank if any rank
// passed an error), errors ending every rank as run's do.
using Agree = std::function<void(const std::string& error)>;
int train_data_parallel(const std::function<int(const Team&, const Agree&)>& body);
// ro.threads 0: the cores shared among the ranks.
int bench_tensor_parallel(const FeedForward& whole, int64_t tokens, RunOptions ro, int repeats, int warmup, bool json,
                          uint64_t seed);
void init_encoder(const EncoderConfig& cfg, uint64_t seed, const std::string& output);
// Returns the exit status (1 when the check against the reference fails).
int bench_encoder(const EncoderConfig& cfg, const EncoderBenchArgs& e, const RunOptions& base, bool backward,
                  int repeats, int warmup, uint64_t seed, bool json);

}  // namespace ffn::cli
