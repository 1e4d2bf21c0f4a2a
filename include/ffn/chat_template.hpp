// Chat templates: the Jinja2 program a model's file stores
// (tokenizer.chat_template in a GGUF, chat_template in tokenizer_config.json)
// rendered as transformers' apply_chat_template renders it: Jinja2 with
// trim_blocks and lstrip_blocks, the loop controls, raise_exception,
// strftime_now and transformers' tojson (json.dumps, ensure_ascii=False).
//
// No C++ Jinja library is packaged for Debian 12, so src/text/jinja.cpp runs
// the subset chat templates use: expressions with Python's values and
// operators (slices such as [::-1], string methods, dict methods), if, for
// (with loop, else, filters, break and continue), set (names, tuples,
// namespace attributes, blocks), macros, and the filters and tests of
// jinja2's library that templates call. Anything outside the subset
// (include, extends, call blocks, an unknown filter or method) is refused
// with one error naming the construct and its line, never rendered
// differently. Rendering stops with an error past a million steps or 16 MiB
// of output.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ffn {

struct ChatMessage {
  std::string role, content;
};

struct ChatRenderOptions {
  // Open the assistant's turn after the conversation (transformers'
  // add_generation_prompt=True, what generation wants).
  bool add_generation_prompt = true;
  // The tokenizer's BOS and EOS texts, as bos_token and eos_token (left
  // undefined when unset, as transformers leaves a tokenizer's None).
  std::optional<std::string> bos_token, eos_token;
  // The local time strftime_now reads; the clock's if unset.
  std::optional<std::tm> now;
  // More variables, as a JSON object ({"enable_thinking": false}); "" for
  // none. tools and documents are None unless given here, as
  // apply_chat_template passes them.
  std::string variables_json;
  // A template to render in place of the model's own (llama-server's
  // --chat-template-file, ffn's --chat-template FILE), and the name its
  // errors give. Read by CausalLM::chat_prompt and ChatSession; a
  // ChatTemplate renders its own text and ignores them.
  std::optional<std::string> chat_template;
  std::string chat_template_name = "chat template";
};

class ChatTemplate {
 public:
  // Parses `text`; an Error names `name`, the line and the construct.
  ChatTemplate(const std::string& text, const std::string& name = "chat template");
  // The prompt for `messages`: a JSON array of objects with role and content
  // (OpenAI's messages; any other fields are passed to the template as they
  // are). Errors: bad JSON, the template's own raise_exception (its message
  // is kept), an undefined value used as a value, a type error.
  std::string render_json(const std::string& messages_json, const ChatRenderOptions& opts = {}) const;
  std::string render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& opts = {}) const;

  struct Program;

 private:
  std::shared_ptr<const Program> program_;
  std::string name_;
};

// OpenAI-style messages (a JSON array) checked before a template sees them,
// as the OpenAI API checks them: not empty; each an object whose role is
// system, developer, user, assistant or tool; content a string, or a list of
// {"type": "text", "text": ...} parts (passed to the template as the list,
// as transformers passes it, or with join_text_parts one string of the parts
// joined with newlines, as ffn serve gives it); an assistant message with
// tool_calls may leave content out; other fields are kept. Returns the
// messages as JSON. An Error names the message and field: "messages[2].content:
// expected a string or a list of text parts, got number".
std::string check_chat_messages(const std::string& messages_json, bool join_text_parts = false);

// messages as a JSON array of {"role", "content"} objects.
std::string chat_messages_json(const std::vector<ChatMessage>& messages);

}  // namespace ffn
