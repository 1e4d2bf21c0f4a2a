// ffn serve's metrics and access log (src/serve/metrics.hpp).
#include "serve/metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

namespace ffn::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());  // le: v ≤ bound
  const std::lock_guard<std::mutex> l(m_);
  ++counts_[i];
  sum_ += v;
  ++n_;
}

uint64_t Histogram::count() const {
  const std::lock_guard<std::mutex> l(m_);
  return n_;
}

namespace {

// A number as Prometheus reads it (shortest round trip; +Inf).
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  double back = 0;
  for (int p = 1; p <= 17; ++p) {  // the shortest that reads back
    char s[32];
    std::snprintf(s, sizeof s, "%.*g", p, v);
    if (std::sscanf(s, "%lf", &back) == 1 && back == v) return s;
  }
  return b;
}

std::string escape_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  const std::lock_guard<std::mutex> l(m_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(n_) + "\n";
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(n_) + "\n";
}

RequestRecord& this_request() {
  thread_local RequestRecord r;
  return r;
}

// vLLM's buckets (vllm/engine/metrics.py) for the same three quantities.
Metrics::Metrics()
    : ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
            160.0, 640.0, 2560.0}),
      itl({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
           1920.0, 7680.0}) {}

std::string handler_label(const std::string& path) {
  static const char* const kServed[] = {"/health",         "/metrics",    "/v1/models", "/v1/chat/completions",
                                        "/v1/completions", "/v1/embeddings", "/v1/rerank", "/rerank",
                                        "/v1/translations", "/tokenize",  "/detokenize", "/apply-template"};
  for (const char* p : kServed)
    if (path == p) return p;
  return "other";
}

void Metrics::request(const std::string& method, const std::string& path, int status) {
  const std::lock_guard<std::mutex> l(m_);
  ++requests_[{handler_label(path), method, status}];
}

void Metrics::generation(const GenerationTiming& t, const std::string& reason) {
  if (t.first_token >= 0) ttft.observe(t.first_token);
  for (float g : t.gaps) itl.observe(g);
  if (reason != "stop" && reason != "length") return;
  if (t.total >= 0) e2e.observe(t.total);
  const std::lock_guard<std::mutex> l(m_);
  ++successes_[reason];
}

std::string Metrics::render() const {
  std::string out;
  {
    const std::lock_guard<std::mutex> l(m_);
    out += "# HELP ffn:http_requests_total HTTP requests answered, by endpoint (handler), method and status.\n"
           "# TYPE ffn:http_requests_total counter\n";
    for (const auto& [k, n] : requests_)
      out += "ffn:http_requests_total{handler=\"" + escape_label(std::get<0>(k)) + "\",method=\"" +
             escape_label(std::get<1>(k)) + "\",status=\"" + std::to_string(std::get<2>(k)) + "\"} " + std::to_string(n) + "\n";
    out += "# HELP ffn:request_success_total Generations that ended, by finish reason.\n"
           "# TYPE ffn:request_success_total counter\n";
    for (const char* r : {"stop", "length"}) {
      const auto it = successes_.find(r);
      out += std::string("ffn:request_success_total{finished_reason=\"") + r + "\"} " +
             std::to_string(it == successes_.end() ? 0 : it->second) + "\n";
    }
  }
  ttft.render(out, "ffn:time_to_first_token_seconds", "Seconds from a generation's submission to its first token.");
  itl.render(out, "ffn:inter_token_latency_seconds", "Seconds between consecutive tokens of a generation.");
  e2e.render(out, "ffn:e2e_request_latency_seconds", "Seconds from a generation's submission to its end (stop or length).");
  return out;
}

std::string access_line(LogFormat f, const std::string& remote, const std::string& method, const std::string& path,
                        int status, const RequestRecord& r, double seconds, bool with_prompt) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", seconds);
  if (f == LogFormat::json) {
    nlohmann::json j = {{"time", when},   {"remote", remote}, {"method", method},
                        {"path", path},   {"status", status}, {"seconds", std::stod(secs)}};
    if (r.prompt_tokens >= 0) j["prompt_tokens"] = r.prompt_tokens;
    if (r.generated_tokens >= 0) j["generated_tokens"] = r.generated_tokens;
    if (with_prompt && !r.prompt.empty()) j["prompt"] = r.prompt;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string line = std::string(when) + " " + remote + " \"" + method + " " + path + "\" " + std::to_string(status);
  if (r.prompt_tokens >= 0) line += " prompt_tokens=" + std::to_string(r.prompt_tokens);
  if (r.generated_tokens >= 0) line += " generated_tokens=" + std::to_string(r.generated_tokens);
  line += " " + std::string(secs) + "s";
  if (with_prompt && !r.prompt.empty())
    line += " prompt=" + nlohmann::json(r.prompt).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return line;
}

}  // namespace ffn::serve
