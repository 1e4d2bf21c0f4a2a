// The sampler (include/ffn/sampling.hpp: SamplingOptions, choose_token):
// repetition penalty, then greedy or temperature with top-k and top-p, drawn
// from a counter-based stream (Philox, seeded; the step is the counter), so
// a sequence's tokens do not depend on what else runs. Shared by every
// decoding loop (issue 46: one decoding engine).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ffn/sampling.hpp"
#include "ffn/types.hpp"
#include "ffn/random.hpp"

namespace ffn {

void SamplingOptions::validate() const {
  if (max_new_tokens < 0) throw Error("--max-new-tokens: expected 0 or more, got " + std::to_string(max_new_tokens));
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw Error("--temperature: expected a finite value >= 0, got " + std::to_string(temperature));
  if (top_k < 0) throw Error("--top-k: expected 0 (no limit) or more, got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1)) throw Error("--top-p: expected a value in (0, 1], got " + std::to_string(top_p));
  if (!(repeat_penalty > 0) || !std::isfinite(repeat_penalty))
    throw Error("--repeat-penalty: expected a finite value > 0, got " + std::to_string(repeat_penalty));
  if (!(min_p >= 0 && min_p <= 1)) throw Error("--min-p: expected a value in [0, 1], got " + std::to_string(min_p));
  if (!(presence_penalty >= -2 && presence_penalty <= 2))
    throw Error("--presence-penalty: expected a value in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2))
    throw Error("--frequency-penalty: expected a value in [-2, 2], got " + std::to_string(frequency_penalty));
  if (beams < 1 || beams > 1024) throw Error("--beams: expected 1..1024, got " + std::to_string(beams));
  if (!std::isfinite(length_penalty))
    throw Error("--length-penalty: expected a finite value, got " + std::to_string(length_penalty));
  if (beams > 1 && temperature != 0.0f)
    throw Error("--beams " + std::to_string(beams) + " with --temperature: beam sampling is not supported (give one)");
  if (beams > 1 && (top_k != 0 || top_p != 1.0f || repeat_penalty != 1.0f || min_p != 0.0f || presence_penalty != 0.0f ||
                    frequency_penalty != 0.0f))
    throw Error("--beams " + std::to_string(beams) +
                ": --top-k, --top-p, --min-p and the penalties apply to sampling and greedy search, not to beam search");
}

bool greedy_plain(const SamplingOptions& s) {
  return s.temperature == 0.0f && s.repeat_penalty == 1.0f && s.presence_penalty == 0.0f && s.frequency_penalty == 0.0f;
}

int32_t choose_token(float* logits, int64_t vocab, const std::vector<int32_t>& seen, const SamplingOptions& s,
                     int64_t step, int64_t generated_from) {
  if (s.repeat_penalty != 1.0f) {
    std::vector<char> done(size_t(vocab), 0);
    for (int32_t t : seen) {
      if (t < 0 || t >= vocab || done[size_t(t)]) continue;
      done[size_t(t)] = 1;
      float& l = logits[t];
      l = l < 0 ? l * s.repeat_penalty : l / s.repeat_penalty;
    }
  }
  if (s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f) {
    std::vector<int32_t> count(size_t(vocab), 0);
    for (size_t i = size_t(std::clamp<int64_t>(generated_from, 0, int64_t(seen.size()))); i < seen.size(); ++i)
      if (seen[i] >= 0 && seen[i] < vocab) ++count[size_t(seen[i])];
    for (int64_t v = 0; v < vocab; ++v)
      if (count[size_t(v)] > 0) logits[v] -= s.presence_penalty + s.frequency_penalty * float(count[size_t(v)]);
  }
  if (s.temperature == 0.0f) return int32_t(std::max_element(logits, logits + vocab) - logits);
  // Candidates, largest first (ties: the lower id first, as a stable sort).
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  for (int64_t v = 0; v < vocab; ++v) logits[v] /= s.temperature;
  int64_t keep = vocab;
  if (s.top_k > 0 && s.top_k < vocab) {
    std::partial_sort(idx.begin(), idx.begin() + s.top_k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    // Tokens tied with the k-th are kept too (transformers keeps logits >= the k-th largest).
    keep = s.top_k;
    const float kth = logits[idx[size_t(keep - 1)]];
    std::sort(idx.begin() + keep, idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    while (keep < vocab && logits[idx[size_t(keep)]] >= kth) ++keep;
  } else {
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  }
  const float mx = logits[idx[0]];
  std::vector<double> p(static_cast<size_t>(keep));
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += (p[size_t(i)] = std::exp(double(logits[idx[size_t(i)]]) - double(mx)));
  if (s.top_p < 1.0f) {  // the smallest prefix whose probability reaches top_p
    double acc = 0;
    int64_t n = 0;
    while (n < keep) {
      acc += p[size_t(n)] / sum;
      ++n;
      if (acc >= double(s.top_p)) break;
    }
    keep = n;
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += p[size_t(i)];
  }
  if (s.min_p > 0.0f) {  // p ≥ min_p · p_max, with p relative to the largest (p[0] = 1)
    int64_t n = 1;
    while (n < keep && p[size_t(n)] >= double(s.min_p)) ++n;
    keep = n;
    sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += p[size_t(i)];
  }
  const auto r = philox4x32_10({uint32_t(step), uint32_t(uint64_t(step) >> 32), uint32_t(Stream::data), 0x5a4dU},
                               {uint32_t(s.seed), uint32_t(s.seed >> 32)});
  const double u = double((uint64_t(r[0]) << 21) | (r[1] >> 11)) / 9007199254740992.0 * sum;  // 53 bits in [0, 1)
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[size_t(i)];
    if (u < acc) return idx[size_t(i)];
  }
  return idx[size_t(keep - 1)];
}

}  // namespace ffn
