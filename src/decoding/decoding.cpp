// The decoding engine (src/decoding/decoding.hpp).
#include "decoding/decoding.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>

#include "backends/cpu/kernel_config.hpp"
#include "core/thread_pool.hpp"

namespace ffn::decoding {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The largest non-NaN value of row[0, n) (−inf if none), as the fold
// m = std::max(m, x) from −inf gives it; in 8 lanes the compiler turns into
// vector maxima (the maximum of a set does not depend on the order: the
// one exception, +0 against −0, compares equal wherever it is used).
float row_max(const float* row, int64_t n) {
  constexpr int64_t L = 8;
  float m[L];
  std::fill(m, m + L, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int64_t l = 0; l < L; ++l) m[l] = std::max(m[l], row[j + l]);
  float r = m[0];
  for (int64_t l = 1; l < L; ++l) r = std::max(r, m[l]);
  for (; j < n; ++j) r = std::max(r, row[j]);
  return r;
}

// log_softmax of one row in place, in PyTorch's order: (x − max) − log Σ e^(x − max)
// (the sum by the ISA's vector exponentials into `tmp`; e^(−inf) is 0).
void log_softmax(const nn::KernelConfig& kc, float* row, int64_t n, float* tmp) {
  const float mx = row_max(row, n);
  if (mx == -std::numeric_limits<float>::infinity()) return;  // every token banned: stays −inf
  const float lse = std::log(kc.exp_rows(row, n, 1.0f, mx, tmp));
  for (int64_t j = 0; j < n; ++j) row[j] = (row[j] - mx) - lse;
}

// The best `k` (score, index) of row + add (the log-probabilities plus the
// beam's score, in float as transformers), ordered by score, then lower
// index first; appended to `out`: one pass with a small sorted list.
void top_k(const float* row, int64_t n, float add, int64_t base, size_t k, std::vector<std::pair<float, int64_t>>& out) {
  auto better = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::vector<std::pair<float, int64_t>> best;
  best.reserve(k + 1);
  constexpr int64_t kChunk = 64;
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t j1 = std::min(n, j0 + kChunk);
    if (best.size() == k) {  // a chunk none of whose values beats the k-th is skipped in one vector pass
      const float least = best.back().first;
      int any = 0;
      for (int64_t j = j0; j < j1; ++j) any |= int(row[j] + add > least);
      if (!any) continue;
    }
    for (int64_t j = j0; j < j1; ++j) {
      const float v = row[j] + add;
      if (best.size() == k && !(v > best.back().first)) continue;  // ties keep the lower index, seen first
      const std::pair<float, int64_t> c{v, base + j};
      best.insert(std::upper_bound(best.begin(), best.end(), c, better), c);
      if (best.size() > k) best.pop_back();
    }
  }
  out.insert(out.end(), best.begin(), best.end());
}

// BeamHypotheses of transformers 4.46: the num_beams best finished hypotheses.
struct Hypotheses {
  int64_t num_beams;
  double length_penalty;
  bool early_stopping;
  std::vector<std::pair<double, std::vector<int64_t>>> beams;  // (score, tokens)
  double worst = 1e9;
  void add(std::vector<int64_t> tokens, double sum_logprobs, int64_t generated_len) {
    const double score = sum_logprobs / std::pow(double(generated_len), length_penalty);
    if (int64_t(beams.size()) < num_beams || score > worst) {
      beams.emplace_back(score, std::move(tokens));
      if (int64_t(beams.size()) > num_beams) {
        // Drop the worst (the first of equal scores, as Python's sorted on (score, index)).
        size_t w = 0;
        for (size_t i = 1; i < beams.size(); ++i)
          if (beams[i].first < beams[w].first) w = i;
        beams.erase(beams.begin() + std::ptrdiff_t(w));
        worst = beams[0].first;
        for (const auto& b : beams) worst = std::min(worst, b.first);
      } else {
        worst = std::min(score, worst);
      }
    }
  }
  bool done(double best_sum_logprobs, int64_t generated_len) const {
    if (int64_t(beams.size()) < num_beams) return false;
    if (early_stopping) return true;
    return worst >= best_sum_logprobs / std::pow(double(generated_len), length_penalty);
  }
};

