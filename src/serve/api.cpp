// Request decoding of ffn serve (src/serve/api.hpp).
#include "serve/api.hpp"

#include "ffn/chat_template.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace ffn::serve {

using nlohmann::json;

std::string ApiError::body() const {
  json e = {{"message", what()}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

json parse_object(const std::string& body) {
  // Nesting past 64 levels is refused before parsing: copying and writing a
  // value recurse, and a 16 MiB body of brackets would overflow the stack.
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > 64) throw ApiError(400, "the body nests more than 64 levels of arrays and objects");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // (parse_error, and out_of_range for a number past double's range)
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  return j;
}

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) { throw ApiError(400, field + ": " + what, field); }

// A field's value when present and not null.
const json* field(const json& b, const char* name) {
  const auto it = b.find(name);
  return it == b.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& b, const char* name, double lo, double hi) {
  const json* v = field(b, name);
  if (!v->is_number()) bad(name, "expected a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(name, "expected a number in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v->dump());
  return x;
}

int64_t integer(const json& b, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(b, name);
  if (!v->is_number_integer()) bad(name, "expected an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v->dump());
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v->dump());
  return x;
}

bool boolean(const json& b, const char* name) {
  const json* v = field(b, name);
  if (!v->is_boolean()) bad(name, "expected true or false");
  return v->get<bool>();
}

// Token ids: an array of non-negative integers (the vocabulary is checked by the engine).
std::vector<int32_t> id_list(const json& v, const std::string& name) {
  std::vector<int32_t> ids;
  for (const json& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad(name, "expected token ids (non-negative integers)");
    ids.push_back(int32_t(x.get<int64_t>()));
  }
  return ids;
}

std::optional<std::string> model_of(const json& b) {
  const json* v = field(b, "model");
  if (!v) return std::nullopt;
  if (!v->is_string()) bad("model", "expected a string");
  return v->get<std::string>();
}

