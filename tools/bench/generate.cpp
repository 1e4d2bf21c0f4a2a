// ffn bench --generate: prompt processing and generation tokens/s of ffn
// generate (the run itself: cli::bench_generate, tools/generate_cmd.cpp).
#include <optional>

#include "bench/bench.hpp"
#include "commands.hpp"
#include "ffn/causal_lm.hpp"

namespace ffn::cli::bench {
namespace {

class Generate final : public Mode {
 public:
  const char* flag() const override { return "--generate"; }
  const char* help() const override {
    return "time ffn generate with --model (GGUF file or Hugging Face directory): a --prompt-tokens prompt (default "
           "512), then --new-tokens greedy tokens (default 128); tokens/s of each";
  }
  void add_flags(CLI::App* b) override {
    b->add_option("--prompt-tokens", prompt_tokens_, "--generate: prompt length (default 512)");
    b->add_option("--new-tokens", new_tokens_, "--generate: tokens generated after it (default 128)");
  }
  std::string stray() const override {
    return prompt_tokens_ || new_tokens_ ? "--prompt-tokens and --new-tokens: only with --generate" : "";
  }
  int run(const Flags& f) const override {
    const int threads = resolve_threads(threads_or_throw(f.threads));
    f.check_counts();
    if (f.model.empty()) throw Error("--generate: give --model, a GGUF file or a Hugging Face LLaMA directory");
    // A run is a whole prompt and generation (seconds on a 1B model): 3 timed after 1 warmup unless asked.
    return cli::bench_generate(f.model, f.o_compute->count() ? f.compute : "native", prompt_tokens_.value_or(512),
                               new_tokens_.value_or(128), threads, f.o_repeats->count() ? f.repeats : 3,
                               f.o_warmup->count() ? f.warmup : 1, f.json, f.yes, f.isa);
  }

 private:
  std::optional<int64_t> prompt_tokens_, new_tokens_;
};

}  // namespace

std::unique_ptr<Mode> generate_mode() { return std::make_unique<Generate>(); }

}  // namespace ffn::cli::bench
