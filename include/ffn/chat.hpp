// Chat with a causal language model: the text of generated tokens as it
// grows, cut at stop strings (TextStream), and a multi-turn conversation
// that keeps its key/value cache between turns (ChatSession).
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ffn/causal_lm.hpp"
#include "ffn/chat_template.hpp"

namespace ffn {

// The text of generated tokens, as the tokenizer decodes the whole
// continuation (special tokens skipped; a token's text can depend on its
// place: SentencePiece drops the text's first space), given out as it
// becomes final: text that could still be the start of a stop string, or an
// incomplete UTF-8 character, is held back. A stop string ends the text
// before it, as llama.cpp and the OpenAI API do.
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stop = {});
  // Adds a generated id (ids past the tokenizer's vocabulary have no text);
  // returns the text now final. After a stop string, stopped() is true and
  // later ids are ignored.
  std::string push(int32_t id);
  // The text held back (no stop string came): the rest of text().
  std::string finish();
  bool stopped() const { return stopped_; }
  // Everything so far, up to the stop string.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stop_;
  std::vector<int32_t> ids_;
  std::string shown_, text_;
  size_t given_ = 0;
  bool stopped_ = false;
};

struct ChatOptions {
  std::string system;                // a system message first ("" none)
  std::vector<std::string> stop;     // stop strings
  int64_t context = 0;               // positions the conversation may fill; 0: the model's, at most 4096
  ChatRenderOptions render;          // the template's clock and extra variables, a template in place of the model's
  // When a turn's prompt leaves less room than its max_new_tokens (or half
  // the context, if that is less), drop the oldest turns after the leading
  // system messages (a user message and its replies) until it does
  // (llama.cpp's --context-shift). Either way a reply is cut at the context
  // ("length"); without it a prompt that fills the context alone is an Error.
  bool context_shift = false;
};

struct ChatReply {
  std::string text;            // the assistant's reply (up to a stop string)
  std::vector<int32_t> ids;    // the tokens generated (an end id included if it came)
  int64_t prompt_tokens = 0;   // the conversation's prompt this turn
  int64_t reused_tokens = 0;   // of those, the ones whose keys and values were kept from earlier turns
  bool stopped_by_string = false;
  // "stop" (an end id or a stop string), "length" (max_new_tokens, or the
  // context), "interrupted" (on_text or on_token returned false).
  std::string finish_reason;
  int64_t dropped_messages = 0;  // messages context_shift dropped this turn
};

// A conversation: each say() re-renders the whole conversation in the
// model's template, keeps the cache of the longest token prefix it shares
// with what the cache holds (the template may rewrite earlier turns: Qwen3
// drops earlier reasoning, so the prefix can shrink) and reads only the rest.
// Its replies are the tokens generate() gives for the same prompt from scratch.
class ChatSession {
 public:
  ChatSession(const CausalLM& lm, ChatOptions opts = {});
  // The user's message, then the assistant's reply; on_text, if set, gets
  // the reply's text as it is made (returning false stops). The reply gets
  // max_new_tokens, or what the context has left. An Error (the template
  // refuses the conversation, its prompt fills the context: by how many
  // tokens) comes before any work and leaves the conversation as it was.
  // on_token, if set, sees each id first (returning false stops: an interrupt).
  ChatReply say(const std::string& user, const SamplingOptions& s,
                const std::function<bool(const std::string&)>& on_text = {}, const RunOptions& run = {},
                const std::function<bool(int32_t)>& on_token = {});
  const std::vector<ChatMessage>& messages() const { return messages_; }
  int64_t context() const { return capacity_; }

 private:
  std::vector<int32_t> render(const std::vector<ChatMessage>& messages) const;

  const CausalLM& lm_;
  ChatOptions opts_;
  std::vector<ChatMessage> messages_;
  int64_t capacity_ = 0;
  CausalLMState state_;
  std::vector<int32_t> cached_;  // the tokens whose keys and values state_ holds
};

}  // namespace ffn
