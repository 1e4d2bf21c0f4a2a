// `ffn demo translate` (tools/demo/translate_demo.hpp).
#include "demo/translate_demo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <unordered_set>

#include "demo/number_words.hpp"
#include "ffn/io.hpp"
#include "ffn/translation.hpp"

#include <unistd.h>

namespace ffn::demo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A number of the training distribution, built from its two three-digit
// groups so that the rare shapes are common: the thousands group is 0 a
// quarter of the time and below 100 a fifth; the last group is 0, a round
// hundred or below 100 a third of the time (zeros inside a number are where
// "cents", "quatre-vingts" and "mille" change form).
int64_t draw(std::mt19937_64& rng) {
  auto pick = [&](uint64_t n) { return int64_t(rng() % n); };
  const int64_t a = pick(100), b = pick(100);
  const int64_t th = a < 25 ? 0 : a < 45 ? 1 + pick(99) : 100 + pick(900);
  const int64_t lo = b < 8 ? 0 : b < 20 ? 100 * (1 + pick(9)) : b < 33 ? pick(100) : pick(1000);
  return th * 1000 + lo;
}

// SentencePiece's pieces of ids (for axis labels), ▁ shown as '_'.
std::string piece_label(const std::string& text) {
  std::string s = text;
  const std::string underline = "\xe2\x96\x81";
  for (size_t at = 0; (at = s.find(underline, at)) != std::string::npos;) s.replace(at, underline.size(), "_");
  return s;
}

}  // namespace

const std::vector<std::string> kTranslateDemoFiles = {
    "config.json", "generation_config.json", "model.safetensors", "source.spm", "target.spm",
    "vocab.json", "tokenizer_config.json", "special_tokens_map.json"};

void check_translate_options(const TranslateDemoOptions& o) {
  auto need = [](bool ok, const std::string& flag, const std::string& expected, const std::string& got) {
    if (!ok) throw Error(flag + ": expected " + expected + ", got " + got);
  };
  auto str = [](auto v) { return std::to_string(v); };
  need(o.steps >= 1 && o.steps <= 10000000, "--steps", "1..10000000", str(o.steps));
  need(o.batch >= 1 && o.batch <= 4096, "--batch", "1..4096", str(o.batch));
  need(o.held_out >= 1 && o.held_out <= 100000, "--held-out", "1..100000", str(o.held_out));
  need(o.d_model >= 1 && o.d_model <= 4096, "--d-model", "1..4096", str(o.d_model));
  need(o.heads >= 1 && o.heads <= o.d_model && o.d_model % o.heads == 0, "--heads", "a divisor of --d-model " + str(o.d_model),
       str(o.heads));
  need(o.d_ff >= 1 && o.d_ff <= 65536, "--d-ff", "1..65536", str(o.d_ff));
  need(o.layers >= 1 && o.layers <= 64, "--layers", "1..64", str(o.layers));
  need(o.dropout >= 0.0f && o.dropout < 1.0f, "--dropout", "a probability in [0, 1)", str(o.dropout));
  need(o.train.warmup >= 1, "--warmup", "≥ 1 step", str(o.train.warmup));
  need(o.train.lr_scale > 0.0 && o.train.lr_scale < 1000.0, "--lr-scale", "a number in (0, 1000)", str(o.train.lr_scale));
  need(o.train.label_smoothing >= 0.0 && o.train.label_smoothing < 1.0, "--label-smoothing", "a number in [0, 1)",
       str(o.train.label_smoothing));
  need(o.threads >= 0 && o.threads <= kMaxThreads, "--threads", "0..1024", str(o.threads));
  need(o.vocab_text >= 100, "vocab_text", "≥ 100 lines", str(o.vocab_text));
}

std::vector<int64_t> held_out_numbers(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x5eedf00dULL);
  std::unordered_set<int64_t> seen;
  std::vector<int64_t> out;
  const int64_t small = std::min<int64_t>(count / 10, 500);
  while (int64_t(out.size()) < count) {
    const bool low = int64_t(out.size()) < small;
    const int64_t n = low ? int64_t(rng() % 1000) : 1000 + int64_t(rng() % 999000);
    if (seen.insert(n).second) out.push_back(n);
  }
  return out;
}