// Runs fn(i, slot) for i < n over `threads` (the pool's units); the first
// exception any call throws is rethrown here, after every unit has ended.
template <typename Fn>
void each_row(int threads, int64_t n, Fn&& fn) {
  std::exception_ptr error;
  std::mutex m;
  nn::parallel_units(n > 1 ? threads : 1, n, [&](int64_t i, int slot) {
    try {
      fn(i, slot);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
}

bool is_end(const std::vector<int64_t>& ends, int64_t tok) { return std::find(ends.begin(), ends.end(), tok) != ends.end(); }

std::vector<std::vector<int64_t>> greedy_or_sample(Stepper& model, const std::vector<int64_t>& start,
                                                   std::vector<std::vector<int32_t>> seen, const Search& s,
                                                   SearchStats& stats) {
  const int64_t B = int64_t(start.size()), V = s.vocab;
  const SamplingOptions& so = s.sampling;
  std::vector<int64_t> prompt_len(static_cast<size_t>(B));  // where each sequence's generated tokens start in seen
  for (int64_t b = 0; b < B; ++b) prompt_len[size_t(b)] = int64_t(seen[size_t(b)].size());
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<int64_t> live(static_cast<size_t>(B)), last(start);
  std::iota(live.begin(), live.end(), 0);
  std::vector<float> logits;
  for (int64_t t = 0; t < s.max_new && !live.empty(); ++t) {
    if (s.ask) s.ask();
    const int64_t rows = int64_t(live.size());
    logits.resize(size_t(rows * V));
    model.step(last, t, logits.data());
    const auto t3 = Clock::now();
    std::vector<int64_t> best(static_cast<size_t>(rows));
    each_row(s.threads, rows, [&](int64_t i, int) {
      float* row = logits.data() + i * V;
      const int64_t b = live[size_t(i)];
      if (s.process) s.process(row, b, t);
      SamplingOptions mine = so;
      mine.seed = so.seed + uint64_t(b) * 0x9e3779b97f4a7c15ULL;  // sequence 0 keeps the seed
      best[size_t(i)] = choose_next(row, V, seen[size_t(b)], prompt_len[size_t(b)], mine, t);
    });
    std::vector<int64_t> keep, next_live, next_last;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t b = live[size_t(i)], tok = best[size_t(i)];
      out[size_t(b)].push_back(tok);
      seen[size_t(b)].push_back(int32_t(tok));
      ++stats.tokens;
      bool more = !(s.on_token && !s.on_token(b, tok));
      if (is_end(s.end_ids, tok)) more = false;
      if (more) {
        keep.push_back(i);
        next_live.push_back(b);
        next_last.push_back(tok);
      }
    }
    stats.seconds += seconds_since(t3);
    if (t + 1 == s.max_new || next_live.empty()) break;
    if (next_live.size() != live.size()) model.select(keep);
    live = std::move(next_live);
    last = std::move(next_last);
  }
  return out;
}

std::vector<std::vector<int64_t>> beam_search(Stepper& model, const std::vector<int64_t>& start, const Search& s,
                                              SearchStats& stats) {
  // Beam search (BeamSearchScorer.process / finalize of transformers 4.46):
  // per source K beams with float scores; the 2K best (beam, token) pairs by
  // beam score + log-softmax; an end token among the first K closes a
  // hypothesis (its score: the sum over generated_len^length_penalty), the
  // others continue. A source is done when its K hypotheses cannot be beaten.
  const int64_t K = s.beams, V = s.vocab, B = int64_t(start.size());
  if (!s.kernels) throw Error("beam search: no kernel set");
  const nn::KernelConfig& kc = *s.kernels;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  struct Source {
    int64_t b;
    Hypotheses hyps;
    std::vector<std::vector<int64_t>> tokens;  // per beam, after the start token
    std::vector<float> scores;                 // per beam
  };
  std::vector<Source> srcs;
  std::vector<int64_t> from, last(start);
  for (int64_t b = 0; b < B; ++b) {
    Source src{b, Hypotheses{K, s.length_penalty, s.early_stopping, {}, 1e9}, {}, {}};
    src.tokens.assign(size_t(K), {});
    src.scores.assign(size_t(K), -1e9f);
    src.scores[0] = 0.0f;
    srcs.push_back(std::move(src));
    for (int64_t k = 0; k < K; ++k) from.push_back(b);
  }
  auto best_of = [](const Hypotheses& h) {
    // sorted(key=score).pop(): the last of the highest scores.
    size_t best = 0;
    for (size_t i = 1; i < h.beams.size(); ++i)
      if (h.beams[i].first >= h.beams[best].first) best = i;
    return h.beams[best].second;
  };
  std::vector<std::pair<float, int64_t>> cand;
  std::vector<std::vector<std::pair<float, int64_t>>> row_cand;
  std::vector<std::vector<float>> tmp_rows;  // each thread's log-softmax scratch [V]
  std::vector<float> logits;
  for (int64_t t = 0; t < s.max_new && !srcs.empty(); ++t) {
    if (s.ask) s.ask();
    const int64_t rows = int64_t(srcs.size()) * K;
    logits.resize(size_t(rows * V));
    if (t == 0) {
      // The first step once per source (a causal LM's prompt is read once),
      // then K beams of it: the same rows as K copies stepping (no row's
      // result depends on the rows beside it), the caches copied by select.
      std::vector<float> first(size_t(B * V));
      model.step(last, t, first.data());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t k = 0; k < K; ++k) std::copy_n(first.begin() + b * V, V, logits.begin() + (b * K + k) * V);
      model.select(from);
    } else {
      model.step(last, t, logits.data());
    }
    const auto t3 = Clock::now();
    std::vector<int64_t> sel, next_last;
    std::vector<Source> next_srcs;
    const int64_t generated_len = t + 1;  // cur_len − decoder_prompt_len in transformers
    // Per live beam (in parallel): the log-softmax's shift, the logits
    // processors, then its best 2K continuations by beam score + log-prob.
    row_cand.resize(size_t(rows));
    tmp_rows.resize(size_t(std::max(s.threads, 1)));
    each_row(s.threads, rows, [&](int64_t r, int slot) {
      std::vector<float>& tmp = tmp_rows[size_t(slot)];
      tmp.resize(static_cast<size_t>(V));
      float* row = logits.data() + r * V;
      log_softmax(kc, row, V, tmp.data());
      if (s.process) s.process(row, r, t);  // on log-probabilities, as transformers' beam search
      if (s.renormalize) log_softmax(kc, row, V, tmp.data());
      row_cand[size_t(r)].clear();
      top_k(row, V, srcs[size_t(r / K)].scores[size_t(r % K)], (r % K) * V, size_t(2 * K), row_cand[size_t(r)]);
    });
    for (size_t si = 0; si < srcs.size(); ++si) {
      Source& src = srcs[si];
      // The best 2K (beam, token) pairs are among each beam's best 2K.
      cand.clear();
      for (int64_t k = 0; k < K; ++k) {
        const auto& rc = row_cand[size_t(int64_t(si) * K + k)];
        cand.insert(cand.end(), rc.begin(), rc.end());
      }
      std::sort(cand.begin(), cand.end(),
                [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      std::vector<std::vector<int64_t>> tokens;
      std::vector<float> scores;
      std::vector<int64_t> parents;
      for (size_t r = 0; r < size_t(2 * K) && int64_t(tokens.size()) < K; ++r) {
        const int64_t k = cand[r].second / V, tok = cand[r].second % V;
        std::vector<int64_t> h = src.tokens[size_t(k)];
        h.push_back(tok);
        if (is_end(s.end_ids, tok)) {
          if (int64_t(r) >= K) continue;
          src.hyps.add(std::move(h), double(cand[r].first), generated_len);
        } else {
          tokens.push_back(std::move(h));
          scores.push_back(cand[r].first);
          parents.push_back(int64_t(si) * K + k);
        }
      }
      if (int64_t(tokens.size()) < K) throw Error("beam search: fewer than beams non-end candidates");
      const bool done = src.hyps.done(double(cand[0].first), generated_len);
      stats.tokens += K;
      if (done || t + 1 == s.max_new) {
        if (!done)  // finalize: the running beams join the hypotheses (no end token)
          for (int64_t k = 0; k < K; ++k) src.hyps.add(tokens[size_t(k)], double(scores[size_t(k)]), generated_len);
        out[size_t(src.b)] = best_of(src.hyps);
        continue;
      }
      src.tokens = std::move(tokens);
      src.scores = std::move(scores);
      for (int64_t k = 0; k < K; ++k) {
        sel.push_back(parents[size_t(k)]);
        next_last.push_back(src.tokens[size_t(k)].back());
      }
      next_srcs.push_back(std::move(src));
    }
    if (!next_srcs.empty()) model.select(sel);
    srcs = std::move(next_srcs);
    last = std::move(next_last);
    stats.seconds += seconds_since(t3);
  }
  return out;
}

}  // namespace

int64_t choose_next(float* row, int64_t vocab, const std::vector<int32_t>& seen, int64_t generated_from,
                    const SamplingOptions& so, int64_t t) {
  return greedy_plain(so) ? row_argmax(row, vocab) : choose_token(row, vocab, seen, so, t, generated_from);
}

void check_finite_logits(const float* row, int64_t vocab, int64_t t) {
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isfinite(row[v]))
      throw Error("generate: the logits for new token " + std::to_string(t + 1) + " are not finite (" +
                  std::to_string(row[v]) + " for token " + std::to_string(v) +
                  "): the model's weights hold NaN or Inf, or its activations overflow");
}

int64_t row_argmax(const float* row, int64_t n) {
  if (std::isnan(row[0])) return 0;
  const float m = row_max(row, n);
  for (int64_t j = 0; j < n; ++j)
    if (row[j] == m) return j;
  return 0;
}

std::vector<std::vector<int64_t>> decode(Stepper& model, const std::vector<int64_t>& start,
                                         const std::vector<std::vector<int32_t>>& seen, const Search& s,
                                         SearchStats* stats) {
  SearchStats local;
  SearchStats& st = stats ? *stats : local;
  if (s.vocab < 1) throw Error("decode: the vocabulary is empty");
  if (s.max_new < 1) return std::vector<std::vector<int64_t>>(start.size());
  SamplingOptions settings = s.sampling;  // the ranges and the beam rules, in one place
  settings.beams = s.beams;
  settings.validate();
  if (s.beams > 1) return beam_search(model, start, s, st);
  std::vector<std::vector<int32_t>> seen_all(seen);
  seen_all.resize(start.size());
  return greedy_or_sample(model, start, std::move(seen_all), s, st);
}

}  // namespace ffn::decoding
