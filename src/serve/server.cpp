// ffn serve: the HTTP side (src/serve/server.hpp, docs/serve.md).
//
// cpp-httplib runs each connection on a thread of its pool (sized to hold
// at least 64 open connections: max(64, parallel + queue + 8) threads), so
// a handler may block: it submits its request to the engine and waits on
// the job, writing server-sent events as tokens come. A streaming client
// that goes away makes a write fail; a non-streaming one is noticed by
// peeking at its socket (recv MSG_PEEK reads 0 at the peer's FIN), which
// cpp-httplib 0.11 does not offer itself. Either cancels the job, which
// frees its pages at the engine's next step.
#include "ffn/serve.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "ffn/causal_lm.hpp"
#include "ffn/chat.hpp"
#include "ffn/cross_encoder.hpp"
#include "ffn/sentence.hpp"
#include "ffn/translation.hpp"
#include "serve/api.hpp"
#include "serve/embed_batcher.hpp"
#include "serve/engine.hpp"
#include "serve/metrics.hpp"

namespace ffn::serve {

using nlohmann::json;
namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string name_of(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// Constant-time comparison of the Authorization header with "Bearer <key>".
bool key_matches(const std::string& header, const std::string& key) {
  const std::string want = "Bearer " + key;
  unsigned diff = unsigned(header.size() ^ want.size());
  for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(uint8_t(want[i]) ^ uint8_t(i < header.size() ? header[i] : 0));
  return diff == 0;
}

// The socket of the connection a request came on: the one whose peer and
// local ports and peer address are the request's (httplib gives a handler
// no socket). -1 if not found.
int find_socket(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    char host[INET6_ADDRSTRLEN] = {0};
    int pport = -1, lport = -1;
    if (peer.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      pport = ntohs(a->sin_port);
      lport = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      pport = ntohs(a->sin6_port);
      lport = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    } else {
      continue;
    }
    if (pport == req.remote_port && lport == req.local_port && req.remote_addr == host) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

// Whether the peer has closed its side (FIN read as 0, or a reset).
bool peer_gone(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

// Error messages from the library begin with the field or flag they name ("max_tokens: ...").
ApiError as_api_error(const std::exception& e, const std::string& fallback_param) {
  const std::string m = e.what();
  std::string param = fallback_param;
  for (const char* p : {"max_tokens", "top_logprobs", "prompt", "--temperature", "--top-k", "--top-p", "--min-p",
                        "--repeat-penalty", "--presence-penalty", "--frequency-penalty", "input"})
    if (m.rfind(std::string(p) + ":", 0) == 0 || m.rfind(std::string(p) + " ", 0) == 0) {
      param = p[0] == '-' ? std::string(p + 2) : std::string(p);
      for (char& c : param)
        if (c == '-') c = '_';
    }
  return ApiError(400, m, param);
}

struct App {
  ServeOptions o;
  std::atomic<bool> ready{false}, draining{false};
  std::atomic<int64_t> active{0}, serial{0};
  std::string lm_name, embed_name, translate_name, rerank_name;
  std::optional<CausalLM> lm;
  std::unique_ptr<Engine> engine;
  std::optional<SentenceEncoder> encoder;
  std::unique_ptr<EmbedBatcher> batcher;
  std::optional<TranslationModel> translator;
  std::optional<MarianTokenizer> marian;
  std::mutex translate_m;
  std::optional<CrossEncoder> reranker;
  std::mutex rerank_m;
  int64_t created = int64_t(std::time(nullptr));
  Metrics metrics;

  std::string next_id(const char* prefix) { return std::string(prefix) + std::to_string(++serial); }

  void check_model(const std::optional<std::string>& asked, const std::string& served, const char* kind) const {
    if (served.empty()) throw ApiError(400, std::string("no ") + kind + " model is served (ffn serve --" +
                                               (std::strcmp(kind, "language") == 0 ? std::string("model") : std::string(kind) + "-model") + ")",
                                       "model", "invalid_request_error", "model_not_found");
    if (asked && *asked != served)
      throw ApiError(400, "model: \"" + *asked + "\" is not served; the " + kind + " model is \"" + served + "\"", "model",
                     "invalid_request_error", "model_not_found");
  }
};

// Counts a request in flight for the shutdown's wait.
struct Active {
  App& a;
  explicit Active(App& a) : a(a) { ++a.active; }
  ~Active() { --a.active; }
};

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// A generation request made ready for the engine.
struct Prepared {
  Request req;
  bool stream = false, include_usage = false, chat = true;
};

Prepared prepare_generation(App& a, const GenerationFields& g, std::vector<int32_t> prompt, bool chat) {
  Prepared p;
  p.chat = chat;
  p.stream = g.stream;
  p.include_usage = g.include_usage;
  p.req.prompt = std::move(prompt);
  p.req.sampling = g.sampling;
  if (!g.seed_given) p.req.sampling.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  if (p.req.prompt.empty()) throw ApiError(400, chat ? "messages: the rendered prompt has no tokens" : "prompt: the prompt has no tokens",
                                           chat ? "messages" : "prompt");
  // Room for the answer: the context, and the KV pool (a request must fit alone).
  const EngineStats es = a.engine->stats();
  const int64_t room = std::min(a.engine->context(), es.pages_total * es.page_positions) - int64_t(p.req.prompt.size());
  if (room < 1)
    throw ApiError(400, std::string(chat ? "messages" : "prompt") + ": " + std::to_string(p.req.prompt.size()) +
                            " prompt tokens leave no room in the context of " + std::to_string(a.engine->context()) + " positions",
                   chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded");
  if (p.req.sampling.max_new_tokens < 0) p.req.sampling.max_new_tokens = room;
  p.req.stop = g.stop;
  p.req.top_logprobs = g.top_logprobs;
  p.req.text = a.lm->tokenizer() != nullptr;
  return p;
}

// Runs a prepared generation and answers it (JSON, or server-sent events).
void answer_generation(App& a, const httplib::Request& http, httplib::Response& res, Prepared p) {
  std::shared_ptr<Job> job;
  this_request().prompt_tokens = int64_t(p.req.prompt.size());
  this_request().generated_tokens = 0;
  try {
    job = a.engine->submit(std::move(p.req));
  } catch (const QueueFull& e) {
    res.set_header("Retry-After", "1");
    send_error(res, ApiError(503, e.what(), "", "server_error", "queue_full"));
    return;
  } catch (const Error& e) {
    ApiError ae = as_api_error(e, "");
    if (std::string(e.what()).find("past the context") != std::string::npos) ae.code = "context_length_exceeded";
    send_error(res, ae);
    return;
  }
  const Tokenizer* tok = a.lm->tokenizer();
  const std::string id = a.next_id(p.chat ? "chatcmpl-" : "cmpl-");
  const std::string model = a.lm_name;
  const bool chat = p.chat;
  // A token's text; "" for an id past the tokenizer's (a model's embedding may have rows no token has), as
  // tokenizers' decode skips ids it does not know.
  auto token_text = [tok](int32_t t) {
    return !tok ? std::to_string(t) : t >= 0 && t < tok->vocab_size() ? tok->decode({t}) : std::string();
  };
  auto chat_logprob = [token_text](const TokenOut& t) {
    json c = {{"token", token_text(t.id)}, {"logprob", t.logprob}, {"bytes", bytes_of(token_text(t.id))}};
    json tops = json::array();
    for (const auto& x : t.top) tops.push_back({{"token", token_text(x.id)}, {"logprob", x.logprob}, {"bytes", bytes_of(token_text(x.id))}});
    c["top_logprobs"] = tops;
    return c;
  };
  const int64_t created = int64_t(std::time(nullptr));
  const bool with_logprobs = job->wants_logprobs();
  if (!p.stream) {
    const int fd = find_socket(http);
    std::vector<TokenOut> toks;
    while (!job->wait(toks, std::chrono::milliseconds(100)))
      if (peer_gone(fd)) {
        job->cancel();
        while (!job->wait(toks, std::chrono::milliseconds(100))) {
        }
        return;
      }
    const Finish f = job->finish();
    this_request().generated_tokens = job->usage().completion_tokens;
    a.metrics.generation(job->timing(), finish_name(f));
    if (f == Finish::error) {
      send_error(res, ApiError(500, job->error(), "", "server_error"));
      return;
    }
    if (f == Finish::cancelled) {
      send_error(res, ApiError(503, "the server is shutting down; the request was cancelled", "", "server_error"));
      return;
    }
    std::string text;
    for (const auto& t : toks) text += t.text;
    json choice = {{"index", 0}, {"finish_reason", finish_name(f)}};
    json lp = nullptr;
    if (with_logprobs) {
      if (chat) {
        lp = {{"content", json::array()}};
        for (const auto& t : toks)
          if (t.id >= 0) lp["content"].push_back(chat_logprob(t));
      } else {
        lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
        size_t offset = 0;
        for (const auto& t : toks) {
          if (t.id < 0) continue;
          lp["tokens"].push_back(token_text(t.id));
          lp["token_logprobs"].push_back(t.logprob);
          json m = json::object();
          for (const auto& x : t.top) m[token_text(x.id)] = x.logprob;
          lp["top_logprobs"].push_back(m);
          lp["text_offset"].push_back(offset);
          offset += t.text.size();
        }
      }
    }
    choice["logprobs"] = lp;
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
    else choice["text"] = text;
    json body = {{"id", id},
                 {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", created},
                 {"model", model},
                 {"system_fingerprint", "ffn-seed-" + std::to_string(job->seed())},
                 {"choices", json::array({choice})},
                 {"usage", usage_json(job->usage())}};
    res.set_content(dump(body), "application/json");
    return;
  }
  // Server-sent events: a role chunk (chat), a chunk per token (or per piece of text), the finish, usage, [DONE].
  const bool include_usage = p.include_usage;
  Metrics* metrics = &a.metrics;
  res.set_header("Cache-Control", "no-cache");
  auto provide = [=](size_t, httplib::DataSink& sink) {
    auto send = [&](const json& j) {
      const std::string s = "data: " + dump(j) + "\n\n";
      return sink.write(s.data(), s.size());
    };
    auto chunk = [&](json delta_or_text, json finish, json lp) {
      json c = {{"index", 0}, {"finish_reason", finish}, {"logprobs", lp}};
      if (chat) c["delta"] = delta_or_text;
      else c["text"] = delta_or_text;
      return json{{"id", id},
                  {"object", chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"system_fingerprint", "ffn-seed-" + std::to_string(job->seed())},
                  {"choices", json::array({c})}};
    };
    bool ok = !chat || send(chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
    std::vector<TokenOut> toks;
    bool ended = false;
    while (ok && !ended) {
      toks.clear();
      ended = job->wait(toks, std::chrono::milliseconds(200));
      for (const auto& t : toks) {
        if (t.text.empty() && !(with_logprobs && t.id >= 0)) continue;
        json lp = nullptr;
        if (with_logprobs && t.id >= 0) {
          if (chat) lp = {{"content", json::array({chat_logprob(t)})}};
          else {
            json m = json::object();
            for (const auto& x : t.top) m[token_text(x.id)] = x.logprob;
            lp = {{"tokens", {token_text(t.id)}}, {"token_logprobs", {t.logprob}}, {"top_logprobs", {m}}};
          }
        }
        if (!(ok = send(chunk(chat ? json{{"content", t.text}} : json(t.text), nullptr, lp)))) break;
      }
    }
    if (!ok) {  // the client went away: the job ends, its pages are freed
      job->cancel();
      return false;
    }
    const Finish f = job->finish();
    this_request().generated_tokens = job->usage().completion_tokens;  // (this thread writes the stream and logs it)
    metrics->generation(job->timing(), finish_name(f));
    if (f == Finish::error || f == Finish::cancelled) {
      const ApiError e(f == Finish::error ? 500 : 503, f == Finish::error ? job->error() : "the request was cancelled", "", "server_error");
      const std::string s = "data: " + e.body() + "\n\n";
      sink.write(s.data(), s.size());
    } else {
      ok = send(chunk(chat ? json::object() : json(""), finish_name(f), nullptr));
      if (ok && include_usage) {
        json u = chunk(json::object(), nullptr, nullptr);
        u["choices"] = json::array();
        u["usage"] = usage_json(job->usage());
        ok = send(u);
      }
    }
    const std::string done = "data: [DONE]\n\n";
    if (ok) sink.write(done.data(), done.size());
    sink.done();
    return true;
  };
  // The stream's writer must not throw (nothing above it would catch it): an error ends the stream with an error event.
  res.set_chunked_content_provider("text/event-stream", [=](size_t offset, httplib::DataSink& sink) {
    try {
      return provide(offset, sink);
    } catch (const std::exception& e) {
      job->cancel();
      const std::string s = "data: " + ApiError(500, std::string("internal error: ") + e.what(), "", "server_error").body() + "\n\n";
      sink.write(s.data(), s.size());
      sink.done();
      return true;
    }
  });
}


// Wraps a handler: the API key, readiness, the drain, the body's JSON, and
// errors as OpenAI's error objects (never a crash: any exception is a 500).
using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
Handler guarded(App& a, Handler h, bool needs_ready = true, bool needs_key = true) {
  return [&a, h, needs_ready, needs_key](const httplib::Request& req, httplib::Response& res) {
    const Active count(a);
    try {
      if (needs_key && !a.o.api_key.empty() && !key_matches(req.get_header_value("Authorization"), a.o.api_key))
        throw ApiError(401, "a missing or wrong API key (Authorization: Bearer KEY)", "", "authentication_error", "invalid_api_key");
      if (a.draining) {
        res.set_header("Retry-After", "5");
        throw ApiError(503, "the server is shutting down", "", "server_error");
      }
      if (needs_ready && !a.ready) {
        res.set_header("Retry-After", "1");
        throw ApiError(503, "the model is loading", "", "server_error");
      }
      h(req, res);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, as_api_error(e, ""));
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
    }
  };
}

// The checked messages in the model's template (the template's refusals are 400s naming messages).
std::string render_prompt(App& a, const ChatRequest& r) {
  ChatRenderOptions ro;
  if (!r.template_kwargs.is_null()) ro.variables_json = dump(r.template_kwargs);
  try {
    return a.lm->chat_prompt_json(dump(r.messages), ro);
  } catch (const Error& e) {
    throw ApiError(400, std::string("messages: ") + e.what(), "messages");
  }
}

std::vector<int32_t> render_chat(App& a, const ChatRequest& r) {
  if (!a.lm->tokenizer()) throw ApiError(400, "the model has no tokenizer: use /v1/completions with token ids", "messages");
  this_request().prompt = render_prompt(a, r);
  return a.lm->tokenizer()->encode(this_request().prompt);
}

void routes(httplib::Server& svr, App& a) {
  svr.Get("/health", guarded(a, [&a](const httplib::Request&, httplib::Response& res) {
    if (!a.ready) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content(R"({"status": "loading model"})", "application/json");
      return;
    }
    res.set_content(R"({"status": "ok"})", "application/json");
  }, false, false));  // (a load balancer's probe needs no key)
  // Prometheus text: the engine's gauges and counters, named as vLLM names the same quantities (issue 67 adds the rest).
  svr.Get("/metrics", guarded(a, [&a](const httplib::Request&, httplib::Response& res) {
    std::string out;
    auto metric = [&out](const char* name, const char* type, const char* help, double v) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
             std::to_string(v) + "\n";
    };
    const EngineStats s = a.ready && a.engine ? a.engine->stats() : EngineStats{};  // (a.engine is set while loading)
    metric("ffn:num_requests_running", "gauge", "Sequences generating now.", double(s.running));
    metric("ffn:num_requests_waiting", "gauge", "Requests waiting in the queue.", double(s.waiting));
    metric("ffn:kv_pages_used", "gauge", "KV cache pages held (running and cached-prefix sequences).", double(s.pages_used));
    metric("ffn:kv_pages_total", "gauge", "KV cache pages in the pool (--kv-memory).", double(s.pages_total));
    metric("ffn:kv_pages_free", "gauge", "KV cache pages free.", double(s.pages_total - s.pages_used));
    metric("ffn:kv_pages_cached", "gauge", "Of the pages used, those of cached prefixes (freed first when pages are needed).",
           double(s.pages_cached));
    metric("ffn:prefix_cache_sequences", "gauge", "Finished sequences kept for their prefixes.", double(s.parked));
    metric("ffn:num_preemptions_total", "counter", "Sequences preempted for KV pages.", double(s.preemptions));
    metric("ffn:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", double(s.prompt_tokens));
    metric("ffn:prompt_tokens_cached_total", "counter", "Prompt tokens reused from cached prefixes.", double(s.cached_tokens));
    metric("ffn:generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
    metric("ffn:steps_total", "counter", "Engine steps run.", double(s.steps));
    out += a.metrics.render();
    res.set_content(out, "text/plain; version=0.0.4");
  }, false));
  svr.Get("/v1/models", guarded(a, [&a](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const std::string* n : {&a.lm_name, &a.embed_name, &a.translate_name, &a.rerank_name})
      if (!n->empty()) data.push_back({{"id", *n}, {"object", "model"}, {"created", a.created}, {"owned_by", "ffn"}});
    res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
  }));
  svr.Post("/v1/chat/completions", guarded(a, [&a](const httplib::Request& req, httplib::Response& res) {
    const ChatRequest r = parse_chat(parse_object(req.body));
    a.check_model(r.gen.model, a.lm_name, "language");
    answer_generation(a, req, res, prepare_generation(a, r.gen, render_chat(a, r), true));
  }));
  svr.Post("/v1/completions", guarded(a, [&a](const httplib::Request& req, httplib::Response& res) {
    const CompletionRequest r = parse_completion(parse_object(req.body));
    a.check_model(r.gen.model, a.lm_name, "language");
    std::vector<int32_t> ids = r.prompt_ids;
    if (r.prompt_text) {
      if (!a.lm->tokenizer()) throw ApiError(400, "prompt: the model has no tokenizer: give token ids", "prompt");
      ids = a.lm->encode_prompt(*r.prompt_text);
      this_request().prompt = *r.prompt_text;
    }
    answer_generation(a, req, res, prepare_generation(a, r.gen, std::move(ids), false));
  }));
  svr.Post("/v1/embeddings", guarded(a, [&a](const httplib::Request& req, httplib::Response& res) {
    EmbeddingRequest r = parse_embeddings(parse_object(req.body));
    a.check_model(r.model, a.embed_name, "embedding");
    // The prompt (prompt_name, else the model's default) before each text, as ffn embed puts it.
    EmbedOptions po;
    po.prompt_name = r.prompt_name;
    std::string prompt;
    try {
      prompt = a.encoder->prompt_text(po);
    } catch (const Error& err) {
      throw ApiError(400, err.what(), "prompt_name");
    }
    for (std::string& t : r.texts) t = prompt + t;
    int64_t tokens = 0;
    for (const auto& t : r.texts) tokens += int64_t(a.encoder->tokenize(t).size());
    for (const auto& i : r.ids) tokens += int64_t(i.size());
    this_request().prompt_tokens = tokens;
    Array e;
    try {
      e = a.batcher->submit(r.texts, r.ids).get();
    } catch (const Error& err) {
      throw ApiError(400, std::string("input: ") + err.what(), "input");
    }
    const int64_t d = e.shape.size() == 2 ? e.shape[1] : 0;
    json data = json::array();
    for (int64_t i = 0; i < (d ? e.shape[0] : 0); ++i) {
      const float* v = e.data.data() + i * d;
      json item = {{"object", "embedding"}, {"index", i}};
      if (r.base64) item["embedding"] = base64_floats(v, size_t(d));
      else item["embedding"] = std::vector<float>(v, v + d);
      data.push_back(std::move(item));
    }
    res.set_content(dump({{"object", "list"}, {"data", data}, {"model", a.embed_name},
                          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}),
                    "application/json");
  }));
  // Rerank: llama-server's shape at /v1/rerank, text-embeddings-inference's at /rerank.
  for (const bool tei : {false, true})
    svr.Post(tei ? "/rerank" : "/v1/rerank", guarded(a, [&a, tei](const httplib::Request& req, httplib::Response& res) {
      const RerankRequest r = parse_rerank(parse_object(req.body), tei);
      a.check_model(r.model, a.rerank_name, "rerank");
      RerankOptions o;
      o.threads = a.o.threads;
      o.isa = a.o.isa;
      o.truncate = r.truncate;
      o.raw_scores = tei;  // /rerank: the logit, or its sigmoid (TEI's default); /v1/rerank: the model's own scores
      std::vector<std::pair<int64_t, float>> ranked;
      int64_t tokens = 0;
      try {
        for (const std::string& d : r.documents) tokens += int64_t(a.reranker->tokenize(r.query, d).size());
        this_request().prompt_tokens = tokens;
        const std::lock_guard<std::mutex> l(a.rerank_m);
        ranked = a.reranker->rank(r.query, r.documents, o);
      } catch (const Error& err) {
        throw ApiError(400, err.what(), tei ? "texts" : "documents");
      }
      if (tei && !r.raw_scores)  // a monotone map: the order stands
        for (auto& [i, score] : ranked) score = 1.0f / (1.0f + std::exp(-score));
      json results = json::array();
      for (size_t k = 0; k < ranked.size() && (!r.top_n || int64_t(k) < *r.top_n); ++k) {
        const std::string& text = r.documents[size_t(ranked[k].first)];
        json item = {{"index", ranked[k].first}, {tei ? "score" : "relevance_score", ranked[k].second}};
        if (r.return_text) item[tei ? "text" : "document"] = tei ? json(text) : json{{"text", text}};
        results.push_back(std::move(item));
      }
      if (tei) res.set_content(dump(results), "application/json");
      else
        res.set_content(dump({{"model", a.rerank_name}, {"object", "list"}, {"results", results},
                              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}),
                        "application/json");
    }));
  svr.Post("/v1/translations", guarded(a, [&a](const httplib::Request& req, httplib::Response& res) {
    const TranslationRequest r = parse_translation(parse_object(req.body));
    a.check_model(r.model, a.translate_name, "translation");
    const TranslationConfig& cfg = a.translator->config();
    std::vector<std::vector<int64_t>> sources;
    for (size_t i = 0; i < r.texts.size(); ++i) {
      std::vector<int64_t> ids = a.marian->encode(r.texts[i]);
      if (int64_t(ids.size()) > cfg.max_positions)
        throw ApiError(400, "input[" + std::to_string(i) + "]: " + std::to_string(ids.size()) + " tokens, more than the model's " +
                                std::to_string(cfg.max_positions) + " positions", "input");
      sources.push_back(std::move(ids));
    }
    GenerateOptions go;
    go.beams = r.beams.value_or(cfg.num_beams);
    go.max_new_tokens = std::min(r.max_tokens.value_or(cfg.max_length - 1), cfg.max_positions);
    go.threads = a.o.threads;
    go.isa = a.o.isa;
    std::vector<std::vector<int64_t>> out;
    {
      const std::lock_guard<std::mutex> l(a.translate_m);
      out = a.translator->generate(sources, go);
    }
    json items = json::array();
    for (size_t i = 0; i < out.size(); ++i) items.push_back({{"index", i}, {"text", a.marian->decode(out[i])}});
    res.set_content(dump({{"object", "list"}, {"data", items}, {"model", a.translate_name}}), "application/json");
  }));
  svr.Post("/tokenize", guarded(a, [&a](const httplib::Request& req, httplib::Response& res) {
    if (!a.lm) throw ApiError(400, "no language model is served (ffn serve --model)", "model");
    const json b = parse_object(req.body);
    if (!b.contains("content") || !b["content"].is_string()) throw ApiError(400, "content: expected a string", "content");
    const bool special = b.contains("add_special") && b["add_special"].is_boolean() && b["add_special"].get<bool>();
    const bool pieces = b.contains("with_pieces") && b["with_pieces"].is_boolean() && b["with_pieces"].get<bool>();
    const Tokenizer* tok = a.lm->tokenizer();
    if (!tok) throw ApiError(400, "the model has no tokenizer", "content");
    const std::string text = b["content"].get<std::string>();
    const std::vector<int32_t> ids = special ? a.lm->encode_prompt(text) : tok->encode(text);
    json out = json::array();
    for (int32_t id : ids)
      if (pieces) out.push_back({{"id", id}, {"piece", tok->decode({id})}});
      else out.push_back(id);
    res.set_content(dump({{"tokens", out}}), "application/json");
  }));
  svr.Post("/detokenize", guarded(a, [&a](const httplib::Request& req, httplib::Response& res) {
    if (!a.lm) throw ApiError(400, "no language model is served (ffn serve --model)", "model");
    const json b = parse_object(req.body);
    if (!b.contains("tokens") || !b["tokens"].is_array()) throw ApiError(400, "tokens: expected a list of token ids", "tokens");
    const Tokenizer* tok = a.lm->tokenizer();
    if (!tok) throw ApiError(400, "the model has no tokenizer", "tokens");
    std::vector<int32_t> ids;
    for (const json& x : b["tokens"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok->vocab_size())
        throw ApiError(400, "tokens: expected ids in 0.." + std::to_string(tok->vocab_size() - 1), "tokens");
      ids.push_back(int32_t(x.get<int64_t>()));
    }
    res.set_content(dump({{"content", tok->decode(ids)}}), "application/json");
  }));
  svr.Post("/apply-template", guarded(a, [&a](const httplib::Request& req, httplib::Response& res) {
    if (!a.lm) throw ApiError(400, "no language model is served (ffn serve --model)", "model");
    ChatRequest r;
    const json b = parse_object(req.body);
    r.messages = parse_messages(b);
    if (b.contains("chat_template_kwargs") && b["chat_template_kwargs"].is_object()) r.template_kwargs = b["chat_template_kwargs"];
    res.set_content(dump({{"prompt", render_prompt(a, r)}}), "application/json");
  }));
}

// The server, with its listening socket in reach.
struct Http : httplib::Server {
  int socket() const { return int(svr_sock_); }
};

// SIGTERM and SIGINT, blocked in every thread and taken by sigwait here.
sigset_t stop_signals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGINT);
  return s;
}

}  // namespace

int run_server(const ServeOptions& o) {
  if (o.model.empty() && o.embedding_model.empty() && o.translation_model.empty() && o.rerank_model.empty())
    throw Error("--model: give a language model (or --embedding-model / --translation-model / --rerank-model)");
  if (o.port < 0 || o.port > 65535) throw Error("--port: expected 0..65535, got " + std::to_string(o.port));
  if (!(o.shutdown_timeout >= 0)) throw Error("--shutdown-timeout: expected 0 or more seconds");
  if (!(o.kv_memory_mib >= 0)) throw Error("--kv-memory: expected 0 or more MiB");
  if (o.compute != "native" && o.compute != "fp32") throw Error("--compute: expected native or fp32, got " + o.compute);
  if (o.log_format != "text" && o.log_format != "json" && o.log_format != "none")
    throw Error("--log-format: expected text, json or none, got " + o.log_format);
  // Signals: blocked before any thread starts, so only the waiter below takes them; a closed socket's write is an error, not SIGPIPE.
  const sigset_t sigs = stop_signals();
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  App a;
  a.o = o;
  a.lm_name = o.model.empty() ? "" : name_of(o.model);
  a.embed_name = o.embedding_model.empty() ? "" : name_of(o.embedding_model);
  a.translate_name = o.translation_model.empty() ? "" : name_of(o.translation_model);
  a.rerank_name = o.rerank_model.empty() ? "" : name_of(o.rerank_model);
  Http svr;
  const int http_threads = o.http_threads > 0 ? o.http_threads : int(std::max<int64_t>(64, o.parallel + o.queue + 8));
  svr.new_task_queue = [http_threads] { return new httplib::ThreadPool(size_t(http_threads)); };
  svr.set_payload_max_length(size_t(o.body_limit));
  svr.set_read_timeout(o.read_timeout, 0);
  svr.set_write_timeout(o.read_timeout, 0);
  svr.set_keep_alive_max_count(1000);
  svr.set_keep_alive_timeout(5);
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const int st = res.status;
    const std::string m = st == 413 ? "the body is larger than the server's limit (ffn serve --body-limit)"
                          : st == 404 ? "no such endpoint: " + req.method + " " + req.path
                          : st == 408 ? "the request was not read in time"
                                      : "HTTP " + std::to_string(st);
    const ApiError e(st, m, st == 413 ? "body" : "", st == 404 ? "not_found_error" : "invalid_request_error");
    res.set_content(e.body(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  // The access log and the request counts: the record starts before routing, and the logger
  // runs once the response is written (a stream: after its last chunk), on the same thread.
  svr.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    this_request() = RequestRecord{std::chrono::steady_clock::now(), true};
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_logger([&a](const httplib::Request& req, const httplib::Response& res) {
    RequestRecord& r = this_request();
    const double secs = r.started ? std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count() : 0.0;
    a.metrics.request(req.method, req.path, res.status);
    if (a.o.log_format != "none") {
      const std::string line = access_line(a.o.log_format == "json" ? LogFormat::json : LogFormat::text, req.remote_addr,
                                           req.method, req.path, res.status, r, secs, a.o.log_prompts);
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    r = RequestRecord{};
  });
  routes(svr, a);
  if (!svr.bind_to_port(o.host, o.port))
    throw Error("--host " + o.host + " --port " + std::to_string(o.port) + ": cannot listen there (" + std::strerror(errno) +
                "; is another server on that port?)");
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of connections overflows it (resets). Listen again with a real one.
  if (::listen(svr.socket(), SOMAXCONN) != 0)
    throw Error("--port " + std::to_string(o.port) + ": cannot listen (" + std::strerror(errno) + ")");
  std::thread listener([&svr] { svr.listen_after_bind(); });
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    stop = true;
  });
  // (stop() does nothing before the listener runs: wait for it first, or it would listen on forever.)
  const auto stop_listener = [&svr] {
    for (int i = 0; i < 5000 && !svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    svr.stop();
  };
  auto shutdown_all = [&] {
    stop_listener();
    listener.join();
    if (!stop) {  // (the waiter is in sigwait: wake it)
      stop = true;
      pthread_kill(waiter.native_handle(), SIGTERM);
    }
    waiter.join();
  };
  try {
    if (!o.model.empty()) {
      CausalLMLoadOptions lo;
      lo.compute = o.compute == "fp32" ? LMCompute::fp32 : LMCompute::native;
      a.lm.emplace(CausalLM::load(o.model, lo));
      EngineOptions eo;
      eo.parallel = o.parallel;
      eo.queue = o.queue;
      eo.context = o.context;
      eo.chunk = o.chunk;
      eo.prefix_cache = o.prefix_cache;
      eo.threads = o.threads;
      eo.isa = o.isa;
      if (o.kv_memory_mib > 0) {
        // The engine's page: its context's (the model's, at most 4096, when --context is 0).
        const int64_t mc = a.lm->config().context;
        const int64_t ctx = o.context > 0 ? o.context : (mc > 0 ? std::min<int64_t>(mc, 4096) : 4096);
        const CausalLMState probe = a.lm->start(0, ctx);
        eo.kv_pages = int64_t(o.kv_memory_mib * 1048576.0 / double(probe.page_bytes()));
        if (eo.kv_pages < 1)
          throw Error("--kv-memory " + std::to_string(o.kv_memory_mib) + " MiB: less than one page of " +
                      std::to_string(double(probe.page_bytes()) / 1048576.0) + " MiB");
      }
      a.engine = std::make_unique<Engine>(*a.lm, eo);
    }
    if (!o.embedding_model.empty()) {
      a.encoder.emplace(SentenceEncoder::load(o.embedding_model));
      a.batcher = std::make_unique<EmbedBatcher>(*a.encoder, o.threads, o.isa);
    }
    if (!o.rerank_model.empty()) {
      CrossEncoderLoadOptions lo;
      lo.isa = o.isa;
      a.reranker.emplace(CrossEncoder::load(o.rerank_model, lo));
      if (a.reranker->labels() != 1)
        throw Error("--rerank-model " + o.rerank_model + ": the model has " + std::to_string(a.reranker->labels()) +
                    " labels; a reranker gives one score per document");
    }
    if (!o.translation_model.empty()) {
      a.translator.emplace(TranslationModel::load(o.translation_model));
      a.marian.emplace(MarianTokenizer::load(o.translation_model));
    }
  } catch (...) {
    shutdown_all();
    throw;
  }
  a.ready = true;
  std::string served;  // the models' names, for the banner
  for (const std::string* n : {&a.lm_name, &a.embed_name, &a.translate_name, &a.rerank_name})
    if (!n->empty()) served += (served.empty() ? "" : ", ") + *n;
  if (!o.quiet) std::fprintf(stderr, "ffn serve: listening on http://%s:%d (%s)\n", o.host.c_str(), o.port, served.c_str());
  while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Shutdown: no new connections or requests; running ones get shutdown_timeout seconds, then are cancelled.
  a.draining = true;
  std::thread stopper(stop_listener);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.shutdown_timeout);
  // Running requests: handlers in flight, and streams whose handler has returned but whose job still runs.
  auto busy = [&a] {
    if (a.active > 0) return true;
    if (!a.engine) return false;
    const EngineStats s = a.engine->stats();
    return s.running + s.waiting > 0;
  };
  while (busy() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (a.engine) a.engine->stop();
  stopper.join();
  listener.join();
  waiter.join();
  if (!o.quiet) std::fprintf(stderr, "ffn serve: stopped\n");
  return 0;
}

}  // namespace ffn::serve