namespace {
TranslateDemoResult run_demo(const TranslateDemoOptions& o, const std::string& dir);
}  // namespace

TranslateDemoResult translate_demo(const TranslateDemoOptions& o) {
  namespace fs = std::filesystem;
  check_translate_options(o);
  const fs::path target(o.model_dir);
  const fs::path work = target.string() + ".partial-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(work, ec);
  // Ctrl-C (SIGINT, SIGTERM, SIGHUP) while the demo trains removes the
  // sibling directory's files and then the directory; the files' own
  // temporaries are write_file_atomic's. The move into model_dir holds the
  // signals back, so a signal leaves model_dir's files all old or all new.
  std::vector<std::string> cleanup;
  for (const std::string& f : kTranslateDemoFiles) cleanup.push_back((work / f).string());
  cleanup.push_back(work.string());
  io::remove_on_signal(cleanup);
  struct Unregister {
    ~Unregister() { io::remove_on_signal({}); }
  } unregister;
  try {
    TranslateDemoResult r = run_demo(o, work.string());
    {
      io::SignalBlock hold;
      fs::create_directories(target, ec);
      if (!fs::is_directory(target, ec)) throw Error("--model-dir " + o.model_dir + ": cannot make the directory");
      for (const std::string& f : kTranslateDemoFiles) {
        fs::rename(work / f, target / f, ec);
        if (ec) throw Error("--model-dir " + o.model_dir + ": cannot move " + f + " into it (" + ec.message() + ")");
      }
      fs::remove_all(work, ec);
    }
    return r;
  } catch (...) {
    fs::remove_all(work, ec);
    throw;
  }
}

