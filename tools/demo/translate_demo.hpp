// `ffn demo translate`: the seeds' English → French example, end to end.
// English number words → French number words (tools/demo/number_words.hpp),
// SentencePiece vocabularies trained on the training text, an
// encoder–decoder Transformer trained by ffn on the paper's recipe
// (ffn::Seq2SeqTrainer), saved as a MarianMT directory, then loaded back
// with ffn::TranslationModel and scored on held-out numbers never seen in
// training, with the loss curve and cross-attention maps as SVG.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ffn/seq2seq.hpp"
#include "plot/svg.hpp"

namespace ffn::demo {

struct TranslateDemoOptions {
  std::string model_dir = "number-translator";  // the MarianMT directory written
  int64_t steps = 2500, batch = 64;
  int64_t held_out = 1000;     // numbers kept out of training, scored at the end
  int64_t vocab_text = 20000;  // training lines the SentencePiece models learn from (not a flag)
  int64_t source_pieces = 200, target_pieces = 200;
  int64_t d_model = 128, heads = 4, d_ff = 512, layers = 2;
  float dropout = 0.1f;
  Seq2SeqTrainOptions train;
  uint64_t seed = 0;
  int threads = 0;
  Isa isa = Isa::automatic;
  int64_t log_every = 100;  // progress lines on stdout (0: none)
};

struct TranslateDemoExample {
  int64_t number = 0;
  std::string english, french, translation;
  std::vector<int64_t> ids;  // the translation's ids, EOS included
};

struct TranslateDemoResult {
  int64_t vocab = 0, parameters = 0;
  double train_seconds = 0, eval_seconds = 0;
  std::vector<double> loss, nll, token_accuracy;  // per step
  int64_t held_out = 0, exact = 0;                // held-out numbers, translated exactly
  std::vector<TranslateDemoExample> wrong;        // the held-out numbers it got wrong (at most 20)
  std::vector<TranslateDemoExample> samples;      // a few held-out translations
  plot::LineChart loss_chart;
  std::vector<plot::Heatmap> attention;           // the last decoder layer's cross-attention on samples
};

// The held-out numbers of a seed: `count` numbers, a tenth of them (at most
// 500) below 1000, the rest in 1000..999,999, never drawn for training.
std::vector<int64_t> held_out_numbers(int64_t count, uint64_t seed);

// The files translate_demo writes into model_dir.
extern const std::vector<std::string> kTranslateDemoFiles;

// Throws Error naming the flag of the first bad option (before any work).
void check_translate_options(const TranslateDemoOptions& o);

// Checks the options, then builds everything in a sibling directory
// (model_dir + ".partial-<pid>"), which replaces model_dir's files only
// when training, saving and scoring succeeded; on an error it is removed.
TranslateDemoResult translate_demo(const TranslateDemoOptions& o);

}  // namespace ffn::demo
