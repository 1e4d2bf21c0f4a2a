// ffn grad: the layer backward, the gradients of the input and of every parameter.
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "layer_args.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"

namespace {

using namespace ffn;
using namespace ffn::cli;

// ---- grad ---------------------------------------------------------------------

struct GradArgs : cli::LayerArgs {
  std::string grad_output, output_dir;
  bool tensor_parallel = false;
  std::optional<float> dropout, dropout_hidden, dropout_output;
  uint64_t seed = 0;
};

int cmd_grad(const GradArgs& a, const cli::Common& c) {
  auto check_p = [](const std::optional<float>& p, const char* flag) {
    if (p && !(*p >= 0.0f && *p <= 1.0f)) throw Error(std::string(flag) + ": expected a probability in [0, 1], got " + num(*p));
  };
  check_p(a.dropout, "--dropout");
  check_p(a.dropout_hidden, "--dropout-hidden");
  check_p(a.dropout_output, "--dropout-output");
  const float p_hidden = a.dropout_hidden.value_or(a.dropout.value_or(0.0f));
  const float p_output = a.dropout_output.value_or(a.dropout.value_or(0.0f));
  const bool training = a.dropout || a.dropout_hidden || a.dropout_output;
  const int threads = threads_or_throw(a.threads);

  LoadOptions lo = a.load_options(p_hidden, p_output);
  lo.weight_dtype = WeightDtype::fp32;  // a quantized file: gradients at the values it stores
  if (a.tensor_parallel) {
    if (a.check_finite) throw Error("--check-finite: not with --tensor-parallel");
#ifdef FFN_HAVE_MPI
    cli::ParallelGradArgs p;
    a.parallel_args(p, lo, threads);
    p.grad_output = a.grad_output;
    p.training = training;
    p.seed = a.seed;
    p.targets = cli::grad_target_paths(a.output_dir);
    p.check_outputs = [&a] {
      cli::grad_targets(a.output_dir, {{"--input", a.input}, {"--weights", a.weights},
                                       {"--grad-output", a.grad_output}, {"--lengths", a.lengths}});
    };
    return cli::grad_tensor_parallel(p);
#else
    cli::no_mpi("--tensor-parallel");
#endif
  }
  const cli::GradTargets targets = cli::grad_targets(
      a.output_dir, {{"--input", a.input}, {"--weights", a.weights}, {"--grad-output", a.grad_output}, {"--lengths", a.lengths}});
  const FeedForward layer = FeedForward::load(a.weights, lo);
  cli::note_assumed(a.weights, layer.assumed_settings());
  const Input in = cli::read_input(a, layer.config());
  const Array dy = read_npy(a.grad_output);
  if (dy.shape != in.x.shape)
    throw Error(a.grad_output + ": grad-output has shape " + shape_str(dy.shape) + ", expected the input's shape " +
                shape_str(in.x.shape));

  RunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  ro.training = training;
  ro.seed = a.seed;
  Array y;
  y.data.resize(in.x.data.size());
  ForwardCache cache;
  layer.forward(in.x.data.data(), y.data.data(), in.shape, ro, &cache);
  Array dx;
  dx.shape = in.x.shape;
  dx.data.resize(in.x.data.size());
  Weights grads;
  layer.backward(in.x.data.data(), dy.data.data(), in.shape, cache, dx.data.data(), grads, ro);
  if (a.check_finite) {
    const bool three_d = in.x.shape.size() == 3;
    const int64_t d = layer.config().d_model;
    cli::check_finite_weights(layer.config(), layer.weights(), layer.names(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, d, three_d, a.input + ": input");
    check_finite_tokens(dy.data.data(), in.shape, d, three_d, a.grad_output + ": grad-output");
    check_finite_tokens(y.data.data(), in.shape, d, three_d, "output");
    check_finite_tokens(dx.data.data(), in.shape, d, three_d, "grad_input");
    cli::check_finite_weights(layer.config(), grads, layer.names(), "gradient");
  }

  cli::write_gradient_pair(targets, dx, [&](const std::string& path) { layer.save_gradients(path, grads); });
  return 0;
}

}  // namespace

namespace ffn::cli {

Command add_grad(CLI::App& app) {
  auto a = std::make_shared<GradArgs>();
  CLI::App* cmd = app.add_subcommand("grad", "backward pass: gradients of the input and of every parameter");
  a->add(cmd);
  cmd->add_option("--grad-output", a->grad_output, "dL/dy (.npy), the input's shape")->required();
  cmd->add_option("--output-dir", a->output_dir, "writes grad_input.npy and grads.safetensors here")->required();
  cmd->add_flag("--tensor-parallel", a->tensor_parallel,
                "under mpirun -np P: each rank computes its shards' gradients and writes them into the one "
                "grads.safetensors itself; the same bytes as one process");
  cmd->add_option("--dropout", a->dropout, "dropout p at both sites (hidden and output) unless --dropout-hidden/--dropout-output set that site; enables training mode");
  cmd->add_option("--dropout-hidden", a->dropout_hidden, "dropout p after the activation (overrides --dropout there)");
  cmd->add_option("--dropout-output", a->dropout_output, "dropout p after W2 (overrides --dropout there)");
  cmd->add_option("--seed", a->seed, "dropout seed")->check(CLI::NonNegativeNumber);
  return {cmd, [a](const Common& c) { return cmd_grad(*a, c); }, Mpi::tensor_parallel, &a->tensor_parallel};
}

}  // namespace ffn::cli
