// sentence-transformers' pooling, normalization and prompts (src/models/pooling.hpp).
#include "models/pooling.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/json_file.hpp"
#include "ffn/types.hpp"

namespace ffn::models {

namespace fs = std::filesystem;

void Pooling::pool(const float* h, int64_t n, int64_t d, float* e) const {
  for (PoolMode m : modes) {
    switch (m) {
      case PoolMode::cls: std::copy(h, h + d, e); break;
      case PoolMode::last: std::copy(h + (n - 1) * d, h + n * d, e); break;
      case PoolMode::max:
        for (int64_t j = 0; j < d; ++j) {
          float v = h[j];
          for (int64_t i = 1; i < n; ++i) v = std::max(v, h[i * d + j]);
          e[j] = v;
        }
        break;
      case PoolMode::mean:
      case PoolMode::mean_sqrt_len: {
        // sum(h · mask) / max(count, 1e-9), or / √count
        const float div = m == PoolMode::mean ? float(n) : std::sqrt(float(n));
        for (int64_t j = 0; j < d; ++j) {
          float s = 0.0f;
          for (int64_t i = 0; i < n; ++i) s += h[i * d + j];
          e[j] = s / div;
        }
        break;
      }
    }
    e += d;
  }
  if (normalize) {  // torch.nn.functional.normalize over the whole (concatenated) vector
    const int64_t w = dim(d);
    e -= w;
    double ss = 0.0;
    for (int64_t j = 0; j < w; ++j) ss += double(e[j]) * double(e[j]);
    const float inv = 1.0f / std::max(float(std::sqrt(ss)), 1e-12f);
    for (int64_t j = 0; j < w; ++j) e[j] *= inv;
  }
}

std::string Pooling::describe() const {
  std::string s;
  for (PoolMode m : modes) {
    s += s.empty() ? "" : " + ";
    switch (m) {
      case PoolMode::cls: s += "cls"; break;
      case PoolMode::max: s += "max"; break;
      case PoolMode::mean: s += "mean"; break;
      case PoolMode::mean_sqrt_len: s += "mean_sqrt_len"; break;
      case PoolMode::last: s += "last token"; break;
    }
  }
  return s + (normalize ? ", normalized" : "");
}

Pooling read_pooling(const fs::path& dir, int64_t d, std::vector<std::string>& notes) {
  // The sentence-transformers pipeline (modules.json): Transformer, Pooling,
  // Normalize are what this reproduces; any other module is refused rather
  // than skipped. Without modules.json (a plain BERT directory): mean
  // pooling and normalization. What the files do not say is assumed and
  // noted, since it changes every embedding.
  Pooling p;
  std::error_code ec;
  const fs::path mp = dir / "modules.json";
  fs::path config = dir / "1_Pooling" / "config.json";
  if (fs::exists(mp, ec)) {
    const nlohmann::json mods = read_json(mp);
    if (!mods.is_array()) throw Error(mp.string() + ": expected a JSON list of modules");
    p.normalize = false;
    config.clear();
    for (const auto& mod : mods) {
      const std::string type = json_get<std::string>(mod, "type", mp);
      if (type == "sentence_transformers.models.Normalize") p.normalize = true;
      else if (type == "sentence_transformers.models.Pooling") config = dir / json_get<std::string>(mod, "path", mp) / "config.json";
      else if (type != "sentence_transformers.models.Transformer")
        throw Error(mp.string() + ": module " + type + " is not supported (Transformer, Pooling, Normalize)");
    }
    if (config.empty()) notes.push_back(mp.string() + ": no Pooling module; assumed mean pooling");
  } else {
    notes.push_back(mp.string() + ": not found; assumed L2-normalized embeddings (a Normalize module)");
  }
  if (!config.empty() && !fs::exists(config, ec)) {
    notes.push_back(config.string() + ": not found; assumed mean pooling");
  } else if (!config.empty()) {
    const nlohmann::json pc = read_json(config);
    if (!pc.is_object()) throw Error(config.string() + ": expected a JSON object");
    // As sentence-transformers' Pooling(**config): mean is on unless the file
    // says otherwise, and a pooling_mode string names the one mode alone.
    const std::string named = json_opt<std::string>(pc, "pooling_mode", "", config);
    auto mode = [&](const char* key) {
      if (!named.empty()) {
        const std::string k = key;
        return k == "pooling_mode_" + named || k == "pooling_mode_" + named + "_token" ||
               k == "pooling_mode_" + named + "_tokens";
      }
      return json_opt<bool>(pc, key, std::string(key) == "pooling_mode_mean_tokens", config);
    };
    if (!named.empty() && named != "cls" && named != "max" && named != "mean" && named != "mean_sqrt_len_tokens" &&
        named != "lasttoken" && named != "weightedmean")
      throw Error(config.string() + ": pooling_mode '" + named +
                  "' is not one of cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken");
    for (const char* key : {"pooling_mode_weightedmean_tokens"})
      if (mode(key))
        throw Error(config.string() + ": " + key + " is not supported (pooling_mode_cls_token, _max_tokens, "
                    "_mean_tokens, _mean_sqrt_len_tokens, _lasttoken)");
    if (!json_opt<bool>(pc, "include_prompt", true, config))
      throw Error(config.string() + ": include_prompt false (pooling without the prompt's tokens) is not supported");
    const int64_t width = json_opt<int64_t>(pc, "word_embedding_dimension", d, config);
    if (width != d)
      throw Error(config.string() + ": word_embedding_dimension is " + std::to_string(width) +
                  ", but the model's hidden size is " + std::to_string(d));
    p.modes.clear();
    const std::pair<const char*, PoolMode> order[] = {{"pooling_mode_cls_token", PoolMode::cls},
                                                      {"pooling_mode_max_tokens", PoolMode::max},
                                                      {"pooling_mode_mean_tokens", PoolMode::mean},
                                                      {"pooling_mode_mean_sqrt_len_tokens", PoolMode::mean_sqrt_len},
                                                      {"pooling_mode_lasttoken", PoolMode::last}};
    for (const auto& [key, m] : order)
      if (mode(key)) p.modes.push_back(m);
    if (p.modes.empty()) throw Error(config.string() + ": no pooling mode is set (pooling_mode_*)");
  }
  return p;
}

std::string Prompts::choose(const std::optional<std::string>& prompt, const std::optional<std::string>& name) const {
  if (prompt && name)
    throw Error("prompt: give a prompt's text or its name, not both (--prompt or --prompt-name; prompt= or prompt_name=)");
  if (prompt) return *prompt;
  if (!name && default_name.empty()) return "";
  const std::string& n = name ? *name : default_name;
  auto it = named.find(n);
  if (it == named.end())
    throw Error("prompt name '" + n + "': the model has " +
                (named.empty() ? std::string("no prompts (config_sentence_transformers.json)") : "only " + describe()));
  return it->second;
}

std::string Prompts::describe() const {
  std::string s;
  for (const auto& [k, v] : named) s += (s.empty() ? "" : ", ") + k;
  if (s.empty()) return "none";
  return s + (default_name.empty() ? "" : " (default " + default_name + ")");
}

Prompts read_prompts(const fs::path& dir) {
  Prompts p;
  std::error_code ec;
  const fs::path path = dir / "config_sentence_transformers.json";
  if (!fs::exists(path, ec)) return p;
  const nlohmann::json j = read_json(path);
  if (!j.is_object()) throw Error(path.string() + ": expected a JSON object");
  if (j.contains("prompts") && !j["prompts"].is_null()) {
    if (!j["prompts"].is_object()) throw Error(path.string() + ": prompts: expected an object of name → text");
    for (const auto& [k, v] : j["prompts"].items()) {
      if (!v.is_string()) throw Error(path.string() + ": prompts." + k + ": expected a string");
      p.named[k] = v.get<std::string>();
    }
  }
  if (j.contains("default_prompt_name") && !j["default_prompt_name"].is_null()) {
    p.default_name = json_get<std::string>(j, "default_prompt_name", path);
    if (!p.named.count(p.default_name))
      throw Error(path.string() + ": default_prompt_name '" + p.default_name + "' is not one of the prompts (" +
                  p.describe() + ")");
  }
  return p;
}

}  // namespace ffn::models
