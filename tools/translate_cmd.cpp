// ffn translate: a MarianMT checkpoint (include/ffn/translation.hpp) from the
// command line, text in and text out (or token ids with --ids), one result
// line per input line, in input order.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <iostream>
#include <numeric>
#include <sstream>

#include "commands.hpp"
#include "ffn/sampling.hpp"  // SamplingOptions: the sampling flags' ranges
#include "ffn/diagnostics.hpp"
#include "ffn/translation.hpp"

namespace ffn::cli {
namespace {

struct TranslateArgs {
  std::string model, input_file, output, dtype = "fp32";
  std::vector<std::string> texts;
  bool ids = false;
  std::optional<int64_t> beams, max_new_tokens;
  int64_t batch = 32;
  int threads = 0;
  // sampling (the decoding engine's, as generate's)
  float temperature = 0.0f, top_p = 1.0f, repeat_penalty = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
};

std::vector<int64_t> parse_ids(const std::string& line, const std::string& where) {
  std::vector<int64_t> ids = parse_token_ids(line, where);
  if (ids.empty()) throw Error(where + ": no token ids (--ids: each line holds a source's ids, ending with EOS)");
  return ids;
}

void cmd_translate(const TranslateArgs& a, const Common& c) {
  if (a.texts.empty() == a.input_file.empty())
    throw Error("give the inputs either as arguments or with --input-file (one per line; - reads standard input)");
  if (a.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(a.batch));
  if (a.beams && (*a.beams < 1 || *a.beams > 1024))
    throw Error("--beams: expected 1..1024, got " + std::to_string(*a.beams));
  if (a.max_new_tokens && *a.max_new_tokens < 1)
    throw Error("--max-new-tokens: expected a positive integer, got " + std::to_string(*a.max_new_tokens));
  {
    SamplingOptions so;  // the sampling flags' ranges, before any work
    so.temperature = a.temperature;
    so.top_k = a.top_k;
    so.top_p = a.top_p;
    so.repeat_penalty = a.repeat_penalty;
    so.beams = a.beams.value_or(1);
    so.validate();
  }
  const int threads = threads_or_throw(a.threads);
  const bool from_stdin = a.input_file == "-";
  if (!a.output.empty()) {
    io::check_writable_target(a.output);
    if (!a.input_file.empty() && !from_stdin) check_not_an_input(a.output, "--output", {{"--input-file", a.input_file}});
  }
  const WeightDtype dtype = parse_weight_dtype(a.dtype, "--dtype");
  if (dtype == WeightDtype::fp16) throw Error("--dtype: expected fp32, int8 or bf16, got fp16");
  const TranslationModel model = TranslationModel::load(a.model, dtype);
  const TranslationConfig& cfg = model.config();
  std::optional<MarianTokenizer> tok;
  if (!a.ids) {
    try {
      tok = MarianTokenizer::load(a.model);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + "; or give token ids with --ids");
    }
  }
  // --max-new-tokens: the generation config's max_length − 1 (transformers
  // counts the start token), never past the position table.
  const int64_t max_new = a.max_new_tokens.value_or(std::min(cfg.max_length - 1, cfg.max_positions));
  if (max_new > cfg.max_positions)
    throw Error("--max-new-tokens " + std::to_string(max_new) + " is past the model's " +
                std::to_string(cfg.max_positions) + " positions (" + a.model + "/config.json max_position_embeddings)");
  const int64_t beams = a.beams.value_or(a.temperature != 0.0f ? 1 : cfg.num_beams);
  if (beams > cfg.decoder_vocab_size / 2)
    throw Error("--beams " + std::to_string(beams) + " is more than half the target vocabulary (" +
                std::to_string(cfg.decoder_vocab_size) + ")");

