// How a next token is chosen from a row of logits: the sampling settings of
// every decoding loop (CausalLM::generate, the server's engine, beam search)
// and the sampler itself (src/decoding/sampling.cpp). The decoding room's
// public header: the models' headers include it, never the reverse.
#pragma once

#include <cstdint>
#include <vector>

namespace ffn {

// How generate chooses each next token, as transformers' generate does:
// the repetition penalty (a seen token's logit divided by it if positive,
// multiplied if negative), then the OpenAI API's presence and frequency
// penalties over the generated tokens (as vLLM: a generated token's logit
// minus presence_penalty, and minus frequency_penalty times its count), then
// greedy (temperature 0: the first largest logit), or logits / temperature,
// the top_k largest kept, the smallest set of largest probabilities reaching
// top_p kept, those below min_p times the largest probability dropped, and a
// draw from the softmax of the rest. Draws come from Philox (seed, step):
// the same seed, the same tokens on every machine and thread count.
struct SamplingOptions {
  int64_t max_new_tokens = 128;
  float temperature = 0.0f;   // 0: greedy
  int64_t top_k = 0;          // 0: no limit
  float top_p = 1.0f;         // 1: no limit
  float repeat_penalty = 1.0f;
  float min_p = 0.0f;              // 0: no limit
  float presence_penalty = 0.0f;   // -2..2, 0: off
  float frequency_penalty = 0.0f;  // -2..2, 0: off
  uint64_t seed = 0;
  bool stop_at_eos = true;    // stop after one of the model's end ids (config().end_ids; returned)
  // Beam search (transformers' BeamSearchScorer) with this many beams; the
  // best hypothesis is returned (the callback sees its tokens at the end).
  // 1: greedy or sampling as above. Not with temperature > 0, top-k, top-p
  // or a repeat penalty.
  int64_t beams = 1;
  float length_penalty = 1.0f;  // beam search: a hypothesis scores sum / length^length_penalty
  // Throws Error naming the setting (as its command-line flag) if out of range.
  void validate() const;
};

// The token chosen from one row of logits (modified in place) after the
// tokens `seen` (prompt and generated so far; the generated ones from index
// `generated_from`, which the presence and frequency penalties count), at
// generation step `step`.
int32_t choose_token(float* logits, int64_t vocab, const std::vector<int32_t>& seen, const SamplingOptions& s,
                     int64_t step, int64_t generated_from = 0);
// Whether s chooses by the first largest logit alone (temperature 0, no penalty).
bool greedy_plain(const SamplingOptions& s);

}  // namespace ffn
