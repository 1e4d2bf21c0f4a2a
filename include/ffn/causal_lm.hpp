// A decoder-only language model of the LLaMA architecture (Touvron et al.
// 2023; Hugging Face's LlamaForCausalLM) and the families built as data on
// it (src/models/arch_*.cpp: Qwen2's Q|K|V biases, Mistral's sliding
// windows, Gemma 2's norms, gating, soft-caps and scales), the family of
// today's LLMs:
//
//   x = embed(ids)
//   per layer:  x = x + W_O · Attn(RoPE(W_Q · RMSNorm₁(x)), RoPE(W_K · RMSNorm₁(x)), W_V · RMSNorm₁(x))
//               x = x + W_down (silu(W_gate · RMSNorm₂(x)) ⊙ W_up · RMSNorm₂(x))
//   logits = W_head · RMSNorm(x)         (W_head the embedding when tied)
//
// Attention is causal and grouped-query (kv_heads key/value heads, each
// shared by heads / kv_heads query heads); rotary positions as transformers'
// rotate_half (the first and second half of each head rotated together,
// frequencies θ^(−2i/head_dim) in float32). The SwiGLU sublayer is
// ffn::FeedForward (pre-norm, RMSNorm, no bias), the project's own layer.
//
// Checkpoints: a GGUF file of architecture "llama" (llama.cpp's names,
// blk.N.attn_q.weight ...; Q and K rows in the file's rotary order are put back
// in transformers' order, as its GGUF loader does) or a Hugging Face
// directory (config.json, model.safetensors, tokenizer.json). With native
// compute (LMCompute) a GGUF's matrices of a native type
// (quant_type_names(QuantSet::native), ffn/quant.hpp) stay in their blocks and F16/BF16 ones in 16 bits; everything else is
// float32 (quantized blocks dequantized as ggml does).
// No BOS token is added to prompts (give it among the ids if a model wants it).
//
// Generation: CausalLMState holds each sequence's keys and values (after
// RoPE) of every layer; extend appends positions to the sequences and gives
// their logits. A position's result is bitwise the same whether its prefix
// was appended in one call or one position at a time, and does not depend on
// the other sequences of the batch or on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ffn/chat_template.hpp"
#include "ffn/sampling.hpp"
#include "ffn/tokenizer.hpp"
#include "ffn/types.hpp"

