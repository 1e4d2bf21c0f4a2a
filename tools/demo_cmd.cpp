// ffn demo approximate | interaction: the seeds' claims, measured, with SVG plots.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "demo/demos.hpp"
#include "demo/number_words.hpp"
#include "demo/translate_demo.hpp"
#include "plot/svg.hpp"

namespace ffn::cli {
namespace {

struct ApproxArgs {
  demo::ApproximateOptions o;
  std::string interval = "-1,1", save, plot = "approximate.svg", sweep_plot = "approximate_sweep.svg";
  bool sweep = false;
};

std::pair<double, double> parse_interval(const std::string& s) {
  const size_t comma = s.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    size_t u1 = 0, u2 = 0;
    const std::string l = s.substr(0, comma), r = s.substr(comma + 1);
    const double a = std::stod(l, &u1), b = std::stod(r, &u2);
    if (u1 != l.size() || u2 != r.size()) throw std::invalid_argument("trailing");
    if (!(std::isfinite(a) && std::isfinite(b) && a < b)) throw std::invalid_argument("order");
    return {a, b};
  } catch (const std::exception&) {
    throw Error("--interval: expected A,B with finite A < B (e.g. -1,1), got '" + s + "'");
  }
}

int cmd_approximate(ApproxArgs& a) {
  std::tie(a.o.a, a.o.b) = parse_interval(a.interval);
  check_distinct({{"--plot", a.plot}, {"--sweep-plot", a.sweep ? a.sweep_plot : ""}, {"--save", a.save}});
  io::check_writable_target(a.plot);
  if (a.sweep) io::check_writable_target(a.sweep_plot);
  if (!a.save.empty()) io::check_writable_target(a.save);
  const demo::ApproximateResult r = demo::approximate(a.o);
  const double L = a.o.b - a.o.a;
  std::printf("ffn demo approximate: f(x) = %s on [%g, %g] by a 1 -> %lld -> 1 ReLU FFN (%s start, %lld Adam steps)\n",
              demo::function_formula(a.o.function, false).c_str(), a.o.a, a.o.b, (long long)a.o.neurons, a.o.init.c_str(), (long long)a.o.steps);
  std::printf("  max error on the interval     %.6g   (at the start: %.6g)\n", r.max_error, r.start_error);
  if (std::isfinite(r.best_error))
    std::printf("  best possible with %lld kinks   %.6g   = L^2/(8(N+1)^2), L = %g; ratio %.2f\n",
                (long long)a.o.neurons, r.best_error, L, r.max_error / r.best_error);
  std::printf("  kinks inside the interval     %lld of %lld units\n", (long long)r.kinks_inside, (long long)a.o.neurons);
  std::printf("  outside the interval (beyond the last kink the model is one straight line):\n");
  for (const auto& [x, f, m] : r.outside)
    std::printf("    x = %-6g f(x) = %-10.6g model = %-10.6g error %.6g\n", x, f, m, std::abs(f - m));
  plot::write_svg(a.plot, plot::render(r.chart));
  std::printf("  wrote %s\n", a.plot.c_str());
  if (!a.save.empty()) {
    r.layer.save(a.save);
    std::printf("  wrote %s (d_model 1, d_ff %lld, relu, norm none: check with ffn run)\n", a.save.c_str(),
                (long long)a.o.neurons);
  }
  if (a.sweep) {
    const demo::SweepResult s = demo::approximate_sweep(a.o, {2, 4, 8, 16, 32, 64});
    std::printf("  sweep:   N   max error     best possible  ratio  kinks inside\n");
    for (size_t i = 0; i < s.neurons.size(); ++i)
      std::printf("         %3lld   %-12.6g  %-13.6g  %5.2f  %lld\n", (long long)s.neurons[i], s.max_error[i],
                  s.best_error[i], s.max_error[i] / s.best_error[i], (long long)s.kinks_inside[i]);
    std::printf("  fitted log-log slope of error against N: %.3f (theory: -2 as N grows; the best-possible\n"
                "  column's own slope over these N, where N+1 is not yet N: %.3f)\n", s.slope, s.best_slope);
    plot::write_svg(a.sweep_plot, plot::render(s.chart));
    std::printf("  wrote %s\n", a.sweep_plot.c_str());
  }
  return 0;
}

struct InteractionArgs {
  demo::InteractionOptions o;
  std::string save, plot = "interaction.svg";
};

int cmd_interaction(InteractionArgs& a) {
  check_distinct({{"--plot", a.plot}, {"--save", a.save}});
  io::check_writable_target(a.plot);
  if (!a.save.empty()) io::check_writable_target(a.save);
  const demo::InteractionResult r = demo::interaction(a.o);
  std::printf("ffn demo interaction: a, b uniform in [-1, 1]; %lld training and %lld test points\n",
              (long long)a.o.train, (long long)a.o.test);
  std::printf("  linear model: least squares on (a, b, 1); FFN: 2 -> %lld -> 2 ReLU, Adam, %lld epochs\n",
              (long long)a.o.d_ff, (long long)a.o.epochs);
  std::printf("                                linear      FFN\n");
  std::printf("  a*b: R^2 on the test set      %-10.4f  %.4f\n", r.linear_r2, r.ffn_r2);
  std::printf("  a>0.5 and b>0.5: accuracy     %-10.4f  %.4f   (always answering 'no': %.4f)\n", r.linear_accuracy,
              r.ffn_accuracy, r.majority_accuracy);
  std::printf("  linear a*b fit: %.4f a + %.4f b + %.4f (a*b is uncorrelated with a, b and 1)\n", r.linear_product[0],
              r.linear_product[1], r.linear_product[2]);
  plot::write_svg(a.plot, plot::render(r.maps, 2, "A linear map cannot compute a·b; a ReLU FFN can"));
  std::printf("  wrote %s\n", a.plot.c_str());
  if (!a.save.empty()) {
    r.layer.save(a.save);
    std::printf("  wrote %s (input [a, b]; output feature 0 is a*b, feature 1 the threshold score; norm none)\n",
                a.save.c_str());
  }
  return 0;
}

struct TranslateArgs {
  demo::TranslateDemoOptions o;
  std::string loss_plot = "translate_loss.svg", attention_plot = "translate_attention.svg";
  bool overwrite = false;
};

int cmd_translate(TranslateArgs& a) {
  demo::check_translate_options(a.o);
  check_distinct({{"--loss-plot", a.loss_plot}, {"--attention-plot", a.attention_plot}});
  io::check_writable_target(a.loss_plot);
  io::check_writable_target(a.attention_plot);
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a.o.model_dir, ec) && !fs::is_directory(a.o.model_dir, ec))
    throw Error("--model-dir " + a.o.model_dir + " is a file; expected a directory to write the model into");
  io::check_writable_directory(a.o.model_dir);
  for (const std::string& f : demo::kTranslateDemoFiles) {
    const fs::path p = fs::path(a.o.model_dir) / f;
    if (fs::exists(p, ec) && !a.overwrite)
      throw Error("--model-dir " + a.o.model_dir + " already holds " + f + "; pass --overwrite to replace the model's files");
    if (fs::exists(p, ec) && !fs::is_regular_file(p, ec))
      throw Error("--model-dir " + a.o.model_dir + ": " + f + " is not a regular file");
  }
  const auto& o = a.o;
  std::printf("ffn demo translate: English number words -> French number words (0..999,999)\n");
  std::printf("  model: %lld + %lld layers, d_model %lld, %lld heads, d_ff %lld, swish, dropout %g; batch %lld, %lld steps\n",
              (long long)o.layers, (long long)o.layers, (long long)o.d_model, (long long)o.heads, (long long)o.d_ff,
              double(o.dropout), (long long)o.batch, (long long)o.steps);
  std::fflush(stdout);
  const demo::TranslateDemoResult r = demo::translate_demo(a.o);
  std::printf("  vocabulary %lld pieces (SentencePiece, trained on the training text); %lld parameters\n",
              (long long)r.vocab, (long long)r.parameters);
  std::printf("  trained in %.1f s; loss %.4f at the first step, final 50-step mean %.4f\n", r.train_seconds, r.loss.front(), [&] {
    double s = 0;
    const size_t k = std::min<size_t>(50, r.loss.size());
    for (size_t i = r.loss.size() - k; i < r.loss.size(); ++i) s += r.loss[i];
    return s / double(k);
  }());
  std::printf("  held-out numbers (never seen in training): %lld of %lld translated exactly (%.2f%%), greedy, in %.1f s\n",
              (long long)r.exact, (long long)r.held_out, 100.0 * double(r.exact) / double(r.held_out), r.eval_seconds);
  for (const auto& e : r.samples)
    std::printf("    %-7lld %s -> %s%s\n", (long long)e.number, e.english.c_str(), e.translation.c_str(),
                e.translation == e.french ? "" : ("   (expected " + e.french + ")").c_str());
  if (!r.wrong.empty()) {
    std::printf("  wrong translations (first %zu):\n", r.wrong.size());
    for (const auto& e : r.wrong)
      std::printf("    %-7lld %s -> %s   (expected %s)\n", (long long)e.number, e.english.c_str(), e.translation.c_str(),
                  e.french.c_str());
  }
  // Where each French piece looks: the source piece of largest weight per row.
  for (const auto& h : r.attention) {
    std::printf("  attention of %s (French piece <- English piece it attends to most):\n   ", h.title.c_str());
    for (int iy = h.ny - 1; iy >= 0; --iy) {
      int best = 0;
      for (int ix = 1; ix < h.nx; ++ix)
        if (h.v[size_t(iy * h.nx + ix)] > h.v[size_t(iy * h.nx + best)]) best = ix;
      std::printf(" %s<-%s", h.yticks[size_t(iy)].c_str(), h.xticks[size_t(best)].c_str());
    }
    std::printf("\n");
  }
  plot::write_svg(a.loss_plot, plot::render(r.loss_chart));
  plot::write_svg(a.attention_plot, plot::render(r.attention, int(r.attention.size()),
                                                  "Cross-attention of the last decoder layer (mean over heads)", 300));
  std::printf("  wrote %s/ (MarianMT: config.json, generation_config.json, model.safetensors, source.spm, target.spm, "
              "vocab.json, tokenizer_config.json), %s, %s\n",
              o.model_dir.c_str(), a.loss_plot.c_str(), a.attention_plot.c_str());
  std::printf("  try: ffn translate --model %s \"three hundred seventy-one\"\n", o.model_dir.c_str());
  return 0;
}

