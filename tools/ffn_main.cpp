// ffn — the command-line program: the registry of commands and the flags
// every command takes. Each command is one file, tools/<command>_cmd.cpp
// (run, grad, init, quantize, bench with its modes in tools/bench/, train,
// demo, encode/encode-grad/decode/decode-grad, embed, translate, generate/
// tokenize/chat, serve), declared in tools/commands.hpp.
// Exit status: 0 success, 2 bad input (one line on stderr naming the file,
// tensor or flag), 1 internal error or a failed self-check, 3 `ffn train`
// diverged (a NaN or Inf loss or gradient), 130/143 interrupted.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/io.hpp"

using namespace ffn;

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first --flag of the command line that its (sub)command does not have,
// with the nearest one it has: "run: unknown flag --weight; did you mean
// --weights? (see ffn run --help)". Checked before parsing, because CLI11 reports a required flag
// missing (the one that was mistyped) before an unexpected one. "" if none.
CLI::App* find_subcommand(CLI::App& app, const std::string& name) {
  const auto subs = app.get_subcommands([&](CLI::App* s) { return s->get_name() == name; });
  return subs.empty() ? nullptr : subs.front();
}

std::string unknown_flag(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  CLI::App* cmd = find_subcommand(app, argv[1]);
  if (!cmd) return "";
  std::string name = argv[1];
  int first = 2;
  if (argc > 2 && argv[2][0] != '-')
    if (CLI::App* sub = find_subcommand(*cmd, argv[2])) cmd = sub, name += std::string(" ") + argv[2], first = 3;
  std::vector<std::string> known = {"help", "help-all"};
  for (const CLI::Option* o : cmd->get_options())
    for (const std::string& l : o->get_lnames()) known.push_back(l);
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // what follows is positional
    if (arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
    const std::string flag = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    if (std::find(known.begin(), known.end(), flag) != known.end()) continue;
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const std::string& k : known)
      if (const size_t d = edit_distance(flag, k); d < best_d) best_d = d, best = k;
    std::string msg = name + ": unknown flag --" + flag;
    if (!best.empty() && best_d <= std::max<size_t>(2, flag.size() / 3)) msg += "; did you mean --" + best + "?";
    return msg + " (see ffn " + name + " --help)";
  }
  return "";
}

}  // namespace

// The program's entry, callable in-process (the fuzz target for `ffn run`
// calls it); main() below is the executable's.
int ffn_main(int argc, char** argv) {
  // FFN_KERNEL_REPORT=1: the ISAs whose kernels the run was given, on exit
  // (ffn::isas_run; tests/tools/test_isa_flag.py runs every command so).
  struct KernelReport {
    ~KernelReport() {
      const char* e = std::getenv("FFN_KERNEL_REPORT");
      if (!e || !*e || std::string(e) == "0") return;
      std::string names;
      for (Isa i : isas_run()) names += (names.empty() ? "" : ", ") + std::string(to_string(i));
      std::cerr << "ffn: kernels run: " << (names.empty() ? "none" : names) << "\n";
    }
  } report;
  ffn::io::remove_temporaries_on_signals();
  CLI::App app{"ffn: the Transformer's position-wise feed-forward sublayer"};
  app.set_version_flag("--version", std::string("ffn ") + FFN_VERSION);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");

  // The commands, in one registry: the allow-list, the dispatch and what
  // each does under mpirun are read from it (the help is CLI11's, from the
  // same subcommands). A command adds its file and one name here.
  using ffn::cli::Command;
  using ffn::cli::Mpi;
  std::vector<Command> commands;
  for (auto add : {ffn::cli::add_run, ffn::cli::add_grad, ffn::cli::add_init, ffn::cli::add_quantize, ffn::cli::add_bench,
                   ffn::cli::add_train, ffn::cli::add_demo, ffn::cli::add_encode, ffn::cli::add_encode_grad,
                   ffn::cli::add_embed, ffn::cli::add_rerank, ffn::cli::add_decode, ffn::cli::add_decode_grad, ffn::cli::add_translate,
                   ffn::cli::add_generate, ffn::cli::add_tokenize, ffn::cli::add_chat, ffn::cli::add_serve})
    commands.push_back(add(app));
  // The flags every command takes (ffn::cli::Common).
  std::string isa_flag = "auto";
  const std::function<void(CLI::App*)> add_common = [&](CLI::App* a) {
    a->add_option("--isa", isa_flag,
                  "the kernels: auto (default: FFN_ISA, else the best this CPU has), scalar, avx2, avx512, amx");
    for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; })) add_common(sub);  // demo's
  };
  for (const Command& c : commands) add_common(c.app);

  if (argc > 1 && argv[1][0] != '-') {
    const std::string cmd = argv[1];
    if (std::none_of(commands.begin(), commands.end(), [&](const Command& e) { return e.app->get_name() == cmd; })) {
      std::string names;
      for (size_t i = 0; i < commands.size(); ++i)
        names += (i == 0 ? "" : i + 1 == commands.size() ? " or " : ", ") + commands[i].app->get_name();
      std::cerr << "ffn: error: unknown command '" << cmd << "', expected " << names << " (see ffn --help)\n";
      return 2;
    }
  }
  if (const std::string typo = unknown_flag(app, argc, argv); !typo.empty()) {
    std::cerr << "ffn: error: " << typo << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::cerr << "ffn: error: " << msg << " (see ffn --help)\n";
    return 2;
  }
  try {
    const auto chosen = std::find_if(commands.begin(), commands.end(), [](const Command& e) { return bool(*e.app); });
    if (chosen == commands.end()) return 0;
    // Under mpirun, a command without its parallel mode would run whole on
    // every rank, each writing the same output: refused, naming the flag.
    if (const int ranks = ffn::cli::launched_ranks(); ranks > 1) {
      const std::string name = chosen->app->get_name();
      const std::string started = "ffn " + name + ": started by mpirun as one of " + std::to_string(ranks) + " ranks";
      if (chosen->mpi == Mpi::tensor_parallel && !*chosen->tensor_parallel)
        throw Error(started + " without --tensor-parallel, so every rank would do the whole job" +
                    (chosen->writes_output ? " and write the same output" : "") +
                    "; add --tensor-parallel, or run it without mpirun");
      if (chosen->mpi == Mpi::refused) {
        std::string tp, dp;
        std::vector<std::string> tps;
        for (const Command& e : commands) {
          if (e.mpi == Mpi::tensor_parallel) tps.push_back(e.app->get_name());
          if (e.mpi == Mpi::data_parallel) dp += (dp.empty() ? "" : " and ") + e.app->get_name();
        }
        for (size_t i = 0; i < tps.size(); ++i) tp += (i == 0 ? "" : i + 1 == tps.size() ? " and " : ", ") + tps[i];
        throw Error(started + ", but it has no parallel mode, so every rank would do the whole job; run it without "
                    "mpirun (" + tp + " take --tensor-parallel; " + dp + " is data parallel under mpirun)");
      }
    }
    ffn::cli::Common common;
    common.isa = parse_isa(isa_flag, "--isa");
    if (common.isa != Isa::automatic && !isa_supported(common.isa))
      throw Error("--isa " + isa_flag + ": not available on this CPU or in this build (best: " +
                  std::string(to_string(best_isa())) + ")");
    return chosen->run(common);
  } catch (const Error& e) {
    std::cerr << "ffn: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "ffn: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ffn: internal error: " << e.what() << "\n";
    return 1;
  }
}

#ifndef FFN_NO_MAIN
int main(int argc, char** argv) { return ffn_main(argc, argv); }
#endif
