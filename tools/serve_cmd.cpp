// ffn serve: the OpenAI API over continuous batching (src/serve/, docs/serve.md).
#include "commands.hpp"

#ifdef FFN_SERVE
#include "ffn/serve.hpp"
#endif

namespace ffn::cli {

Command add_serve(CLI::App& app) {
#ifdef FFN_SERVE
  auto o = std::make_shared<serve::ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server: chat and text completions over continuous batching (every answer "
               "bitwise what the request gets alone), embeddings, translations; loopback only unless --host says");
  cmd->add_option("--model", o->model, "the language model: GGUF file or Hugging Face directory");
  cmd->add_option("--embedding-model", o->embedding_model, "a sentence-transformers directory for /v1/embeddings");
  cmd->add_option("--rerank-model", o->rerank_model,
                  "a cross-encoder directory (BertForSequenceClassification, XLMRobertaForSequenceClassification or "
                  "ModernBertForSequenceClassification) for /v1/rerank and /rerank");
  cmd->add_option("--translation-model", o->translation_model, "a MarianMT directory for /v1/translations");
  cmd->add_option("--compute", o->compute, "native (default) or fp32, as ffn generate's");
  cmd->add_option("--host", o->host, "the address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->port, "the port (default 8080)");
  cmd->add_option("--parallel", o->parallel, "sequences generated at once, at most (default 4)");
  cmd->add_option("--queue", o->queue, "requests waiting beyond those, at most; more get 503 (default 64)");
  cmd->add_option("--context", o->context, "positions per sequence, prompt and answer (default: the model's, at most 4096)");
  cmd->add_option("--kv-memory", o->kv_memory_mib, "MiB of keys and values for all sequences (default: --parallel full contexts)");
  cmd->add_option("--chunk", o->chunk, "most prompt tokens read per step, all prompts together, while other sequences decode (default 256; the step takes as many as cost about one decoding step; 1024 while none decodes)");
  cmd->add_option("--prefix-cache", o->prefix_cache, "finished sequences kept for a later prompt's prefix (default 16)");
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (default: none)");
  cmd->add_option("--threads", o->threads, "threads of the products, 0 = all cores (default 0)");
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout,
                  "on SIGTERM or SIGINT: seconds running requests may take to finish before they are cancelled (default 30)");
  cmd->add_option("--body-limit", o->body_limit, "largest request body in bytes; larger get 413 (default 16 MiB)");
  cmd->add_option("--read-timeout", o->read_timeout, "seconds a read of a request's headers or body may wait (default 30)");
  cmd->add_option("--http-threads", o->http_threads, "connections served at once (default max(64, parallel + queue + 8))");
  cmd->add_option("--log-format", o->log_format,
                  "the access log on stderr, one line per request: text (default), json (an object per line) or none");
  cmd->add_flag("--log-prompts", o->log_prompts, "put each generation's prompt text in its access-log line (default: never)");
  return {cmd, [o](const Common& c) {
            o->isa = c.isa;
            if (o->threads < 0 || o->threads > kMaxThreads) (void)threads_or_throw(o->threads);
            if (o->parallel < 1) throw Error("--parallel: expected 1 or more, got " + std::to_string(o->parallel));
            if (o->body_limit < 1024) throw Error("--body-limit: expected at least 1024 bytes");
            if (o->read_timeout < 1) throw Error("--read-timeout: expected 1 or more seconds");
            return serve::run_server(*o);
          }};
#else
  CLI::App* cmd = app.add_subcommand("serve", "the HTTP server (not built: install libcpp-httplib-dev and rebuild)");
  cmd->allow_extras();
  return {cmd, [](const Common&) {
            throw Error("serve: this ffn was built without cpp-httplib (libcpp-httplib-dev); scripts/setup.sh installs it");
            return 2;
          }};
#endif
}

}  // namespace ffn::cli