GenerationFields generation(const json& b, bool chat) {
  GenerationFields g;
  g.model = model_of(b);
  SamplingOptions& s = g.sampling;
  s.max_new_tokens = -1;
  if (field(b, "max_tokens")) s.max_new_tokens = integer(b, "max_tokens", 0, int64_t(1) << 40);
  if (chat && field(b, "max_completion_tokens"))
    s.max_new_tokens = integer(b, "max_completion_tokens", 0, int64_t(1) << 40);
  if (field(b, "temperature")) s.temperature = float(number(b, "temperature", 0, 2));
  if (field(b, "top_p")) {
    s.top_p = float(number(b, "top_p", 0, 1));
    if (s.top_p == 0) bad("top_p", "expected a number in (0, 1], got 0");
  }
  if (field(b, "top_k")) s.top_k = integer(b, "top_k", 0, int64_t(1) << 31);  // (llama-server's -1 is not 0 here: refused)
  if (field(b, "min_p")) s.min_p = float(number(b, "min_p", 0, 1));
  if (field(b, "presence_penalty")) s.presence_penalty = float(number(b, "presence_penalty", -2, 2));
  if (field(b, "frequency_penalty")) s.frequency_penalty = float(number(b, "frequency_penalty", -2, 2));
  for (const char* name : {"repetition_penalty", "repeat_penalty"})
    if (field(b, name)) s.repeat_penalty = float(number(b, name, 1e-3, 1e3));
  if (const json* v = field(b, "seed")) {
    if (!v->is_number_integer()) bad("seed", "expected an integer");
    if (v->is_number_unsigned()) {
      s.seed = v->get<uint64_t>();
      g.seed_given = true;
    } else {
      const int64_t x = v->get<int64_t>();
      if (x < -1) bad("seed", "expected an integer >= -1 (-1: random), got " + v->dump());
      if (x >= 0) {
        s.seed = uint64_t(x);
        g.seed_given = true;
      }
    }
  }
  if (const json* v = field(b, "n"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    bad("n", "only n = 1 is served (one choice per request), got " + v->dump());
  if (const json* v = field(b, "stop")) {
    if (v->is_string()) g.stop.push_back(v->get<std::string>());
    else if (v->is_array() && v->size() <= 16) {
      for (const json& x : *v) {
        if (!x.is_string()) bad("stop", "expected a string or a list of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "expected a string or a list of at most 16 strings");
    }
    for (const auto& x : g.stop)
      if (x.empty()) bad("stop", "a stop string must not be empty");
  }
  if (chat) {
    const bool want = field(b, "logprobs") && boolean(b, "logprobs");
    if (field(b, "top_logprobs")) {
      if (!want) bad("top_logprobs", "needs \"logprobs\": true");
      g.top_logprobs = integer(b, "top_logprobs", 0, 20);
    } else if (want) {
      g.top_logprobs = 0;
    }
  } else if (field(b, "logprobs")) {  // the legacy completions field: the number of most likely tokens
    g.top_logprobs = integer(b, "logprobs", 0, 20);
  }
  if (field(b, "ignore_eos")) s.stop_at_eos = !boolean(b, "ignore_eos");  // llama-server's and vLLM's extension
  if (field(b, "stream")) g.stream = boolean(b, "stream");
  if (const json* v = field(b, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "expected an object");
    if (!g.stream) bad("stream_options", "only with \"stream\": true");
    if (field(*v, "include_usage")) {
      if (!(*v)["include_usage"].is_boolean()) bad("stream_options.include_usage", "expected true or false");
      g.include_usage = (*v)["include_usage"].get<bool>();
    }
  }
  for (const char* name : {"tools", "functions", "response_format", "logit_bias", "grammar", "json_schema"})
    if (const json* v = field(b, name); v && !(v->is_array() && v->empty()) && !(v->is_object() && v->empty()) &&
                                          !(std::strcmp(name, "response_format") == 0 && v->is_object() &&
                                            v->contains("type") && (*v)["type"] == "text"))
      bad(name, "not supported by ffn serve");
  return g;
}

}  // namespace

json parse_messages(const json& b) {
  const json* m = field(b, "messages");
  if (!m) bad("messages", "required: a list of {\"role\", \"content\"} objects");
  try {
    return json::parse(check_chat_messages(m->dump(), /*join_text_parts=*/true));  // (dump() of a request body's JSON is valid UTF-8)
  } catch (const Error& e) {
    const std::string what = e.what();
    const size_t colon = what.find(": ");
    throw ApiError(400, what, colon == std::string::npos ? "messages" : what.substr(0, colon));
  }
}

ChatRequest parse_chat(const json& b) {
  ChatRequest r;
  r.gen = generation(b, true);
  r.messages = parse_messages(b);
  if (const json* v = field(b, "chat_template_kwargs")) {
    if (!v->is_object()) bad("chat_template_kwargs", "expected an object");
    r.template_kwargs = *v;
  }
  return r;
}

CompletionRequest parse_completion(const json& b) {
  CompletionRequest r;
  r.gen = generation(b, false);
  const json* p = field(b, "prompt");
  if (!p) bad("prompt", "required: a string or a list of token ids");
  json one = *p;
  // A list of one prompt is that prompt; more are refused (one choice per request).
  if (one.is_array() && one.size() == 1 && (one[0].is_string() || one[0].is_array())) one = json(one[0]);
  if (one.is_string()) {
    r.prompt_text = one.get<std::string>();
  } else if (one.is_array() && !one.empty() && one[0].is_number()) {
    r.prompt_ids = id_list(one, "prompt");
  } else {
    bad("prompt", "expected a string, a list of token ids, or a list of one of them");
  }
  if (const json* v = field(b, "echo"); v && !(v->is_boolean() && !v->get<bool>())) bad("echo", "not supported by ffn serve");
  if (const json* v = field(b, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    bad("suffix", "not supported by ffn serve");
  if (const json* v = field(b, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    bad("best_of", "only best_of = 1 is served");
  return r;
}

EmbeddingRequest parse_embeddings(const json& b) {
  EmbeddingRequest r;
  r.model = model_of(b);
  const json* in = field(b, "input");
  if (!in) bad("input", "required: a string, a list of strings, or token ids");
  if (in->is_string()) {
    r.texts.push_back(in->get<std::string>());
  } else if (in->is_array() && !in->empty() && (*in)[0].is_string()) {
    for (const json& x : *in) {
      if (!x.is_string()) bad("input", "expected a list of strings");
      r.texts.push_back(x.get<std::string>());
    }
  } else if (in->is_array() && !in->empty() && (*in)[0].is_number()) {
    r.ids.push_back(id_list(*in, "input"));
  } else if (in->is_array() && !in->empty() && (*in)[0].is_array()) {
    for (const json& x : *in) {
      if (!x.is_array() || x.empty()) bad("input", "expected lists of token ids");
      r.ids.push_back(id_list(x, "input"));
    }
  } else {
    bad("input", "expected a string, a non-empty list of strings, or token ids");
  }
  if (r.texts.size() + r.ids.size() > 2048) bad("input", "at most 2048 inputs per request");
  if (const json* v = field(b, "prompt_name")) {
    if (!v->is_string()) bad("prompt_name", "expected the name of one of the model's prompts");
    r.prompt_name = v->get<std::string>();
  }
  if (const json* v = field(b, "encoding_format")) {
    if (!v->is_string() || (*v != "float" && *v != "base64")) bad("encoding_format", "expected \"float\" or \"base64\"");
    r.base64 = *v == "base64";
  }
  return r;
}

RerankRequest parse_rerank(const json& b, bool tei) {
  RerankRequest r;
  r.model = model_of(b);
  const json* q = field(b, "query");
  if (!q || !q->is_string()) bad("query", "required: a string");
  r.query = q->get<std::string>();
  const char* list = tei ? "texts" : "documents";
  const json* docs = field(b, list);
  if (!docs || !docs->is_array() || docs->empty()) bad(list, "required: a non-empty list of strings");
  if (docs->size() > 1024) bad(list, "at most 1024 documents per request");
  for (const json& x : *docs) {
    if (x.is_string()) r.documents.push_back(x.get<std::string>());
    else if (!tei && x.is_object() && x.contains("text") && x["text"].is_string())  // Jina/Cohere's {"text": ...}
      r.documents.push_back(x["text"].get<std::string>());
    else bad(list, "expected strings");
  }
  if (const json* v = field(b, "top_n")) {
    if (tei) bad("top_n", "not a field of /rerank (text-embeddings-inference's); use /v1/rerank");
    if (!v->is_number_integer() || v->get<int64_t>() < 1) bad("top_n", "expected a positive integer");
    r.top_n = v->get<int64_t>();
  }
  if (const json* v = field(b, tei ? "return_text" : "return_documents")) {
    if (!v->is_boolean()) bad(tei ? "return_text" : "return_documents", "expected true or false");
    r.return_text = v->get<bool>();
  }
  if (const json* v = field(b, "truncate")) {
    if (!v->is_boolean()) bad("truncate", "expected true or false");
    r.truncate = v->get<bool>();
  }
  if (const json* v = field(b, "raw_scores")) {
    if (!tei) bad("raw_scores", "a field of /rerank (text-embeddings-inference's), not of /v1/rerank");
    if (!v->is_boolean()) bad("raw_scores", "expected true or false");
    r.raw_scores = v->get<bool>();
  }
  return r;
}

TranslationRequest parse_translation(const json& b) {
  TranslationRequest r;
  r.model = model_of(b);
  const json* in = field(b, "input");
  if (!in) bad("input", "required: a string or a list of strings");
  if (in->is_string()) r.texts.push_back(in->get<std::string>());
  else if (in->is_array() && !in->empty() && in->size() <= 256) {
    for (const json& x : *in) {
      if (!x.is_string()) bad("input", "expected a list of strings");
      r.texts.push_back(x.get<std::string>());
    }
  } else {
    bad("input", "expected a string or a list of 1 to 256 strings");
  }
  if (field(b, "beams")) r.beams = integer(b, "beams", 1, 64);
  if (field(b, "max_tokens")) r.max_tokens = integer(b, "max_tokens", 1, 4096);
  return r;
}

std::string base64_floats(const float* v, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, v + i, 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + size_t(b)] = char((u >> (8 * b)) & 0xFF);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t a = uint8_t(bytes[i]), b = i + 1 < bytes.size() ? uint8_t(bytes[i + 1]) : 0,
                   c = i + 2 < bytes.size() ? uint8_t(bytes[i + 2]) : 0;
    const uint32_t t = (a << 16) | (b << 8) | c;
    out += k[(t >> 18) & 63];
    out += k[(t >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(t >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? k[t & 63] : '=';
  }
  return out;
}

}  // namespace ffn::serve
