// The flags ffn run and ffn grad share: the layer's file and the input.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "commands.hpp"
#include "ffn/ffn.hpp"

namespace ffn::cli {

struct LayerArgs {
  std::string weights, prefix, input, lengths, layout = "tokens";
  SettingOverrides settings;
  int threads = 0;
  bool check_finite = false;

  void add(CLI::App* app) {
    app->add_option("--weights", weights, "weights file (safetensors)")->required();
    app->add_option("--prefix", prefix, "tensor name prefix, e.g. encoder.layers.0.");
    app->add_option("--input", input, "input array (.npy float32): [T, d_model], [B, S, d_model] or with --layout ncw [B, d_model, S]")
        ->required();
    settings.add(app);
    app->add_option("--layout", layout, "tokens (default) or ncw (channels first, Conv1d view)");
    app->add_option("--lengths", lengths, "int32/int64 .npy of B sequence lengths; positions past them are padding");
    app->add_option("--threads", threads, "threads, 0 = all cores (default 0)");
    app->add_flag("--check-finite", check_finite,
                  "fail (exit 2, nothing written) at the first NaN or Inf in the input, weights or results");
  }

  // --tensor-parallel: the arguments every rank takes (rank 0 notes assumed settings itself).
  void parallel_args(ParallelArgs& p, LoadOptions lo, int threads) const {
    p.weights = weights, p.input = input, p.lengths = lengths;
    p.layout = parse_layout(layout, "--layout");
    p.load = lo;
    p.threads = threads;
  }

  LoadOptions load_options(float p_hidden, float p_output) const {
    LoadOptions o;
    o.prefix = prefix;
    settings.apply(o);
    o.dropout_hidden = p_hidden;
    o.dropout_output = p_output;
    return o;
  }
};

inline Input read_input(const LayerArgs& a, const Config& cfg) {
  return read_input(a.input, a.lengths, parse_layout(a.layout, "--layout"), cfg.d_model, a.weights);
}

}  // namespace ffn::cli