  const std::vector<std::string> lines =
      !a.texts.empty() ? a.texts : from_stdin ? read_stdin_lines(std::numeric_limits<int64_t>::max()) : read_lines(a.input_file);
  auto where = [&](size_t i) {
    return a.texts.empty() ? "--input-file " + a.input_file + ": line " + std::to_string(i + 1)
                           : "input " + std::to_string(i + 1);
  };
  std::vector<std::vector<int64_t>> sources;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int64_t> ids = a.ids ? parse_ids(lines[i], where(i)) : tok->encode(lines[i]);
    for (int64_t id : ids)
      if (id >= cfg.vocab_size)
        throw Error(where(i) + ": token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(cfg.vocab_size));
    if (int64_t(ids.size()) > cfg.max_positions)
      throw Error(where(i) + ": " + std::to_string(ids.size()) + " tokens, more than the model's " +
                  std::to_string(cfg.max_positions) + " positions");
    sources.push_back(std::move(ids));
  }
  // Batches of similar lengths (a source's result does not depend on its
  // batch: Translation.MatchesTransformersGenerate checks sources alone).
  // When sampling, input order instead: source i draws from seed + i·φ
  // whatever the batches (a batch starting at input b0 gets seed + b0·φ).
  const bool sampling = a.temperature != 0.0f;
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (!sampling)
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return sources[x].size() < sources[y].size(); });
  std::vector<std::vector<int64_t>> results(sources.size());
  GenerateOptions go;
  go.beams = beams;
  go.max_new_tokens = max_new;
  go.threads = threads;
  go.isa = c.isa;
  go.temperature = a.temperature;
  go.top_k = a.top_k;
  go.top_p = a.top_p;
  go.repeat_penalty = a.repeat_penalty;
  for (size_t b0 = 0; b0 < order.size(); b0 += size_t(a.batch)) {
    const size_t b1 = std::min(order.size(), b0 + size_t(a.batch));
    std::vector<std::vector<int64_t>> batch;
    for (size_t k = b0; k < b1; ++k) batch.push_back(sources[order[k]]);
    go.seed = a.seed + uint64_t(b0) * 0x9e3779b97f4a7c15ULL;
    const auto out = model.generate(batch, go);
    for (size_t k = b0; k < b1; ++k) results[order[k]] = out[k - b0];
  }
  auto line_of = [&](const std::vector<int64_t>& r) {
    if (!a.ids) return tok->decode(r);
    std::string s;
    for (size_t k = 0; k < r.size(); ++k) s += (k ? " " : "") + std::to_string(r[k]);
    return s;
  };
  if (a.output.empty()) {
    for (const auto& r : results) std::cout << line_of(r) << '\n';
    std::cout.flush();
    if (!std::cout) throw Error("standard output: write error");
    return;
  }
  io::write_file_atomic(a.output, [&](std::FILE* f) {
    for (const auto& r : results) {
      const std::string s = line_of(r) + "\n";
      io::write_all(f, s.data(), s.size(), a.output);
    }
  });
}

}  // namespace

