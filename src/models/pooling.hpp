// sentence-transformers' pipeline after the Transformer module, as a model
// directory describes it (issue 64): the Pooling module's modes
// (1_Pooling/config.json), the Normalize module (modules.json), and the
// prompts of config_sentence_transformers.json. Every embedding family runs
// it on its encoder's output.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ffn::models {

// The pooling modes, in the order sentence-transformers concatenates them.
// mean_sqrt_len: the sum over the tokens ÷ √count; last: the last real token.
enum class PoolMode { cls, max, mean, mean_sqrt_len, last };

struct Pooling {
  std::vector<PoolMode> modes{PoolMode::mean};
  bool normalize = true;  // a Normalize module: x / max(‖x‖₂, 1e-12)
  int64_t dim(int64_t d) const { return d * int64_t(modes.size()); }
  // e [dim(d)] from h [n, d], one text's rows (its real tokens, n ≥ 1), as
  // sentence-transformers computes it in float32.
  void pool(const float* h, int64_t n, int64_t d, float* e) const;
  // "mean", "cls + mean", ... and ", normalized": for messages and docs.
  std::string describe() const;
};

// The model directory's pipeline: modules.json (Transformer, Pooling,
// Normalize; any other module is refused by name) and the Pooling module's
// config.json. What the files leave unsaid is assumed as before (mean
// pooling, normalized) and noted in `notes`, naming the file. d: the
// encoder's width (the config's word_embedding_dimension must match).
Pooling read_pooling(const std::filesystem::path& dir, int64_t d, std::vector<std::string>& notes);

// config_sentence_transformers.json's prompts: named texts put before the
// input (E5's "query: ", BGE's instruction) and the one used by default.
struct Prompts {
  std::map<std::string, std::string> named;
  std::string default_name;  // empty: none
  // The text to put before each input: `prompt` if given, else the one
  // named `name` (Error listing the model's names if it has none of that
  // name), else the default's, else "". Error if both are given.
  std::string choose(const std::optional<std::string>& prompt, const std::optional<std::string>& name) const;
  // "query, passage (default passage)" or "none".
  std::string describe() const;
};
Prompts read_prompts(const std::filesystem::path& dir);

}  // namespace ffn::models
