// ffn bench --translate: ffn translate on the sources of --input-file (token
// ids per line), timed (the run itself: cli::bench_translate,
// tools/translate_cmd.cpp).
#include <optional>

#include "bench/bench.hpp"
#include "commands.hpp"

namespace ffn::cli::bench {
namespace {

class Translate final : public Mode {
 public:
  const char* flag() const override { return "--translate"; }
  const char* help() const override {
    return "time ffn translate on --input-file (token ids per line) with --model; --batch (default 32), --beams, "
           "--max-new-tokens";
  }
  void add_flags(CLI::App* b) override {
    b->add_option("--beams", beams_, "--translate: beam size (default: the generation config's)");
    b->add_option("--max-new-tokens", max_new_tokens_, "--translate: most tokens generated per source");
  }
  std::string stray() const override {
    return beams_ || max_new_tokens_ ? "--beams and --max-new-tokens: only with --translate" : "";
  }
  int run(const Flags& f) const override {
    const int threads = resolve_threads(threads_or_throw(f.threads));
    f.check_counts();
    if (f.model.empty()) throw Error("--translate: give --model, a MarianMT directory");
    TranslateBenchArgs t;
    t.model = f.model;
    t.input_file = f.input_file;
    t.dtype = f.dtype;
    t.batch = f.o_batch->count() ? f.batch : 32;
    t.beams = beams_;
    t.max_new_tokens = max_new_tokens_;
    t.isa = f.isa;
    return cli::bench_translate(t, threads, f.repeats, f.warmup, f.json);
  }

 private:
  std::optional<int64_t> beams_, max_new_tokens_;
};

}  // namespace

std::unique_ptr<Mode> translate_mode() { return std::make_unique<Translate>(); }

}  // namespace ffn::cli::bench