int bench_translate(const TranslateBenchArgs& b, int threads, int repeats, int warmup, bool json) {
  if (b.input_file.empty()) throw Error("--translate: give --input-file with the sources' token ids, one source per line");
  if (b.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(b.batch));
  const WeightDtype dtype = parse_weight_dtype(b.dtype, "--dtype");
  if (dtype == WeightDtype::fp16) throw Error("--dtype: expected fp32, int8 or bf16, got fp16");
  const TranslationModel model = TranslationModel::load(b.model, dtype);
  const std::vector<std::string> lines = read_lines(b.input_file);
  std::vector<std::vector<int64_t>> sources;
  for (size_t i = 0; i < lines.size(); ++i)
    sources.push_back(parse_ids(lines[i], "--input-file " + b.input_file + ": line " + std::to_string(i + 1)));
  GenerateOptions go;
  go.beams = b.beams;
  go.max_new_tokens =
      b.max_new_tokens.value_or(std::min(model.config().max_length - 1, model.config().max_positions));
  go.threads = threads;
  go.isa = b.isa;
  std::vector<double> times;
  GenerateTimes parts;
  int64_t tokens = 0;
  for (int r = 0; r < warmup + repeats; ++r) {
    GenerateTimes t;
    int64_t made = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t b0 = 0; b0 < sources.size(); b0 += size_t(b.batch)) {
      const std::vector<std::vector<int64_t>> batch(sources.begin() + std::ptrdiff_t(b0),
                                                    sources.begin() + std::ptrdiff_t(std::min(sources.size(), b0 + size_t(b.batch))));
      for (const auto& o : model.generate(batch, go, &t)) made += int64_t(o.size());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r < warmup) continue;
    times.push_back(s);
    tokens = made;
    parts.encoder += t.encoder / repeats;
    parts.decoder += t.decoder / repeats;
    parts.projection += t.projection / repeats;
    parts.search += t.search / repeats;
  }
  const double med = median(times), total = parts.encoder + parts.decoder + parts.projection + parts.search;
  const int64_t beams = b.beams.value_or(model.config().num_beams);
  if (json) {
    std::printf("{\"sources\": %zu, \"target_tokens\": %lld, \"batch\": %lld, \"beams\": %lld, \"threads\": %d, "
                "\"dtype\": \"%s\", \"median_s\": %.9g, \"ms_per_token\": %.6g, \"tokens_per_s\": %.6g, "
                "\"share_encoder\": %.4f, \"share_decoder\": %.4f, \"share_projection\": %.4f, \"share_search\": %.4f}\n",
                sources.size(), (long long)tokens, (long long)b.batch, (long long)beams, threads, b.dtype.c_str(), med,
                med * 1e3 / double(std::max<int64_t>(tokens, 1)), double(tokens) / med, parts.encoder / total,
                parts.decoder / total, parts.projection / total, parts.search / total);
  } else {
    std::printf("ffn bench --translate: %s, %zu source(s), batch %lld, beams %lld, %d threads, weights %s\n",
                b.model.c_str(), sources.size(), (long long)b.batch, (long long)beams, threads, b.dtype.c_str());
    std::printf("  time per run   median %.3f ms (%d runs), %lld target tokens: %.3f ms per token, %.1f tokens/s\n",
                med * 1e3, repeats, (long long)tokens, med * 1e3 / double(std::max<int64_t>(tokens, 1)),
                double(tokens) / med);
    std::printf("  shares         encoder %.1f%%, decoder layers %.1f%%, output projection %.1f%%, search %.1f%%\n",
                100 * parts.encoder / total, 100 * parts.decoder / total, 100 * parts.projection / total,
                100 * parts.search / total);
  }
  return 0;
}

Command add_translate(CLI::App& app) {
  auto a = std::make_shared<TranslateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "translate", "translate with a Hugging Face MarianMT directory (opus-mt): text in, text out (or ids with --ids)");
  cmd->add_option("--model", a->model,
                  "MarianMT directory: config.json, model.safetensors, generation_config.json, source.spm, "
                  "target.spm, vocab.json")
      ->required();
  cmd->add_option("texts", a->texts, "inputs (each like a line of --input-file)");
  cmd->add_option("--input-file", a->input_file, "one input per line; - reads standard input");
  cmd->add_flag("--ids", a->ids,
                "inputs are token ids (space-separated, ending with EOS, as the tokenizer makes them); "
                "outputs are the generated ids after the start token, up to and including EOS");
  cmd->add_option("--beams", a->beams, "beam size (default: the generation config's num_beams; 1 = greedy)");
  cmd->add_option("--max-new-tokens", a->max_new_tokens,
                  "most tokens generated per input (default: the generation config's max_length - 1)");
  cmd->add_option("--temperature", a->temperature,
                  "0 = search (default); > 0 samples from softmax(logits / T) (then --beams defaults to 1)");
  cmd->add_option("--top-k", a->top_k, "sample among the K most likely tokens (default 0: all)");
  cmd->add_option("--top-p", a->top_p, "sample among the most likely tokens whose probability reaches P (default 1)");
  cmd->add_option("--seed", a->seed,
                  "seed of the sampling draws (default 0); input i draws from its own stream, whatever --batch");
  cmd->add_option("--repeat-penalty", a->repeat_penalty,
                  "divide the logits of tokens already generated by R (multiply if negative), as transformers' "
                  "repetition_penalty (default 1: off; greedy or sampling)");
  cmd->add_option("--batch", a->batch, "inputs decoded together (default 32)");
  cmd->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  cmd->add_option("--dtype", a->dtype,
                  "weights as fp32 (default), int8 (the FFN matrices, the decoder's attention projections and the "
                  "output projection) or bf16 (the FFN matrices), converted on load");
  cmd->add_option("--output", a->output, "write the results here (default: standard output), one line per input");
  return {cmd, [a](const Common& c) {
            cmd_translate(*a, c);
            return 0;
          }};
}

}  // namespace ffn::cli
