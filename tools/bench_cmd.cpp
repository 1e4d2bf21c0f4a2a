// ffn bench: the flags every mode reads, the modes (tools/bench/, one file
// each with its own flags) and the choice among them: the mode whose flag is
// given, else the FFN layer's bench (tools/bench/ffn.cpp). Two modes together
// are refused, naming them; a mode's own flag without the mode is refused.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "commands.hpp"
#include "ffn/causal_lm.hpp"

namespace ffn::cli {
namespace {

struct BenchCommand {
  bench::Flags flags;
  // In the order their conflicts are named (an earlier mode given with later ones).
  std::vector<std::unique_ptr<bench::Mode>> modes;
};

int cmd_bench(BenchCommand& b, const Common& c) {
  bench::Flags& f = b.flags;
  f.isa = c.isa;
  const auto given = [&](const char* flag) {
    for (const auto& m : b.modes)
      if (m->chosen && std::string(m->flag()) == flag) return true;
    return false;
  };
  if (f.tensor_parallel && (given("--embed") || given("--encoder")))
    throw Error("--tensor-parallel: the FFN layer's bench only (not with --embed or --encoder)");
  // A mode's own flag without the mode, whichever mode is chosen.
  for (const auto& m : b.modes)
    if (!m->chosen)
      if (const std::string stray = m->stray(); !stray.empty()) throw Error(stray);
  for (size_t i = 0; i < b.modes.size(); ++i) {
    const bench::Mode& m = *b.modes[i];
    if (!m.chosen) continue;
    bool also = false;  // a later mode given too
    for (size_t j = i + 1; j < b.modes.size(); ++j) also = also || b.modes[j]->chosen;
    if (also) {
      std::string later;  // every later mode, as "x, y or z", the last first
      for (size_t j = b.modes.size(), n = 0; j-- > i + 1; ++n)
        later += std::string(n == 0 ? "" : j == i + 1 ? " or " : ", ") + b.modes[j]->flag();
      throw Error(std::string(m.flag()) + ": not with " + later);
    }
    return m.run(f);
  }
  return bench::run_ffn(f);
}

}  // namespace

namespace bench {
void Flags::check_counts() const {
  if (repeats < 1) throw Error("--repeats: expected a positive integer, got " + std::to_string(repeats));
  if (warmup < 0) throw Error("--warmup: expected an integer >= 0, got " + std::to_string(warmup));
}
}  // namespace bench

Command add_bench(CLI::App& app) {
  auto b = std::make_shared<BenchCommand>();
  b->modes.push_back(bench::generate_mode());
  b->modes.push_back(bench::translate_mode());
  b->modes.push_back(bench::embed_mode());
  b->modes.push_back(bench::encoder_mode());
  bench::Flags& f = b->flags;
  CLI::App* cmd = app.add_subcommand("bench", "time the layer (default: the paper's sublayer on 8 x 512 tokens)");
  f.o_tokens = cmd->add_option("--tokens", f.tokens, "tokens per call (default 4096)");
  for (const auto& m : b->modes) cmd->add_flag(m->flag(), m->chosen, m->help());
  f.o_batch = cmd->add_option("--batch", f.batch, "--encoder: sequences per call (default 8); --translate: sources per call (default 32)");
  cmd->add_flag("--tensor-parallel", f.tensor_parallel,
                "under mpirun -np P: each rank runs its shards of d_ff; per-rank compute and sum times, "
                "bytes sent per call");
  cmd->add_option("--model", f.model,
                  "--embed: model directory (default: the installed all-MiniLM-L6-v2); --translate: MarianMT directory; "
                  "--generate: GGUF file or Hugging Face directory (" + CausalLM::architecture_names() + ")");
  cmd->add_option("--input-file", f.input_file, "--embed: texts, one per line; --translate: token ids, one source per line");
  cmd->add_option("--d-model", f.d_model, "default 512");
  cmd->add_option("--d-ff", f.d_ff, "default 2048");
  cmd->add_option("--activation", f.activation, "default relu");
  cmd->add_option("--norm", f.norm, "default post");
  cmd->add_option("--norm-type", f.norm_type, "default layernorm");
  cmd->add_option("--threads", f.threads, "threads, 0 = all cores (default 0)");
  f.o_repeats = cmd->add_option("--repeats", f.repeats,
                                "timed calls (default 10; --generate: 3 timed runs of the whole prompt and generation)");
  f.o_warmup = cmd->add_option("--warmup", f.warmup, "untimed calls first (default 2; --generate: 1 run)");
  cmd->add_option("--seed", f.seed, "weights and input seed")->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", f.dtype, "weight matrices as fp32 (default), bf16, fp16 or int8");
  f.o_compute = cmd->add_option("--compute", f.compute,
                                "products in fp32 (default) or bf16 (operands rounded to bf16); "
                                "--generate: native (default: quantized blocks) or fp32");
  cmd->add_flag("--backward", f.backward, "time forward + backward");
  cmd->add_flag("--json", f.json, "print one JSON object");
  cmd->add_flag("--yes", f.yes, "run even if the estimated time is over a minute (--generate: estimated from its first run)");
  for (const auto& m : b->modes) m->add_flags(cmd);
  return {cmd, [b](const Common& c) { return cmd_bench(*b, c); }, Mpi::tensor_parallel, &f.tensor_parallel, false};
}

}  // namespace ffn::cli
