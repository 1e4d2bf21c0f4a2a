// Subcommands defined outside ffn_main.cpp. Each registers its options on
// the app and returns the action to run when it was chosen; the action
// returns the exit status and throws ffn::Error for bad input.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/format.hpp"
#include "ffn/ffn.hpp"

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

// The flags that shape a fresh layer (ffn init, ffn train).
struct ArchitectureArgs {
  std::string activation = "relu", norm = "post", norm_type = "layernorm";
  bool no_bias = false;
  float eps = 1e-5f;

  void add(CLI::App* app) {
    app->add_option("--activation", activation, "relu (default), gelu, gelu_tanh, silu, swiglu, geglu, reglu");
    app->add_flag("--no-bias", no_bias, "no b1, bg, b2");
    app->add_option("--norm", norm, "post (default), pre or none");
    app->add_option("--norm-type", norm_type, "layernorm (default) or rmsnorm");
    app->add_option("--eps", eps, "norm epsilon (default 1e-5)");
  }
  // Sets cfg's activation, norm, norm type, bias and eps; throws Error naming the flag.
  void apply(Config& cfg) const {
    cfg.activation = parse_activation(activation, "--activation");
    cfg.norm = parse_norm_placement(norm, "--norm");
    cfg.norm_type = parse_norm_type(norm_type, "--norm-type");
    cfg.bias = !no_bias;
    if (!(eps > 0.0f) || !std::isfinite(eps)) throw Error("--eps: expected a positive number, got " + num(eps));
    cfg.eps = eps;
  }
};

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_train(CLI::App& app);  // ffn train
Command add_demo(CLI::App& app);   // ffn demo approximate | interaction

}  // namespace ffn::cli