namespace {

TranslateDemoResult run_demo(const TranslateDemoOptions& o, const std::string& dir) {
  TranslateDemoResult r;
  const std::vector<int64_t> test = held_out_numbers(o.held_out, o.seed);
  const std::unordered_set<int64_t> banned(test.begin(), test.end());
  std::mt19937_64 rng(o.seed);
  auto train_number = [&] {
    for (;;)
      if (const int64_t n = draw(rng); !banned.count(n)) return n;
  };

  // The vocabularies: SentencePiece trained on training text only.
  std::vector<std::string> en, fr;
  for (int64_t i = 0; i < o.vocab_text; ++i) {
    const int64_t n = train_number();
    en.push_back(english_number(n));
    fr.push_back(french_number(n));
  }
  MarianTokenizer::train(dir, en, fr, o.source_pieces, o.target_pieces);
  const MarianTokenizer tok = MarianTokenizer::load(dir);
  r.vocab = tok.source_vocab_size();

  Seq2SeqConfig mc;
  mc.vocab = r.vocab;
  mc.d_model = o.d_model;
  mc.heads = o.heads;
  mc.d_ff = o.d_ff;
  mc.encoder_layers = mc.decoder_layers = o.layers;
  mc.dropout = o.dropout;
  mc.max_positions = 64;
  mc.pad_id = tok.pad_id();
  mc.eos_id = tok.eos_id();
  Seq2SeqTrainOptions to = o.train;
  to.threads = o.threads;
  to.isa = o.isa;
  Seq2SeqTrainer trainer(mc, to, o.seed);
  r.parameters = trainer.parameters();

  // Training: fresh numbers every step (never a held-out one).
  const auto t0 = Clock::now();
  std::vector<std::vector<int64_t>> src(size_t(o.batch)), tgt(size_t(o.batch));
  for (int64_t s = 1; s <= o.steps; ++s) {
    for (int64_t i = 0; i < o.batch; ++i) {
      const int64_t n = train_number();
      src[size_t(i)] = tok.encode(english_number(n));
      tgt[size_t(i)] = tok.encode_target(french_number(n));
    }
    const Seq2SeqStep st = trainer.step(src, tgt);
    if (!std::isfinite(st.loss)) throw Error("training diverged at step " + std::to_string(s) + " (loss not finite)");
    r.loss.push_back(st.loss);
    r.nll.push_back(st.nll);
    r.token_accuracy.push_back(double(st.correct) / double(st.tokens));
    if (o.log_every > 0 && (s % o.log_every == 0 || s == o.steps)) {
      std::printf("  step %5lld  loss %.4f  cross-entropy %.4f  token accuracy %.4f  lr %.2e  %.0f s\n", (long long)s,
                  st.loss, st.nll, r.token_accuracy.back(), st.lr, seconds_since(t0));
      std::fflush(stdout);
    }
  }
  r.train_seconds = seconds_since(t0);
  trainer.save_marian(dir);

  // Held-out numbers, translated by the saved checkpoint (greedy).
  const auto t1 = Clock::now();
  const TranslationModel model = TranslationModel::load(dir);
  std::vector<std::vector<int64_t>> sources;
  for (int64_t n : test) sources.push_back(tok.encode(english_number(n)));
  GenerateOptions go;
  go.beams = 1;
  go.threads = o.threads;
  go.isa = o.isa;
  const auto out = model.generate(sources, go);
  r.eval_seconds = seconds_since(t1);
  r.held_out = int64_t(test.size());
  for (size_t i = 0; i < test.size(); ++i) {
    TranslateDemoExample e{test[i], english_number(test[i]), french_number(test[i]), tok.decode(out[i]), out[i]};
    if (e.translation == e.french) ++r.exact;
    else if (r.wrong.size() < 20) r.wrong.push_back(e);
    if (i % (test.size() / 8 + 1) == 0 && r.samples.size() < 8) r.samples.push_back(e);
  }

  // The loss curve: per step, and a 50-step running mean.
  plot::LineChart& c = r.loss_chart;
  c.title = "Training loss (label-smoothed cross-entropy, ε = " + std::to_string(o.train.label_smoothing).substr(0, 4) + ")";
  c.xlabel = "step";
  c.ylabel = "loss per target token";
  c.log_y = true;
  plot::Series raw{"per step", {}, {}, "#9ecae1"}, mean{"50-step mean", {}, {}, "#08519c"},
      ce{"cross-entropy (50-step mean)", {}, {}, "#d62728"};
  double acc = 0, acc_ce = 0;
  for (size_t i = 0; i < r.loss.size(); ++i) {
    raw.x.push_back(double(i + 1));
    raw.y.push_back(r.loss[i]);
    acc += r.loss[i];
    acc_ce += r.nll[i];
    if (i >= 50) {
      acc -= r.loss[i - 50];
      acc_ce -= r.nll[i - 50];
    }
    const double k = double(std::min<size_t>(i + 1, 50));
    mean.x.push_back(double(i + 1));
    mean.y.push_back(acc / k);
    ce.x.push_back(double(i + 1));
    ce.y.push_back(std::max(acc_ce / k, 1e-4));
  }
  c.series = {raw, mean, ce};

  // Cross-attention of the last decoder layer on three held-out numbers.
  for (size_t i = 0; i < r.samples.size() && r.attention.size() < 3; i += 3) {
    const auto& e = r.samples[i];
    // The ids the model produced (at most max_positions of them).
    const std::vector<int64_t> s = tok.encode(e.english);
    std::vector<int64_t> t = e.ids;
    if (t.empty()) continue;
    if (int64_t(t.size()) > mc.max_positions) t.resize(size_t(mc.max_positions));
    const std::vector<float> a = trainer.cross_attention(s, t, mc.decoder_layers - 1);
    plot::Heatmap h;
    h.title = std::to_string(e.number);
    h.nx = int(s.size());
    h.ny = int(t.size());
    h.x0 = 0;
    h.x1 = double(s.size());
    h.y0 = 0;
    h.y1 = double(t.size());
    h.vmin = 0;
    h.vmax = 1;
    h.sequential = true;
    h.xlabel = "source (English) tokens";
    h.ylabel = "target (French) tokens";
    h.v.resize(size_t(h.nx * h.ny));
    for (int iy = 0; iy < h.ny; ++iy)
      for (int ix = 0; ix < h.nx; ++ix) h.v[size_t(iy * h.nx + ix)] = a[size_t((h.ny - 1 - iy) * h.nx + ix)];
    for (int64_t id : s) h.xticks.push_back(piece_label(tok.piece(id)));
    for (int iy = 0; iy < h.ny; ++iy) h.yticks.push_back(piece_label(tok.piece(t[size_t(h.ny - 1 - iy)], true)));
    r.attention.push_back(std::move(h));
  }
  return r;
}

}  // namespace
}  // namespace ffn::demo
