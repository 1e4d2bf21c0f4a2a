// ffn serve's Prometheus metrics and access log (issue 67).
//
// GET /metrics (Prometheus text format 0.0.4) gives, beside the engine's
// gauges and counters (src/serve/server.cpp):
//   ffn:http_requests_total{handler,method,status}  requests answered, by endpoint
//   ffn:request_success_total{finished_reason}       generations that ended (stop, length)
//   ffn:time_to_first_token_seconds                  histogram: from submission to the first token
//   ffn:inter_token_latency_seconds                  histogram: between a request's consecutive tokens
//   ffn:e2e_request_latency_seconds                  histogram: from submission to the end
// named and bucketed as vLLM names and buckets the same quantities
// (vllm:time_to_first_token_seconds, ...); `handler` is one of the served
// endpoints, or "other" (a 404's path is not a label: a scan would grow the
// series without bound).
//
// The access log: one line per request on stderr once its response has
// been written (a stream: after its last chunk), as text
//   2026-11-29T13:40:01Z 127.0.0.1 "POST /v1/chat/completions" 200 prompt_tokens=12 generated_tokens=30 0.153s
// or as one JSON object per line (--log-format json) with the same fields;
// a generation's prompt text only with --log-prompts.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace ffn::serve {

// A Prometheus histogram: cumulative buckets by upper bound, the sum and count. Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends its # HELP, # TYPE and series lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const;

 private:
  mutable std::mutex m_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), the last one past every bound
  double sum_ = 0;
  uint64_t n_ = 0;
};

// What the access-log line of the request a thread is answering says, set
// by its handler (cpp-httplib runs a request's routing, handler, streamed
// body and logger on one thread of its pool, so a thread's record is its
// request's).
struct RequestRecord {
  std::chrono::steady_clock::time_point start;
  bool started = false;
  int64_t prompt_tokens = -1, generated_tokens = -1;  // -1: not a counted request
  std::string prompt;                                   // a generation's prompt text (logged with --log-prompts)
};
RequestRecord& this_request();

// A finished generation's timing (src/serve/engine.hpp, Job::timing).
struct GenerationTiming {
  double first_token = -1;   // seconds from submission; -1: none made
  std::vector<float> gaps;   // seconds between consecutive tokens
  double total = -1;         // seconds from submission to the end
};

class Metrics {
 public:
  Metrics();
  // One answered request (its status as written).
  void request(const std::string& method, const std::string& path, int status);
  // A generation that ended with `reason` ("stop", "length"; others are not successes).
  void generation(const GenerationTiming& t, const std::string& reason);
  // The series above, to append to the engine's.
  std::string render() const;
  Histogram ttft, itl, e2e;

 private:
  mutable std::mutex m_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> successes_;
};

// The endpoint label of a request path: the served endpoint, or "other".
std::string handler_label(const std::string& path);

enum class LogFormat { text, json, none };
// The access-log line (no newline) of a request answered with `status` after `seconds`.
std::string access_line(LogFormat f, const std::string& remote, const std::string& method, const std::string& path,
                        int status, const RequestRecord& r, double seconds, bool with_prompt);

}  // namespace ffn::serve
