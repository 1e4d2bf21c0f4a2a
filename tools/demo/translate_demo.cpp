// `ffn demo translate` (tools/demo/translate_demo.hpp).
#include "demo/translate_demo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <unordered_set>

#include "demo/number_words.hpp"
#include "ffn/translation.hpp"

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

TranslateDemoResult translate_demo(const TranslateDemoOptions& o) {
  if (o.steps < 1) throw Error("--steps: expected ≥ 1, got " + std::to_string(o.steps));
  if (o.batch < 1 || o.batch > 4096) throw Error("--batch: expected 1..4096, got " + std::to_string(o.batch));
  if (o.held_out < 1 || o.held_out > 100000)
    throw Error("--held-out: expected 1..100000, got " + std::to_string(o.held_out));
  if (o.vocab_text < 100) throw Error("--vocab-text: expected ≥ 100 lines");
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
  MarianTokenizer::train(o.model_dir, en, fr, o.source_pieces, o.target_pieces);
  const MarianTokenizer tok = MarianTokenizer::load(o.model_dir);
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
  Seq2SeqTrainer trainer(mc, to, o.seed);
  r.parameters = mc.vocab * mc.d_model +
                 2 * mc.encoder_layers * (mc.d_model * mc.d_ff) + mc.encoder_layers * (4 * mc.d_model * mc.d_model) +
                 2 * mc.decoder_layers * (mc.d_model * mc.d_ff) + mc.decoder_layers * (8 * mc.d_model * mc.d_model);

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
  trainer.save_marian(o.model_dir);

  // Held-out numbers, translated by the saved checkpoint (greedy).
  const auto t1 = Clock::now();
  const TranslationModel model = TranslationModel::load(o.model_dir);
  std::vector<std::vector<int64_t>> sources;
  for (int64_t n : test) sources.push_back(tok.encode(english_number(n)));
  GenerateOptions go;
  go.beams = 1;
  go.threads = o.threads;
  const auto out = model.generate(sources, go);
  r.eval_seconds = seconds_since(t1);
  r.held_out = int64_t(test.size());
  for (size_t i = 0; i < test.size(); ++i) {
    TranslateDemoExample e{test[i], english_number(test[i]), french_number(test[i]), tok.decode(out[i])};
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
    const std::vector<int64_t> s = tok.encode(e.english), t = tok.encode_target(e.translation);
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
    for (int iy = 0; iy < h.ny; ++iy) h.yticks.push_back(piece_label(tok.piece(t[size_t(h.ny - 1 - iy)])));
    r.attention.push_back(std::move(h));
  }
  return r;
}

}  // namespace ffn::demo
