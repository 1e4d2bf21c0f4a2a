// ffn rerank: documents ranked for a query by a cross-encoder
// (include/ffn/cross_encoder.hpp), e.g. cross-encoder/ms-marco-MiniLM-L-6-v2.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "ffn/cross_encoder.hpp"

namespace ffn::cli {

namespace {

struct RerankArgs {
  std::string model, query, input_file;
  std::vector<std::string> documents;
  std::optional<int64_t> max_tokens, top_k;
  int64_t batch = 32;
  int threads = 0;
  bool json = false, no_truncate = false;
};

void cmd_rerank(const RerankArgs& a, const Common& c) {
  if (a.model.empty()) throw Error("rerank: give the cross-encoder's directory (--model DIR)");
  if (a.documents.empty() == a.input_file.empty())
    throw Error(a.documents.empty() ? "rerank: give the documents (DOC... or --input-file docs.txt, - for standard input)"
                                    : "rerank: give DOC... or --input-file, not both");
  if (a.top_k && *a.top_k < 1) throw Error("--top-k: expected a positive integer, got " + std::to_string(*a.top_k));
  if (a.batch < 1) throw Error("--batch: expected a positive integer, got " + std::to_string(a.batch));
  const int threads = threads_or_throw(a.threads);
  const std::vector<std::string> docs =
      a.input_file.empty() ? a.documents : a.input_file == "-" ? read_stdin_lines(INT64_MAX) : read_lines(a.input_file);
  if (docs.empty()) throw Error("--input-file " + a.input_file + ": no documents (one per line)");
  CrossEncoderLoadOptions lo;
  lo.max_tokens = a.max_tokens;
  lo.isa = c.isa;
  const CrossEncoder ce = CrossEncoder::load(a.model, lo);
  for (const std::string& note : ce.load_notes()) std::fprintf(stderr, "ffn: note: %s\n", note.c_str());
  // Every pair is checked before any work, named by its line (or argument).
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string where = a.input_file.empty() ? "document " + std::to_string(i)
                                                   : "--input-file " + a.input_file + ": line " + std::to_string(i + 1);
    bool longer = false;
    try {
      (void)ce.tokenize(a.query, docs[i], nullptr, &longer);
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    if (longer && a.no_truncate)
      throw Error(where + ": with the query, more than the model's " + std::to_string(ce.max_tokens()) +
                  " tokens, and truncation is off (--no-truncate)");
  }
  RerankOptions o;
  o.threads = threads;
  o.batch = a.batch;
  o.isa = c.isa;
  o.truncate = !a.no_truncate;
  int64_t cut = 0;
  o.truncated = [&](int64_t) { ++cut; };
  const auto ranked = ce.rank(a.query, docs, o);
  const size_t n = a.top_k ? std::min(ranked.size(), size_t(*a.top_k)) : ranked.size();
  if (a.json) {  // text-embeddings-inference's /rerank response: [{"index", "score", "text"}], best first
    nlohmann::json out = nlohmann::json::array();
    for (size_t k = 0; k < n; ++k)
      out.push_back({{"index", ranked[k].first}, {"score", ranked[k].second}, {"text", docs[size_t(ranked[k].first)]}});
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    for (size_t k = 0; k < n; ++k)
      std::printf("%.7g\t%lld\t%s\n", double(ranked[k].second), (long long)ranked[k].first,
                  docs[size_t(ranked[k].first)].c_str());
  }
  if (cut > 0)
    std::fprintf(stderr, "ffn: note: %lld of %zu pairs were longer than the model's %lld tokens and were cut, the "
                 "longer text first (--no-truncate refuses them)\n", (long long)cut, docs.size(),
                 (long long)ce.max_tokens());
}

}  // namespace

Command add_rerank(CLI::App& app) {
  auto a = std::make_shared<RerankArgs>();
  CLI::App* cmd = app.add_subcommand(
      "rerank", "documents ranked for a query by a cross-encoder (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2)");
  cmd->add_option("documents", a->documents, "the documents (one score each)");
  cmd->add_option("--model", a->model, "the cross-encoder's directory (BertForSequenceClassification, XLMRobertaForSequenceClassification or "
                                       "ModernBertForSequenceClassification: config.json, model.safetensors, vocab.txt, "
                                       "sentencepiece.bpe.model or tokenizer.json)")->required();
  cmd->add_option("--query", a->query, "the query")->required();
  cmd->add_option("--input-file", a->input_file, "UTF-8 text file, one document per line; - reads standard input");
  cmd->add_option("--top-k", a->top_k, "print the best K only (default: all, best first)");
  cmd->add_flag("--json", a->json, "print [{\"index\", \"score\", \"text\"}, ...], best first (text-embeddings-inference's shape)");
  cmd->add_option("--batch", a->batch, "pairs per call (default 32)");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens per pair, its special tokens ([CLS] and both [SEP]) included (default: the "
                                                 "tokenizer's model_max_length)");
  cmd->add_flag("--no-truncate", a->no_truncate,
                "refuse a pair longer than the model's tokens (default: cut the longer text first, and say how many)");
  cmd->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  return {cmd, [a](const Common& c) {
            cmd_rerank(*a, c);
            return 0;
          }};
}

}  // namespace ffn::cli
