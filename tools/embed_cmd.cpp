// ffn embed: sentence embeddings from a BERT checkpoint (include/ffn/sentence.hpp),
// by default the all-MiniLM-L6-v2 that scripts/setup.sh installs.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>

#include "commands.hpp"
#include "ffn/sentence.hpp"

namespace ffn::cli {

// Lines of a UTF-8 text file, one text each ("\r\n" or "\n"; a last line
// without a newline counts).
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("--input-file " + path + ": cannot open: " + io::errno_text());
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  if (f.bad()) throw Error("--input-file " + path + ": read error");
  return lines;
}

// Up to `n` more lines of standard input (fewer at its end).
std::vector<std::string> read_stdin_lines(int64_t n) {
  std::vector<std::string> lines;
  std::string line;
  while (int64_t(lines.size()) < n && std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  if (std::cin.bad()) throw Error("--input-file -: read error on standard input");
  return lines;
}

namespace {

struct EmbedArgs {
  std::string model, input_file, output, dtype = "fp32", compute = "fp32", int8_outliers, int8_attention;
  std::vector<std::string> texts, similarity;
  int64_t batch = 32;
  std::optional<int64_t> max_tokens;
  std::optional<std::string> prompt, prompt_name;
  bool no_truncate = false;
  int threads = 0;
};

// An int8 switch's value: "" (the default), on or off.
void int8_switch(const std::string& value, const char* flag, WeightDtype dtype, bool& out) {
  if (value.empty()) return;
  if (value != "on" && value != "off") throw Error(std::string(flag) + ": expected on or off, got '" + value + "'");
  if (dtype != WeightDtype::int8) throw Error(std::string(flag) + ": only with --dtype int8");
  out = value == "on";
}

// The load options of --dtype, --int8-outliers and --int8-attention.
SentenceLoadOptions load_options(const std::string& dtype, const std::string& int8_outliers,
                                 const std::string& int8_attention) {
  SentenceLoadOptions lo;
  lo.dtype = parse_weight_dtype(dtype, "--dtype");
  if (lo.dtype == WeightDtype::fp16) throw Error("--dtype: expected fp32, bf16 or int8, got fp16");
  int8_switch(int8_outliers, "--int8-outliers", lo.dtype, lo.int8_outliers);
  int8_switch(int8_attention, "--int8-attention", lo.dtype, lo.int8_attention);
  return lo;
}

// --compute: fp32, or bf16 with fp32 or bf16 weights.
Compute embed_compute(const std::string& compute, WeightDtype dtype) {
  const Compute c = parse_compute(compute, "--compute");
  if (c == Compute::bf16 && dtype == WeightDtype::int8)
    throw Error("--compute bf16: expected --dtype fp32 or bf16 (int8 weights compute in int8)");
  return c;
}

// How the weights are stored, for the bench's lines.
std::string int8_note(const SentenceLoadOptions& lo) {
  if (lo.dtype != WeightDtype::int8) return "";
  return std::string(lo.int8_outliers ? " (outlier input channels in fp32)" : " (plain)") +
         (lo.int8_attention ? ", attention projections int8" : ", attention fp32");
}

// Progress on stderr: a bar rewritten in place on a terminal; otherwise (a
// log file, a pipe) one plain line at most every few seconds, so that only
// long jobs print any. FFN_PROGRESS_SECONDS sets that interval (tests).
class EmbedProgress {
 public:
  // bar: whether a terminal gets the bar (not for a job of one batch).
  EmbedProgress(int64_t total, bool bar) : total_(total), tty_(isatty(STDERR_FILENO)), bar_(bar) {
    if (const char* v = std::getenv("FFN_PROGRESS_SECONDS")) interval_ = std::max(0.0, std::atof(v));
  }
  // done: texts finished so far (of total_, or -1 when reading standard input).
  void update(int64_t done) {
    const double s = seconds();
    if (tty_) {
      if (total_ <= 0 || !bar_) return;
      const int width = 30, filled = int(width * done / total_);
      std::fprintf(stderr, "\r\033[Kffn embed: [%s%s] %lld/%lld texts, %.0f/s", std::string(size_t(filled), '=').c_str(),
                   std::string(size_t(width - filled), ' ').c_str(), (long long)done, (long long)total_, double(done) / s);
      if (done == total_) std::fprintf(stderr, "\r\033[K");
    } else {
      if (s < last_ + interval_) return;
      last_ = s;
      printed_ = true;
      if (total_ > 0)
        std::fprintf(stderr, "ffn embed: %lld/%lld texts, %.0f texts/s, %.0f s\n", (long long)done, (long long)total_,
                     double(done) / s, s);
      else
        std::fprintf(stderr, "ffn embed: %lld texts, %.0f texts/s, %.0f s\n", (long long)done, double(done) / s, s);
    }
    std::fflush(stderr);
  }
  // The closing line, where a progress line was printed.
  void finish(int64_t done) {
    if (!tty_ && printed_)
      std::fprintf(stderr, "ffn embed: done, %lld texts in %.1f s (%.0f texts/s)\n", (long long)done, seconds(),
                   double(done) / seconds());
  }

 private:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  int64_t total_;
  bool tty_, bar_;
  double interval_ = 5.0, last_ = 0.0;
  bool printed_ = false;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

void print_rows(const Array& e, int64_t d) {
  const size_t n = e.data.size() / size_t(d);
  for (size_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) std::printf(j ? " %.7g" : "%.7g", e.data[i * size_t(d) + size_t(j)]);
    std::printf("\n");
  }
  std::fflush(stdout);
}

void cmd_embed(const EmbedArgs& a, const Common& c) {
  if (a.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(a.batch));
  const int threads = threads_or_throw(a.threads);
  const bool sim = !a.similarity.empty();
  if (sim && a.similarity.size() != 2) throw Error("--similarity: expected two texts A B");
  if (sim && (!a.texts.empty() || !a.input_file.empty() || !a.output.empty()))
    throw Error("--similarity: takes its two texts alone (no other TEXT, --input-file or --output)");
  if (!sim && a.texts.empty() == a.input_file.empty())
    throw Error(a.texts.empty() ? "embed: give the texts (TEXT... or --input-file lines.txt, - for standard input)"
                                : "embed: give TEXT... or --input-file, not both");
  const bool from_stdin = a.input_file == "-";
  if (!a.output.empty()) {
    io::check_writable_target(a.output);
    if (!from_stdin) check_not_an_input(a.output, "--output", {{"--input-file", a.input_file}});
  }
  SentenceLoadOptions lo = load_options(a.dtype, a.int8_outliers, a.int8_attention);
  const Compute compute = embed_compute(a.compute, lo.dtype);
  lo.max_tokens = a.max_tokens;
  lo.isa = c.isa;
  const std::string dir = a.model.empty() ? SentenceEncoder::default_model_dir() : a.model;
  const SentenceEncoder enc = SentenceEncoder::load(dir, lo);
  for (const std::string& note : enc.load_notes()) std::fprintf(stderr, "ffn: note: %s\n", note.c_str());
  const int64_t d = enc.dim();
  EmbedOptions eo;
  eo.threads = threads;
  eo.isa = c.isa;
  eo.compute = compute;
  eo.batch = a.batch;
  eo.prompt = a.prompt;
  eo.prompt_name = a.prompt_name;
  eo.truncate = !a.no_truncate;
  const std::string prompt = enc.prompt_text(eo);  // an unknown --prompt-name is refused before any work
  int64_t cut = 0;
  eo.truncated = [&](int64_t) { ++cut; };
  // After the work: how many texts were cut to the model's length.
  auto note_cut = [&](int64_t texts) {
    if (cut > 0)
      std::fprintf(stderr, "ffn: note: %lld of %lld texts were longer than the model's %lld tokens and were cut "
                   "(--no-truncate refuses them)\n", (long long)cut, (long long)texts, (long long)enc.max_tokens());
  };

  if (sim) {
    const Array e = enc.embed(a.similarity, eo);
    note_cut(2);
    double dot = 0, na = 0, nb = 0;
    for (int64_t j = 0; j < d; ++j) {
      dot += double(e.data[size_t(j)]) * e.data[size_t(d + j)];
      na += double(e.data[size_t(j)]) * e.data[size_t(j)];
      nb += double(e.data[size_t(d + j)]) * e.data[size_t(d + j)];
    }
    std::printf("%.6f\n", dot / std::sqrt(na * nb));
    return;
  }

  // Each line is checked (tokenized) before any work: the whole file, or
  // each window of standard input before that window runs.
  auto check_lines = [&](const std::vector<std::string>& lines, int64_t first) {
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string where = a.input_file.empty() ? "text " + std::to_string(first + int64_t(i)) +
                                                           (prompt.empty() ? "" : " with its prompt")
                                                     : "--input-file " + a.input_file + ": line " +
                                                           std::to_string(first + int64_t(i) + 1);
      bool longer = false;
      try {
        enc.tokenize(prompt + lines[i], &longer);
      } catch (const Error& e) {
        throw Error(where + ": " + e.what());
      }
      if (longer && a.no_truncate)
        throw Error(where + ": more than the model's " + std::to_string(enc.max_tokens()) +
                    " tokens (its special tokens included), and truncation is off (--no-truncate)");
    }
  };
  std::vector<std::string> texts = a.texts;
  if (!a.input_file.empty() && !from_stdin) texts = read_lines(a.input_file);
  if (!from_stdin) check_lines(texts, 0);

  // Windows of texts, in input order: each is sorted by length inside
  // embed() (the batches pack similar lengths) and, without --output, printed
  // as soon as it is done. A text's embedding does not depend on the others
  // in its batch or window, so the windows change no result.
  const int64_t window = 16 * a.batch;
  const int64_t total = from_stdin ? -1 : int64_t(texts.size());
  EmbedProgress progress(total, total > a.batch);
  int64_t done = 0;
  Array all;  // --output: every row, written at the end (atomically)
  all.shape = {0, d};
  for (int64_t start = 0;; start += window) {
    std::vector<std::string> part;
    if (from_stdin) {
      part = read_stdin_lines(window);
      check_lines(part, start);
    } else {
      if (start >= total) break;
      part.assign(texts.begin() + start, texts.begin() + std::min(total, start + window));
    }
    if (part.empty()) break;
    eo.progress = [&](int64_t n, int64_t) { progress.update(done + n); };
    const Array e = enc.embed(part, eo);
    done += int64_t(part.size());
    if (a.output.empty()) {
      print_rows(e, d);
    } else {
      all.data.insert(all.data.end(), e.data.begin(), e.data.end());
      all.shape[0] += int64_t(part.size());
    }
  }
  if (!a.output.empty()) write_npy(a.output, all);
  progress.finish(done);
  note_cut(done);
}

}  // namespace

