// What ffn serve's metrics and access log cost per request (issue 67): the
// work src/serve/server.cpp adds to each request, timed alone in a loop:
// Metrics::request (the counter), Metrics::generation (three histograms; 16
// inter-token gaps, as a 16-token answer has), access_line (a text line) and
// its fprintf to stderr (run it with stderr to /dev/null or a file).
//   g++ -O2 -std=c++20 -Isrc -Iinclude bench/serve_log_cost.cpp src/serve/metrics.cpp -o /tmp/serve_log_cost
//   /tmp/serve_log_cost 2>/dev/null
#include <chrono>
#include <cstdio>

#include "serve/metrics.hpp"

int main() {
  using namespace ffn::serve;
  Metrics m;
  GenerationTiming t;
  t.first_token = 0.1;
  t.gaps.assign(16, 0.02f);
  t.total = 0.45;
  RequestRecord r{std::chrono::steady_clock::now(), true, 43, 16, ""};
  const int n = 200000;
  size_t sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    m.request("POST", "/v1/chat/completions", 200);
    m.generation(t, "length");
    const std::string line = access_line(LogFormat::text, "127.0.0.1", "POST", "/v1/chat/completions", 200, r, 0.153, false);
    std::fprintf(stderr, "%s\n", line.c_str());
    sink += line.size();
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  std::printf("%.2f us per request (counter, 3 histograms with 16 gaps, a text log line written); %zu bytes\n", us, sink);
  // Rendering /metrics (a scrape), for scale.
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) sink += m.render().size();
  std::printf("%.1f us per /metrics render\n",
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() / 1000);
  return sink == 0;
}
