// ffn serve's HTTP side (docs/serve.md): the OpenAI API and llama-server's
// extras on cpp-httplib (Debian's libcpp-httplib-dev 0.11.4, the library
// llama-server uses), over the engine (src/serve/engine.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "ffn/types.hpp"

namespace ffn::serve {

struct ServeOptions {
  std::string model, embedding_model, translation_model;  // paths ("" none; at least one)
  std::string rerank_model;  // a cross-encoder for /v1/rerank and /rerank ("" none)
  std::string compute = "native";
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t parallel = 4, queue = 64, context = 0, chunk = 256, prefix_cache = 16;
  double kv_memory_mib = 0;  // 0: room for `parallel` full contexts
  std::string api_key;
  int threads = 0;
  Isa isa = Isa::automatic;       // the products' kernels (--isa)
  double shutdown_timeout = 30;  // seconds
  int64_t body_limit = 16 << 20;  // bytes
  int read_timeout = 30;          // seconds per read of a request's headers or body
  int http_threads = 0;           // 0: max(64, parallel + queue + 8)
  bool quiet = false;
  // The access log on stderr, a line per request (src/serve/metrics.hpp):
  // "text", "json" (one object per line) or "none"; a generation's prompt
  // text is in it only with log_prompts.
  std::string log_format = "text";
  bool log_prompts = false;
};

// Binds, loads the models (GET /health answers 503 meanwhile), serves until
// SIGTERM or SIGINT, then stops taking connections, lets running requests
// finish for shutdown_timeout seconds, cancels the rest and returns 0.
// Error for bad options or models (before or while loading).
int run_server(const ServeOptions& o);

}  // namespace ffn::serve