int bench_embed(const EmbedBenchArgs& a, int threads, int repeats, int warmup, bool json) {
  if (a.input_file.empty() == a.text.empty())
    throw Error("--embed: give --input-file lines.txt (throughput) or --text T (latency of one text)");
  if (a.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(a.batch));
  SentenceLoadOptions lo = load_options(a.dtype, a.int8_outliers, a.int8_attention);
  const Compute compute = embed_compute(a.compute, lo.dtype);
  lo.isa = a.isa;
  const std::string dir = a.model.empty() ? SentenceEncoder::default_model_dir() : a.model;
  const SentenceEncoder enc = SentenceEncoder::load(dir, lo);
  for (const std::string& note : enc.load_notes()) std::fprintf(stderr, "ffn: note: %s\n", note.c_str());
  const std::vector<std::string> texts = a.text.empty() ? read_lines(a.input_file) : std::vector<std::string>{a.text};
  int64_t tokens = 0;
  for (const auto& t : texts) tokens += int64_t(enc.tokenize(t).size());
  EmbedOptions eo;
  eo.threads = threads;
  eo.isa = a.isa;
  eo.compute = compute;
  eo.batch = a.batch;
  std::vector<double> times;
  for (int i = 0; i < warmup + repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    enc.embed(texts, eo);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) times.push_back(t);
  }
  const double med = median(times);
  if (json) {
    std::printf("{\"texts\": %zu, \"tokens\": %lld, \"batch\": %lld, \"threads\": %d, \"dtype\": \"%s\", "
                "\"compute\": \"%s\", \"int8_outliers\": %s, \"int8_attention\": %s, \"median_s\": %.9g, \"texts_per_s\": %.6g}\n",
                texts.size(), (long long)tokens, (long long)a.batch, threads, a.dtype.c_str(),
                std::string(to_string(compute)).c_str(), lo.dtype == WeightDtype::int8 && lo.int8_outliers ? "true" : "false",
                lo.dtype == WeightDtype::int8 && lo.int8_attention ? "true" : "false", med, double(texts.size()) / med);
  } else {
    std::printf("ffn bench --embed: %s, %zu text(s), %lld tokens, batch %lld, %d threads, weights %s%s, %s compute\n",
                enc.dir().c_str(), texts.size(), (long long)tokens, (long long)a.batch, threads, a.dtype.c_str(),
                int8_note(lo).c_str(), std::string(to_string(compute)).c_str());
    std::printf("  time per call  median %.3f ms (min %.3f, max %.3f; %d calls)\n", med * 1e3,
                *std::min_element(times.begin(), times.end()) * 1e3, *std::max_element(times.begin(), times.end()) * 1e3,
                repeats);
    std::printf("  throughput     %.1f texts/s, %.0f tokens/s\n", double(texts.size()) / med, double(tokens) / med);
  }
  return 0;
}