struct NumberWordsArgs {
  std::vector<int64_t> numbers;
  bool all = false;
};

int cmd_number_words(const NumberWordsArgs& a) {
  if (a.all == !a.numbers.empty()) throw Error("number-words: give numbers (0..999999) or --all");
  for (int64_t n : a.numbers)  // all checked before the first line is printed
    if (n < 0 || n > demo::kMaxNumberWords)
      throw Error("number-words: " + std::to_string(n) + " is outside 0.." + std::to_string(demo::kMaxNumberWords));
  auto line = [](int64_t n) {
    std::printf("%lld\t%s\t%s\n", (long long)n, demo::english_number(n).c_str(), demo::french_number(n).c_str());
  };
  if (a.all)
    for (int64_t n = 0; n <= demo::kMaxNumberWords; ++n) line(n);
  for (int64_t n : a.numbers) line(n);
  return 0;
}

}  // namespace

Command add_demo(CLI::App& app) {
  CLI::App* d = app.add_subcommand("demo", "the seeds' demonstrations: approximate, interaction, translate (and number-words, its data)");
  d->require_subcommand(1);

  auto tp = std::make_shared<TranslateArgs>();
  CLI::App* t = d->add_subcommand("translate", "train an English -> French number translator (encoder-decoder, MarianMT) and score it");
  t->add_option("--model-dir", tp->o.model_dir, "where the MarianMT model is written (default number-translator)");
  t->add_flag("--overwrite", tp->overwrite, "replace a model already in --model-dir");
  t->add_option("--steps", tp->o.steps, "optimizer steps (default 2500)");
  t->add_option("--batch", tp->o.batch, "sentence pairs per step (default 64)");
  t->add_option("--held-out", tp->o.held_out, "numbers kept out of training and scored (default 1000)");
  t->add_option("--d-model", tp->o.d_model, "default 128");
  t->add_option("--heads", tp->o.heads, "default 4");
  t->add_option("--d-ff", tp->o.d_ff, "default 512");
  t->add_option("--layers", tp->o.layers, "encoder and decoder layers each (default 2)");
  t->add_option("--dropout", tp->o.dropout, "default 0.1");
  t->add_option("--warmup", tp->o.train.warmup, "warm-up steps of the schedule (default 400)");
  t->add_option("--lr-scale", tp->o.train.lr_scale, "the schedule's factor (default 1)");
  t->add_option("--label-smoothing", tp->o.train.label_smoothing, "default 0.1");
  t->add_option("--seed", tp->o.seed, "data, held-out split, initialization and dropout (default 0)")->check(CLI::NonNegativeNumber);
  t->add_option("--threads", tp->o.threads, "threads, 0 = all cores (default 0)");
  t->add_option("--loss-plot", tp->loss_plot, "SVG of the loss curve (default translate_loss.svg)");
  t->add_option("--attention-plot", tp->attention_plot, "SVG of cross-attention maps (default translate_attention.svg)");

  auto np = std::make_shared<NumberWordsArgs>();
  CLI::App* nw = d->add_subcommand("number-words", "the demo's data: N, its English and its French words, tab-separated");
  nw->add_option("numbers", np->numbers, "numbers in 0..999999");
  nw->add_flag("--all", np->all, "every number 0..999999");

  auto ap = std::make_shared<ApproxArgs>();
  CLI::App* a = d->add_subcommand("approximate", "fit x^2 (or sin(pi x), |x|) with N ReLU units; error against the best possible");
  a->add_option("--function", ap->o.function, "square (default), sin (sin(pi x)) or abs");
  a->add_option("--neurons", ap->o.neurons, "N, hidden ReLU units (default 8)");
  a->add_option("--interval", ap->interval, "A,B (default -1,1)");
  a->add_option("--init", ap->o.init, "spread (default: kinks evenly spaced, output by least squares) or random");
  a->add_option("--steps", ap->o.steps, "Adam steps, full batch (default 3000)");
  a->add_option("--lr", ap->o.lr, "Adam learning rate, cosine-annealed (default 3e-3)");
  a->add_option("--seed", ap->o.seed, "seed of the random start (default 0)")->check(CLI::NonNegativeNumber);
  a->add_option("--threads", ap->o.threads, "threads, 0 = all cores (default 1)");
  a->add_flag("--sweep", ap->sweep, "also run N = 2, 4, 8, 16, 32, 64 and fit the log-log slope");
  a->add_option("--save", ap->save, "write the trained layer (.safetensors)");
  a->add_option("--plot", ap->plot, "SVG of the target, the fit and its kinks (default approximate.svg)");
  a->add_option("--sweep-plot", ap->sweep_plot, "SVG of error against N (default approximate_sweep.svg)");

  auto ip = std::make_shared<InteractionArgs>();
  CLI::App* i = d->add_subcommand("interaction", "a*b and a threshold: linear least squares against an FFN");
  i->add_option("--d-ff", ip->o.d_ff, "hidden ReLU units (default 64)");
  i->add_option("--train", ip->o.train, "training points (default 8192)");
  i->add_option("--test", ip->o.test, "test points (default 4096)");
  i->add_option("--epochs", ip->o.epochs, "default 100");
  i->add_option("--batch", ip->o.batch, "default 64");
  i->add_option("--lr", ip->o.lr, "Adam learning rate, cosine-annealed (default 1e-2)");
  i->add_option("--seed", ip->o.seed, "data, initialization and shuffling (default 0)")->check(CLI::NonNegativeNumber);
  i->add_option("--threads", ip->o.threads, "threads, 0 = all cores (default 1)");
  i->add_option("--save", ip->save, "write the trained layer (.safetensors)");
  i->add_option("--plot", ip->plot, "SVG of both models over the (a, b) plane (default interaction.svg)");

  return {d, [ap, ip, tp, np, a, t, nw](const Common& c) {
            ap->o.isa = ip->o.isa = tp->o.isa = c.isa;
            if (*a) return cmd_approximate(*ap);
            if (*t) return cmd_translate(*tp);
            if (*nw) return cmd_number_words(*np);
            return cmd_interaction(*ip);
          }};
}

}  // namespace ffn::cli