namespace ffn {

struct CausalLMConfig {
  int64_t vocab = 0, d_model = 0, layers = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // head_dim: d_model / heads unless the checkpoint says
  int64_t d_ff = 0;
  double rope_theta = 10000.0;
  float eps = 1e-5f;          // RMSNorm's
  bool tied = true;           // the output projection is the token embedding
  int64_t context = 0;        // positions the checkpoint was trained for (0: unknown)
  int64_t bos = -1, eos = -1; // -1: none
  // Whether a text prompt starts with BOS (CausalLM::encode_prompt): the
  // tokenizer's Tokenizer::adds_bos(), or a directory's
  // tokenizer_config.json add_bos_token where it says.
  bool add_bos = false;
  // Every id that ends generation (SamplingOptions::stop_at_eos): EOS first,
  // then a GGUF's tokenizer.ggml.eot_token_id and eom_token_id (Llama 3's
  // <|eot_id|> and <|eom_id|>), or every eos_token_id of config.json and of
  // generation_config.json (Llama 3.1 lists three); each once.
  std::vector<int64_t> end_ids;
  // Throws Error naming the field if a size is out of range.
  void validate() const;
};

// SamplingOptions, choose_token and greedy_plain: ffn/sampling.hpp (the decoding room's).

// How the products run. native: matrices stored in the file in the blocks
// of a native type (quant_type_names(QuantSet::native), ffn/quant.hpp) stay
// so in memory (resident memory ≈ the file's size) and multiply activations
// quantized per block of 32 to 16 bits (two 8-bit planes) with integer dot
// products (src/backends/cpu/qgemm.hpp: the same bits on every ISA); F16 and
// BF16 matrices stay in 16 bits; other matrices (the other quant types; and
// a stacked product, Q|K|V or up|gate, whose parts differ in type) and
// Hugging Face checkpoints are float32.
// fp32: every matrix dequantized to float32 (logits as transformers').
enum class LMCompute { native, fp32 };
struct CausalLMLoadOptions {
  LMCompute compute = LMCompute::native;
  // The SwiGLU sublayers' weight matrices where they are ffn::FeedForward
  // (Hugging Face checkpoints; GGUF files with compute fp32): fp32, or the
  // FFN's int8 (per-row weight scales, per-token activations) or bf16 modes.
  WeightDtype ffn_dtype = WeightDtype::fp32;
  // Called as the weights are read and repacked, with the share done (0 to
  // 1, last exactly 1); empty: none. The CLI shows it on a terminal for loads
  // of more than a second.
  std::function<void(double)> on_progress;
};

// The keys and values of a batch of sequences being generated (made by
// CausalLM::start, advanced by extend), in a paged cache: select() rearranges
// them, join() and leave() add and drop sequences between steps.
class CausalLMState {
 public:
  CausalLMState();
  ~CausalLMState();
  CausalLMState(CausalLMState&&) noexcept;
  CausalLMState& operator=(CausalLMState&&) noexcept;
  int64_t live() const;
  int64_t length(int64_t i) const;  // positions sequence i holds
  int64_t capacity() const;         // the most positions a sequence may hold
  // New sequence i is a copy of old sequence from[i] (any order, repeats allowed).
  void select(const std::vector<int64_t>& from);
  // A new empty sequence after the others, between any two extend calls
  // (its prompt goes in with the others' next tokens); returns its index.
  int64_t join();
  // Drops sequence i; the later sequences move down one. Its memory is reused.
  void leave(int64_t i);
  // Sequence i keeps its first `length` positions (≤ length(i)); the rest
  // of its keys and values are dropped (a chat reusing a prompt's prefix).
  void truncate(int64_t i, int64_t length);
  // A new sequence after the others holding a copy of sequence i's first
  // `length` positions (≤ length(i)); returns its index. (A server's prefix
  // cache: a request sharing a prompt's start with a running one.)
  int64_t fork(int64_t i, int64_t length);
  // Bytes of keys and values held: whole pages of 256 positions, as the
  // sequences grow (not capacity() for every sequence up front).
  size_t bytes() const;
  // The pages: positions per page (256, or the capacity rounded up to 16
  // when smaller), pages held by live sequences, the pages `positions`
  // positions take, and one page's bytes (every layer's keys and values).
  int64_t page_positions() const;
  int64_t pages_used() const;
  int64_t pages_for(int64_t positions) const;
  size_t page_bytes() const;
  // At most `pages` pages held at once (0: no limit, the default): an
  // extend, join or fork that would need more throws Error and changes nothing.
  void set_page_limit(int64_t pages);
  int64_t page_limit() const;

  struct Data;

 private:
  friend class CausalLM;
  std::unique_ptr<Data> data_;
};

class CausalLM {
 public:
  // A GGUF file (architecture llama) or a Hugging Face directory
  // (model_type llama, qwen2, mistral or gemma2).
  // Errors name the file and what was expected.
  static CausalLM load(const std::string& path, const CausalLMLoadOptions& opts = {});
  // The architectures load() reads, from the registry: "llama, qwen2, ...".
  static std::string architecture_names();