Command add_embed(CLI::App& app) {
  auto a = std::make_shared<EmbedArgs>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "sentence embeddings (BERT, e.g. all-MiniLM-L6-v2): TEXT... or --input-file, or --similarity A B");
  cmd->add_option("texts", a->texts, "texts to embed (one embedding per text)");
  cmd->add_option("--model", a->model, "model directory (config.json, model.safetensors, vocab.txt); default: $FFN_MODEL_DIR, else ~/.cache/ffn/all-MiniLM-L6-v2");
  cmd->add_option("--input-file", a->input_file,
                  "UTF-8 text file, one text per line; - reads standard input (embedded and printed a window of "
                  "16 x --batch lines at a time)");
  cmd->add_option("--output", a->output, "write the embeddings as .npy [texts, dim] (default: print one line per text)");
  cmd->add_option("--similarity", a->similarity, "print the cosine similarity of the embeddings of A and B")->expected(2);
  cmd->add_option("--batch", a->batch, "texts per call (default 32)");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens per text, its special tokens ([CLS] and [SEP]) included (default: the model's max_seq_length)");
  cmd->add_option("--prompt-name", a->prompt_name,
                  "put the model's prompt of this name before each text (config_sentence_transformers.json, e.g. "
                  "E5's query or passage; default: the model's default prompt, if any)");
  cmd->add_option("--prompt", a->prompt, "put this text before each text (instead of a named prompt)");
  cmd->add_flag("--no-truncate", a->no_truncate,
                "refuse a text longer than the model's tokens (default: cut it, and say how many were cut)");
  cmd->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  cmd->add_option("--dtype", a->dtype, "FFN weights as fp32 (default), bf16 or int8");
  cmd->add_option("--compute", a->compute,
                  "the products in fp32 (default) or bf16 (operands rounded to bf16, sums in fp32: AMX or "
                  "AVX512_BF16 where the CPU has them); bf16 takes --dtype fp32 or bf16");
  cmd->add_option("--int8-outliers", a->int8_outliers,
                  "--dtype int8: on (default): each layer's outlier input channels kept in fp32, found by running the "
                  "fp32 model over built-in calibration texts at load; off: plain per-token int8");
  cmd->add_option("--int8-attention", a->int8_attention,
                  "--dtype int8: on (default): the attention's Q/K/V and output projections in int8 too; off: the "
                  "FFN sublayers only");
  return {cmd, [a](const Common& c) {
            cmd_embed(*a, c);
            return 0;
          }};
}

}  // namespace ffn::cli
