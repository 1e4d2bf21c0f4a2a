// ffn bench --embed: texts per second of ffn embed, or one text's latency
// (the run itself: cli::bench_embed, tools/embed_cmd.cpp).
#include "bench/bench.hpp"
#include "commands.hpp"

namespace ffn::cli::bench {
namespace {

class Embed final : public Mode {
 public:
  const char* flag() const override { return "--embed"; }
  const char* help() const override { return "time ffn embed: --input-file (texts/s) or --text (one text's latency)"; }
  void add_flags(CLI::App* b) override {
    b->add_option("--text", e_.text, "--embed: one text");
    b->add_option("--embed-batch", e_.batch, "--embed: texts per call (default 32)");
    b->add_option("--int8-outliers", e_.int8_outliers,
                  "--embed --dtype int8: on (default): outlier input channels in fp32, calibrated at load; off");
    b->add_option("--int8-attention", e_.int8_attention,
                  "--embed --dtype int8: on (default): attention projections in int8 too; off: FFN only");
  }
  std::string stray() const override {
    if (!e_.int8_outliers.empty()) return "--int8-outliers: only with --embed";
    if (!e_.int8_attention.empty()) return "--int8-attention: only with --embed";
    return "";
  }
  int run(const Flags& f) const override {
    const int threads = resolve_threads(threads_or_throw(f.threads));
    f.check_counts();
    EmbedBenchArgs e = e_;
    e.model = f.model;
    e.input_file = f.input_file;
    e.dtype = f.dtype;
    e.compute = f.compute;
    e.isa = f.isa;
    return cli::bench_embed(e, threads, f.repeats, f.warmup, f.json);
  }

 private:
  EmbedBenchArgs e_;
};

}  // namespace

std::unique_ptr<Mode> embed_mode() { return std::make_unique<Embed>(); }

}  // namespace ffn::cli::bench
