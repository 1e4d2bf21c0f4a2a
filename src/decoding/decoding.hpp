// The decoding engine (issue 46, part 4; CTranslate2's src/decoding.cc):
// one loop for every model that produces a next token — greedy, sampling
// and beam search over a batch of live sequences — used by the translation
// model and the causal LM alike.
//
// The model side is a Stepper: at step t it takes each live sequence's last
// token and writes that sequence's next-token logits; select() rearranges
// its caches (sequences that finish leave, beams are copied). The engine
// owns the choice of tokens:
//   beams == 1   each row: the logits processors, then the sampler
//                (src/decoding/sampling.cpp; temperature 0: the first highest
//                logit); a sequence ends at an end token, when on_token says
//                stop, or after max_new tokens, and leaves the batch;
//   beams  > 1   transformers' BeamSearchScorer (4.46): log-softmax, the
//                processors, the best 2K (beam, token) pairs of each source,
//                finished hypotheses scored sum / length^length_penalty.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ffn/sampling.hpp"

namespace ffn::nn {
struct KernelConfig;
}

namespace ffn::decoding {

class Stepper {
 public:
  virtual ~Stepper() = default;
  // logits [last.size(), vocab]: live sequence i's next-token logits after
  // it takes last[i] (step 0: the start; a causal LM's prompt).
  virtual void step(const std::vector<int64_t>& last, int64_t t, float* logits) = 0;
  // New live sequence i is old live sequence from[i].
  virtual void select(const std::vector<int64_t>& from) = 0;
};

struct Search {
  int64_t vocab = 0;
  int64_t max_new = 1;
  std::vector<int64_t> end_ids;  // a sequence ends after one of these (returned with it)
  int64_t beams = 1;
  // beam search
  double length_penalty = 1.0;
  bool early_stopping = false;
  bool renormalize = false;  // log-softmax again after the processors
  // beams == 1: the sampler; per sequence b the seed is seed + b·φ (b = 0: seed)
  SamplingOptions sampling;
  // Logits processors, in place, before the choice (beam search: on the
  // log-probabilities): row of live sequence `seq` (its batch index) at step t. May throw.
  std::function<void(float* row, int64_t seq, int64_t t)> process;
  // beams == 1: called for each chosen token in batch order; false ends that sequence.
  std::function<bool(int64_t seq, int64_t token)> on_token;
  // Asked before each step; may throw (an interrupt).
  std::function<void()> ask;
  const nn::KernelConfig* kernels = nullptr;  // beam search's log-softmax
  int threads = 1;
};

struct SearchStats {
  int64_t tokens = 0;  // tokens chosen (beam search: beams per source per step)
  double seconds = 0;  // spent choosing them (not in the model)
};

// Decodes `sequences` sequences (beams == 1) or sources (each with `beams`
// live beams, made by select at the start) starting from start[b] and
// seen[b] (the tokens the repetition penalty counts; may be empty);
// returns each one's new tokens.
std::vector<std::vector<int64_t>> decode(Stepper& model, const std::vector<int64_t>& start,
                                         const std::vector<std::vector<int32_t>>& seen, const Search& s,
                                         SearchStats* stats = nullptr);

// One sequence's next token from its logits row (modified in place), as
// decode() chooses it: the first highest logit when greedy_plain(so), else
// choose_token with so's seed at step t (seen: prompt and tokens so far, the
// generated ones from generated_from). The server's engine chooses by it too.
int64_t choose_next(float* row, int64_t vocab, const std::vector<int32_t>& seen, int64_t generated_from,
                    const SamplingOptions& so, int64_t t);
// Error naming new token t + 1 and the first value that is NaN or Inf.
void check_finite_logits(const float* row, int64_t vocab, int64_t t);

// std::max_element's index: the first of the largest non-NaN values (0 when
// row[0] is NaN or no value is larger than it).
int64_t row_argmax(const float* row, int64_t n);

}  // namespace ffn::decoding
