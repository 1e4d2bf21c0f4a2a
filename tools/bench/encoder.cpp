// ffn bench --encoder: encoder layers (attention + FFN) on --batch x --seq
// (the run itself: cli::bench_encoder, tools/encoder_cmd.cpp).
#include "bench/bench.hpp"
#include "commands.hpp"

namespace ffn::cli::bench {
namespace {

class Encoder final : public Mode {
 public:
  const char* flag() const override { return "--encoder"; }
  const char* help() const override { return "time encoder layers (attention + FFN) on --batch x --seq instead"; }
  void add_flags(CLI::App* b) override {
    o_layers_ = b->add_option("--layers", layers_, "--encoder: layers (default 1)");
    o_heads_ = b->add_option("--heads", heads_, "--encoder: attention heads (default 8)");
    o_seq_ = b->add_option("--seq", enc_.seq, "--encoder: positions per sequence (default 128)");
    o_causal_ = b->add_flag("--causal", enc_.causal, "--encoder: causal mask");
  }
  std::string stray() const override {
    for (const CLI::Option* o : {o_layers_, o_heads_, o_seq_, o_causal_})
      if (o->count()) return o->get_name() + ": needs --encoder (the FFN bench takes --tokens)";
    return "";
  }
  int run(const Flags& f) const override {
    if (f.o_tokens->count()) throw Error("--tokens: with --encoder the shape is --batch and --seq");
    if (parse_weight_dtype(f.dtype, "--dtype") != WeightDtype::fp32 ||
        parse_compute(f.compute, "--compute") != Compute::fp32)
      throw Error("--encoder: runs with --dtype fp32 and --compute fp32 (the low-precision modes are the FFN's)");
    f.check_counts();
    if (f.d_model < 1) throw Error("--d-model: expected a positive integer, got " + std::to_string(f.d_model));
    if (f.d_ff < 1) throw Error("--d-ff: expected a positive integer, got " + std::to_string(f.d_ff));
    Config ffn;
    ffn.activation = parse_activation(f.activation, "--activation");
    ffn.norm = parse_norm_placement(f.norm, "--norm");
    ffn.norm_type = parse_norm_type(f.norm_type, "--norm-type");
    const EncoderConfig e = encoder_config(f.d_model, f.d_ff, ffn, layers_, heads_);
    EncoderBenchArgs enc = enc_;
    enc.batch = f.batch;
    RunOptions ro;
    ro.threads = resolve_threads(threads_or_throw(f.threads));
    ro.isa = resolve_isa(f.isa);
    return cli::bench_encoder(e, enc, ro, f.backward, f.repeats, f.warmup, f.seed, f.json);
  }

 private:
  int64_t layers_ = 1, heads_ = 8;
  EncoderBenchArgs enc_;
  CLI::Option *o_layers_ = nullptr, *o_heads_ = nullptr, *o_seq_ = nullptr, *o_causal_ = nullptr;
};

}  // namespace

std::unique_ptr<Mode> encoder_mode() { return std::make_unique<Encoder>(); }

}  // namespace ffn::cli::bench
