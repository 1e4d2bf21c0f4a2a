// ffn init: a freshly initialized layer (or, --encoder, a stack of encoder layers).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"

namespace {

using namespace ffn;
using namespace ffn::cli;

// ---- init ---------------------------------------------------------------------

struct InitArgs {
  int64_t d_model = 512, d_ff = 2048;
  cli::ArchitectureArgs arch;
  std::string output;
  uint64_t seed = 0;
  // --encoder: a stack of encoder layers (attention + FFN) instead of one FFN sublayer.
  bool encoder = false, final_norm = false;
  int64_t layers = 1, heads = 8;
  CLI::Option *o_layers = nullptr, *o_heads = nullptr, *o_final_norm = nullptr;
};

void cmd_init(const InitArgs& a) {
  Config cfg;
  cfg.d_model = a.d_model;
  cfg.d_ff = a.d_ff;
  if (a.d_model < 1) throw Error("--d-model: expected a positive integer, got " + std::to_string(a.d_model));
  if (a.d_ff < 1) throw Error("--d-ff: expected a positive integer, got " + std::to_string(a.d_ff));
  a.arch.apply(cfg);
  if (!a.encoder) {
    for (const CLI::Option* o : {a.o_layers, a.o_heads, a.o_final_norm})
      if (o->count()) throw Error(o->get_name() + ": needs --encoder (a plain FFN layer has no attention)");
  } else {
    EncoderConfig e = cli::encoder_config(a.d_model, a.d_ff, cfg, a.layers, a.heads);
    e.final_norm = a.final_norm;
    cli::init_encoder(e, a.seed, a.output);
    return;
  }
  io::check_writable_target(a.output);
  cli::check_memory(4.0 * (is_gated(cfg.activation) ? 3 : 2) * double(a.d_model) * double(a.d_ff), "--d-model x --d-ff");
  FeedForward layer(cfg, a.seed);
  layer.save(a.output);
}

}  // namespace

namespace ffn::cli {

EncoderConfig encoder_config(int64_t d_model, int64_t d_ff, const Config& ffn, int64_t layers, int64_t heads) {
  if (layers < 1) throw Error("--layers: expected a positive integer, got " + std::to_string(layers));
  if (heads < 1 || d_model % heads != 0)
    throw Error("--heads: expected a divisor of --d-model " + std::to_string(d_model) + ", got " + std::to_string(heads));
  if (ffn.norm == NormPlacement::none) throw Error("--norm: an encoder layer's norm is post or pre, got none");
  EncoderConfig e;
  e.d_model = d_model;
  e.d_ff = d_ff;
  e.layers = layers;
  e.heads = heads;
  e.activation = ffn.activation;
  e.norm = ffn.norm;
  e.norm_type = ffn.norm_type;
  e.eps = ffn.eps;
  e.bias = ffn.bias;
  return e;
}

Command add_init(CLI::App& app) {
  auto a = std::make_shared<InitArgs>();
  CLI::App* cmd = app.add_subcommand("init", "write a freshly initialized layer (PyTorch nn.Linear distribution)");
  cmd->add_option("--d-model", a->d_model, "model width (default 512)");
  cmd->add_option("--d-ff", a->d_ff, "hidden width (default 2048)");
  a->arch.add(cmd);
  cmd->add_option("--seed", a->seed, "seed of the initialization (optional, default 0)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--output", a->output, "weights file to write (.safetensors)")->required();
  cmd->add_flag("--encoder", a->encoder, "a stack of encoder layers (multi-head attention + this FFN), nn.TransformerEncoder names");
  a->o_layers = cmd->add_option("--layers", a->layers, "--encoder: layers (default 1)");
  a->o_heads = cmd->add_option("--heads", a->heads, "--encoder: attention heads, a divisor of --d-model (default 8)");
  a->o_final_norm = cmd->add_flag("--final-norm", a->final_norm, "--encoder: a norm after the last layer (nn.TransformerEncoder's norm)");
  return {cmd, [a](const Common&) { return cmd_init(*a), 0; }};
}

}  // namespace ffn::cli
