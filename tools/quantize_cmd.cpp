// ffn quantize: the layer with bf16, fp16 or int8 weight matrices (int8: outlier channels calibrated).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"

namespace {

using namespace ffn;
using namespace ffn::cli;

// ---- quantize -------------------------------------------------------------------

struct QuantizeArgs {
  std::string weights, prefix, dtype, output, calibrate;
  float outlier_threshold = 6.0f;
  CLI::Option* o_threshold = nullptr;
  cli::SettingOverrides settings;  // written into the output's __metadata__
};

void cmd_quantize(const QuantizeArgs& a, const cli::Common& c) {
  io::check_writable_target(a.output);
  const WeightDtype dtype = parse_weight_dtype(a.dtype, "--dtype");
  cli::check_not_an_input(a.output, "--output", {{"--weights", a.weights}, {"--calibrate", a.calibrate}});
  LoadOptions lo;
  lo.prefix = a.prefix;
  lo.weight_dtype = dtype;
  a.settings.apply(lo);
  if (a.calibrate.empty() && a.o_threshold->count()) throw Error("--outlier-threshold: only with --calibrate");
  if (!a.calibrate.empty()) {
    if (dtype != WeightDtype::int8) throw Error("--calibrate: only with --dtype int8");
    if (!(a.outlier_threshold >= 0.0f) || !std::isfinite(a.outlier_threshold))
      throw Error("--outlier-threshold: expected a finite number >= 0, got " + std::to_string(a.outlier_threshold));
    lo.weight_dtype = WeightDtype::fp32;  // quantized below, with the channels
  }
  FeedForward layer = FeedForward::load(a.weights, lo);
  cli::note_assumed(a.weights, layer.assumed_settings());
  if (!a.calibrate.empty()) {
    // Outlier input channels from the inputs' max |x| per channel (every row of the file).
    const Array x = read_npy(a.calibrate);
    const int64_t d = layer.config().d_model;
    if (x.shape.empty() || x.shape.back() != d)
      throw Error("--calibrate " + a.calibrate + ": expected float32 [..., d_model = " + std::to_string(d) + "], got shape " +
                  shape_str(x.shape));
    std::vector<float> absmax;
    layer.input_absmax(x.data.data(), x.numel() / d, absmax, c.isa);
    const Int8Options opts = Int8Options::outliers(absmax, a.outlier_threshold);
    layer = layer.converted(WeightDtype::int8, opts);
  }
  write_safetensors(a.output, layer.to_safetensors(layer.unowned(a.weights)));  // names kept, other tensors copied
  if (!a.calibrate.empty()) {
    const std::vector<int64_t>& kept = layer.fp32_input_channels();
    std::string list;
    for (int64_t c : kept) list += (list.empty() ? "" : ", ") + std::to_string(c);
    std::printf("ffn quantize: %zu input channel(s) with max |x| > %g kept in fp32%s%s%s\n", kept.size(),
                double(a.outlier_threshold), list.empty() ? "" : ": ", list.c_str(), kept.size() == 16 ? " (at most 16)" : "");
  }
}

}  // namespace

namespace ffn::cli {

Command add_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand("quantize", "write the layer with bf16, fp16 or int8 weight matrices");
  cmd->add_option("--weights", a->weights, "weights file (safetensors)")->required();
  cmd->add_option("--prefix", a->prefix, "tensor name prefix, e.g. encoder.layers.0.");
  cmd->add_option("--dtype", a->dtype, "int8, bf16, fp16 (or fp32)")->required();
  cmd->add_option("--output", a->output, "weights file to write (.safetensors)")->required();
  cmd->add_option("--calibrate", a->calibrate,
                  "int8: inputs X.npy [..., d_model]; input channels whose max |x| exceeds "
                  "--outlier-threshold are kept in fp32 (LLM.int8()'s outlier decomposition)");
  a->o_threshold = cmd->add_option("--outlier-threshold", a->outlier_threshold,
                                   "--calibrate: max |x| above which a channel is kept in fp32 (default 6)");
  a->settings.add(cmd);
  return {cmd, [a](const Common& c) { return cmd_quantize(*a, c), 0; }};
}

}  // namespace ffn::cli