  const CausalLMConfig& config() const { return cfg_; }
  // Whether some product keeps quantized blocks (native compute on a GGUF with matrices of a native type).
  bool quantized() const { return native_; }
  // Bytes of the weights in memory.
  size_t weight_bytes() const;
  // Bytes one generation step reads: the weights a token touches in their
  // stored types (one embedding row, every product, the head, the norms)
  // and the key and value caches of every layer at `positions` positions.
  size_t step_bytes(int64_t positions) const;
  // The checkpoint's tokenizer (GGUF metadata or tokenizer.json); null if it has none.
  const Tokenizer* tokenizer() const { return tok_.get(); }
  // The ids of a text prompt: BOS first where config().add_bos says so (as
  // transformers' tokenizer(text) and llama.cpp add it), then the text's.
  // A chat prompt is text its template wrote, BOS included: encode it with
  // tokenizer()->encode. Error if the model has no tokenizer.
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  // The GGUF's or tokenizer_config.json's chat template ("" if none).
  const std::string& chat_template() const { return chat_template_; }
  // A conversation in the model's own chat template, as transformers'
  // apply_chat_template(add_generation_prompt=True) renders it
  // (include/ffn/chat_template.hpp), with the tokenizer's BOS and EOS texts:
  // the text to give tokenizer()->encode (BOS is in it where the template
  // writes it). Errors name the model: no template, a construct outside
  // the subset, the template's own raise_exception (Gemma 2 refuses a
  // system message). opts.bos_token and eos_token, if set, are kept.
  std::string chat_prompt(const std::vector<ChatMessage>& messages, ChatRenderOptions opts = {}) const;
  // The same for a JSON array of OpenAI-style messages.
  std::string chat_prompt_json(const std::string& messages_json, ChatRenderOptions opts = {}) const;
  // One user message: chat_prompt({{"user", user_message}}).
  std::string chat_prompt(const std::string& user_message) const;

  // Empty sequences for at most `capacity` positions each.
  CausalLMState start(int64_t sequences, int64_t capacity) const;
  // Appends counts[i] tokens to sequence i (ids: all of them, sequence 0's
  // first; counts.size() == state.live()). logits: with every_position,
  // [Σ counts, vocab], the logits after each appended position; otherwise
  // [live, vocab], after each sequence's last (the row of a sequence given
  // 0 tokens is left as it was).
  // Errors (before anything is changed): an id outside the vocabulary, a
  // sequence past the state's capacity.
  void extend(CausalLMState& state, const int32_t* ids, const std::vector<int64_t>& counts, float* logits,
              bool every_position, const RunOptions& opts = {}) const;

  // The logits after every position of one sequence: [ids.size(), vocab].
  std::vector<float> logits(const std::vector<int32_t>& ids, const RunOptions& opts = {}) const;

  // The new tokens after `prompt` (at least one id), EOS included if it
  // came; on_token, if set, is called with each as it is chosen (returning
  // false stops). A prompt plus max_new_tokens past the model's context is
  // refused (Error) before any work.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const SamplingOptions& s,
                                const std::function<bool(int32_t)>& on_token = {},
                                const RunOptions& opts = {}) const;

  // generate() on sequence 0 of `state` (one sequence, started by start()),
  // which holds the keys and values of a prefix of `context`: only the rest
  // of `context` is read, at least its last token. After, the state holds
  // `context` and the new tokens but the last (state.length(0) says how
  // many). Greedy and sampling only (Error for beams > 1). The state's
  // capacity bounds context plus max_new_tokens (Error before any work).
  std::vector<int32_t> generate(CausalLMState& state, const std::vector<int32_t>& context, const SamplingOptions& s,
                                const std::function<bool(int32_t)>& on_token = {}, const RunOptions& opts = {}) const;

  // Operations of appending t positions to a sequence holding p (2 per multiply-add).
  double flops(int64_t t, int64_t p) const;

  CausalLM(CausalLM&&) noexcept;
  CausalLM& operator=(CausalLM&&) noexcept;
  ~CausalLM();

  struct Weights;

 private:
  struct Loader;  // load's steps (src/models/causal_lm_load.cpp)
  CausalLM();
  CausalLMConfig cfg_;
  std::shared_ptr<const Tokenizer> tok_;
  std::vector<int32_t> decode_in(CausalLMState& st, const std::vector<int32_t>& context, int64_t from,
                                 const SamplingOptions& s, const std::function<bool(int32_t)>& on_token,
                                 const RunOptions& opts) const;
  std::string chat_template_, path_;
  // A directory's tokenizer's BOS and EOS texts (tokenizer_config.json), for the template.
  std::optional<std::string> bos_text_, eos_text_;
  bool native_ = false;
  std::unique_ptr<Weights> w_;
};

}  // namespace ffn
