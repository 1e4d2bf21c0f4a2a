// ffn run: the layer forward, --input X.npy -> --output Y.npy (with MPI, --tensor-parallel).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "commands.hpp"
#include "layer_args.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"

namespace {

using namespace ffn;
using namespace ffn::cli;

struct RunArgs : cli::LayerArgs {
  std::string output, dtype, compute = "fp32";
  bool tensor_parallel = false;
};

int cmd_run(const RunArgs& a, const cli::Common& c) {
  if (!a.tensor_parallel) io::check_writable_target(a.output);  // under mpirun: rank 0 checks, all agree
  const int threads = threads_or_throw(a.threads);
  LoadOptions lo = a.load_options(0, 0);
  if (!a.dtype.empty()) lo.weight_dtype = parse_weight_dtype(a.dtype, "--dtype");
  const Compute compute = parse_compute(a.compute, "--compute");
  if (a.tensor_parallel) {
    if (a.check_finite) throw Error("--check-finite: not with --tensor-parallel");
#ifdef FFN_HAVE_MPI
    cli::ParallelRunArgs p;
    a.parallel_args(p, lo, threads);
    p.check_outputs = [&a] {
      io::check_writable_target(a.output);
      cli::check_not_an_input(a.output, "--output", {{"--input", a.input}, {"--weights", a.weights}, {"--lengths", a.lengths}});
    };
    p.output = a.output;
    p.compute = compute;
    return cli::run_tensor_parallel(p);
#else
    cli::no_mpi("--tensor-parallel");
#endif
  }
  const FeedForward layer = FeedForward::load(a.weights, lo);
  cli::note_assumed(a.weights, layer.assumed_settings());
  if (compute == Compute::bf16 && layer.weight_dtype() == WeightDtype::int8)
    throw Error("--compute bf16: needs fp32, bf16 or fp16 weights (" + a.weights + " holds int8 weights)");
  const Input in = cli::read_input(a, layer.config());
  cli::check_not_an_input(a.output, "--output", {{"--input", a.input}, {"--weights", a.weights}, {"--lengths", a.lengths}});
  Array y;
  y.shape = in.x.shape;
  y.data.resize(in.x.data.size());
  RunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  ro.compute = compute;
  const bool three_d = in.x.shape.size() == 3;
  if (a.check_finite) {
    cli::check_finite_weights(layer.config(), layer.weights(), layer.names(), a.weights);
    check_finite_tokens(in.x.data.data(), in.shape, layer.config().d_model, three_d, a.input + ": input");
  }
  layer.forward(in.x.data.data(), y.data.data(), in.shape, ro);
  if (a.check_finite) check_finite_tokens(y.data.data(), in.shape, layer.config().d_model, three_d, "output");
  write_npy(a.output, y);
  return 0;
}

}  // namespace

namespace ffn::cli {

Command add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "forward pass: --input X.npy -> --output Y.npy");
  a->add(cmd);
  cmd->add_option("--output", a->output, "output array (.npy), same shape as the input")->required();
  cmd->add_flag("--tensor-parallel", a->tensor_parallel,
                "under mpirun -np P (P = 1, 2 or 4, at most ceil(d_ff/256)): each rank reads and runs its "
                "quarter(s) of d_ff, the partial outputs are summed across ranks; the same bytes as one process "
                "(rank 0 writes); --threads 0: the cores shared among the ranks");
  cmd->add_option("--dtype", a->dtype, "weights as fp32, bf16, fp16 or int8 (quantized on load; default: the file's)");
  cmd->add_option("--compute", a->compute,
                  "products in fp32 (default) or bf16 (operands rounded to bf16, fp32 sums; not with int8 weights)");
  return {cmd, [a](const Common& c) { return cmd_run(*a, c); }, Mpi::tensor_parallel, &a->tensor_parallel};
}

}  // namespace ffn::cli
