// ffn bench: the flags every mode reads, and the modes. Each mode is one
// file here with its own flags (tools/bench/<mode>.cpp); tools/bench_cmd.cpp
// registers the common flags and the modes and runs the one chosen, the FFN
// layer's (tools/bench/ffn.cpp) when no mode's flag is given. A mode adds
// its file, one line in bench_cmd.cpp's list and its source in CMakeLists.txt.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "ffn/types.hpp"

namespace ffn::cli::bench {

// Longest run `ffn bench` starts without --yes (estimated up front).
constexpr double kLimitSeconds = 60.0;

// The flags of ffn bench that more than one mode reads.
struct Flags {
  int threads = 0, repeats = 10, warmup = 2;
  uint64_t seed = 0;
  bool json = false, yes = false, backward = false, tensor_parallel = false;
  std::string dtype = "fp32", compute = "fp32";
  std::string model, input_file;  // --generate, --translate, --embed
  // The layer's shape: the FFN's bench and --encoder's.
  int64_t tokens = 4096, d_model = 512, d_ff = 2048, batch = 8;
  std::string activation = "relu", norm = "post", norm_type = "layernorm";
  Isa isa = Isa::automatic;  // --isa (the command's common flag)
  CLI::Option *o_tokens = nullptr, *o_batch = nullptr, *o_compute = nullptr, *o_repeats = nullptr,
              *o_warmup = nullptr;

  // --repeats and --warmup in range (Error naming the flag).
  void check_counts() const;
};

// A mode: its flag, its own flags, and what it runs.
class Mode {
 public:
  virtual ~Mode() = default;
  virtual const char* flag() const = 0;  // e.g. "--generate"
  virtual const char* help() const = 0;
  // Registers the flags only this mode takes on the bench command.
  virtual void add_flags(CLI::App* bench) = 0;
  // The message for one of those flags given without the mode's flag ("": none).
  virtual std::string stray() const { return ""; }
  virtual int run(const Flags& f) const = 0;
  bool chosen = false;  // the mode's flag was given
};

std::unique_ptr<Mode> generate_mode();   // tools/bench/generate.cpp
std::unique_ptr<Mode> translate_mode();  // tools/bench/translate.cpp
std::unique_ptr<Mode> embed_mode();      // tools/bench/embed.cpp
std::unique_ptr<Mode> encoder_mode();    // tools/bench/encoder.cpp
// The default: the FFN layer (tools/bench/ffn.cpp).
int run_ffn(const Flags& f);

}  // namespace ffn::cli::bench
