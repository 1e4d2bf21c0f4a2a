// Subcommands defined outside ffn_main.cpp. Each registers its options on
// the app and returns the action to run when it was chosen; the action
// returns the exit status and throws ffn::Error for bad input.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace ffn::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_train(CLI::App& app);  // ffn train
Command add_demo(CLI::App& app);   // ffn demo approximate | interaction

}  // namespace ffn::cli
