// The OpenAI API's request bodies as ffn serve reads them (docs/serve.md):
// each body decoded into a typed request before any model sees it, every
// error an ApiError naming the field, answered as OpenAI answers
// ({"error": {"message", "type", "param", "code"}}). No model is needed
// here, so fuzz/fuzz_serve_request.cpp runs it on any bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"

namespace ffn::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
           std::string code = {})
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string param, type, code;
  // {"error": {"message", "type", "param", "code"}} (param and code null when empty).
  std::string body() const;
};

// The body as one JSON object: 400 for malformed JSON, invalid UTF-8, or a non-object.
nlohmann::json parse_object(const std::string& body);

// The sampling fields every generation endpoint shares.
struct GenerationFields {
  std::optional<std::string> model;
  SamplingOptions sampling;             // max_new_tokens: -1 until known (absent: up to the context)
  bool seed_given = false;              // absent (or -1): a random seed, returned in the response
  std::vector<std::string> stop;
  int64_t top_logprobs = -1;            // -1: no logprobs
  bool stream = false, include_usage = false;
};

struct ChatRequest {
  GenerationFields gen;
  // The messages, checked (a non-empty array; each an object with a known
  // role and a string content, or a list of text parts joined by "\n"),
  // content made a string: ready for the template.
  nlohmann::json messages;
  nlohmann::json template_kwargs;       // chat_template_kwargs (an object) or null
};

struct CompletionRequest {
  GenerationFields gen;
  std::optional<std::string> prompt_text;  // a string
  std::vector<int32_t> prompt_ids;         // or token ids
};

struct EmbeddingRequest {
  std::optional<std::string> model;
  std::vector<std::string> texts;              // strings
  std::vector<std::vector<int32_t>> ids;       // or token ids (one list per input)
  bool base64 = false;
  std::optional<std::string> prompt_name;  // text-embeddings-inference's: the model's prompt of that name
};

struct TranslationRequest {
  std::optional<std::string> model;
  std::vector<std::string> texts;
  std::optional<int64_t> beams, max_tokens;
};

// POST /v1/rerank (llama-server's and Jina's shape: "documents", "top_n";
// answered {"results": [{"index", "relevance_score"}], ...}) or POST /rerank
// (text-embeddings-inference's: "texts", "return_text", "raw_scores": false;
// answered [{"index", "score"}]). Scores are the cross-encoder's
// (sentence-transformers' CrossEncoder.predict), best first.
struct RerankRequest {
  std::optional<std::string> model;
  std::string query;
  std::vector<std::string> documents;
  std::optional<int64_t> top_n;
  bool return_text = false;  // the document beside its score
  bool truncate = true;      // TEI's truncate: false refuses a pair over the model's length
  bool raw_scores = false;   // TEI's: the logits; otherwise /rerank gives their sigmoid, as TEI does
};
RerankRequest parse_rerank(const nlohmann::json& body, bool tei);

ChatRequest parse_chat(const nlohmann::json& body);
CompletionRequest parse_completion(const nlohmann::json& body);
EmbeddingRequest parse_embeddings(const nlohmann::json& body);
TranslationRequest parse_translation(const nlohmann::json& body);
// The message list alone (POST /apply-template; also "messages" above).
nlohmann::json parse_messages(const nlohmann::json& body);

// Little-endian float32 bytes in base64 (OpenAI's encoding_format "base64").
std::string base64_floats(const float* v, size_t n);

}  // namespace ffn::serve
