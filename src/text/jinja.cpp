// The Jinja2 subset chat templates use (include/ffn/chat_template.hpp), run
// as jinja2 3.1 runs it in transformers' environment (trim_blocks,
// lstrip_blocks, loop controls; undefined values print as ""). Values follow
// Python: ints, floats with Python's repr, str indexed by code point, lists,
// tuples, insertion-ordered dicts. Three parts: the lexer (source → tokens,
// with jinja2's whitespace control), the parser (tokens → a tree of
// statements and expressions, in jinja2's precedence) and the interpreter.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ffn/chat_template.hpp"
#include "ffn/types.hpp"
#include "text/jinja/lexer.hpp"
#include "text/jinja/parser.hpp"
#include "text/jinja/runtime.hpp"
#include "text/jinja/value.hpp"
#include "text/specials.hpp"

namespace ffn {

using namespace jinja;

struct ChatTemplate::Program {
  jinja::Body body;
};

// ---------------------------------------------------------------- ChatTemplate

ChatTemplate::ChatTemplate(const std::string& text, const std::string& name) : name_(name) {
  if (!text::valid_utf8(text)) throw Error(name + ": the template is not valid UTF-8");
  try {
    auto p = std::make_shared<Program>();
    p->body = parse_template(lex(text));
    program_ = std::move(p);
  } catch (const SyntaxError& e) {
    throw Error(name + ": line " + std::to_string(e.line) + ": " + e.msg);
  }
}

std::string ChatTemplate::render_json(const std::string& messages_json, const ChatRenderOptions& opts) const {
  nlohmann::ordered_json messages, vars;
  try {
    messages = nlohmann::ordered_json::parse(messages_json);
    if (!opts.variables_json.empty()) vars = nlohmann::ordered_json::parse(opts.variables_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(name_ + ": the messages are not valid JSON: " + std::string(e.what()));
  }
  if (!messages.is_array()) throw Error(name_ + ": the messages must be a JSON array of {\"role\", \"content\"} objects");
  for (size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw Error(name_ + ": message " + std::to_string(k) + " must be an object with a string \"role\"");
  }
  if (!vars.is_null() && !vars.is_object()) throw Error(name_ + ": the variables must be a JSON object");
  if (vars.is_object() && vars.contains("messages")) throw Error(name_ + ": the variables must not set messages");
  Interp in;
  std::string out;
  in.out = &out;
  Budget::used = 0;
  Nest::depth = 0;
  if (opts.now) in.now = *opts.now;
  else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &in.now);
  }
  try {
    Frame globals;
    globals["messages"] = from_json(messages);
    globals["add_generation_prompt"] = Value::boolean(opts.add_generation_prompt);
    globals["tools"] = Value::none();
    globals["documents"] = Value::none();
    if (opts.bos_token) globals["bos_token"] = Value::str(*opts.bos_token);
    if (opts.eos_token) globals["eos_token"] = Value::str(*opts.eos_token);
    if (vars.is_object())
      for (const auto& [k, v] : vars.items()) globals[k] = from_json(v);
    globals["raise_exception"] = Interp::make_fn("raise_exception", [](Interp&, Args& a) -> Value {
      fail("raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0])));
    });
    globals["strftime_now"] = Interp::make_fn("strftime_now", [](Interp& in, Args& a) {
      if (a.pos.size() != 1 || a.pos[0].kind != Value::Str) fail("strftime_now takes one format string");
      // datetime.now() is naive: %Z and %z are empty.
      std::string f;
      const std::string& given = a.pos[0].s;
      for (size_t k = 0; k < given.size(); ++k) {
        if (given[k] != '%') { f += given[k]; continue; }
        if (k + 1 == given.size()) fail("unsupported construct: strftime_now with a lone % at the end");
        const char c = given[++k];
        if (!std::strchr("aAbBdHIjmMpSUwWyYZz%eyFTDRrcxXuVGgCnth", c)) fail(std::string("unsupported construct: strftime_now's directive %") + c);
        if (c != 'Z' && c != 'z') { f += '%'; f += c; }
      }
      char buf[512];
      const size_t len = std::strftime(buf, sizeof buf, f.c_str(), &in.now);
      if (len == 0 && !f.empty()) fail("strftime_now: the formatted date is empty or past 512 bytes");
      return Value::str(std::string(buf, len));
    });
    globals["namespace"] = Interp::make_fn("namespace", [](Interp&, Args& a) {
      Value ns = Value::new_dict();
      ns.ns = true;
      for (const Value& p : a.pos) {
        if (p.kind != Value::Dict) fail("namespace() takes keyword arguments or a dict");
        for (const auto& [k, v] : p.dict->items) ns.dict->set(k, v);
      }
      for (const auto& [k, v] : a.kw) ns.dict->set(k, v);
      return ns;
    });
    globals["range"] = Interp::make_fn("range", [](Interp&, Args& a) {
      if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) fail("range takes 1 to 3 integer arguments");
      int64_t start = 0, stop, st = 1;
      if (a.pos.size() == 1) stop = as_int(a.pos[0], "range");
      else { start = as_int(a.pos[0], "range"); stop = as_int(a.pos[1], "range"); }
      if (a.pos.size() == 3) st = as_int(a.pos[2], "range");
      if (st == 0) fail("range() arg 3 must not be zero");
      const __int128 count = st > 0 ? (stop > start ? (__int128(stop) - start + st - 1) / st : 0)
                                    : (start > stop ? (__int128(start) - stop - st - 1) / -st : 0);
      if (count > 100000) fail("range() larger than 100000 items (the environment's limit)");
      ValueList l;
      Budget::charge(kItemCost * size_t(count));
      for (__int128 k = 0; k < count; ++k) l.push_back(Value::integer(int64_t(start + k * st)));
      Value r = Value::of_list(std::move(l));
      r.s = "range(" + std::to_string(start) + ", " + std::to_string(stop) + (st != 1 ? ", " + std::to_string(st) : "") + ")";
      return r;
    });
    globals["dict"] = Interp::make_fn("dict", [](Interp&, Args& a) {
      if (!a.pos.empty()) fail("unsupported construct: dict() with positional arguments");
      Value d = Value::new_dict();
      for (const auto& [k, v] : a.kw) d.dict->set(k, v);
      return d;
    });
    in.frames.push_back(std::move(globals));
    in.run(program_->body);
  } catch (const Fail& e) {
    throw Error(name_ + ": line " + std::to_string(in.line) + ": " + e.msg);
  } catch (const BreakSignal&) {
    throw Error(name_ + ": line " + std::to_string(in.line) + ": 'break' outside a loop");
  } catch (const ContinueSignal&) {
    throw Error(name_ + ": line " + std::to_string(in.line) + ": 'continue' outside a loop");
  }
  return out;
}

std::string chat_messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return j.dump();
}

std::string check_chat_messages(const std::string& messages_json, bool join_text_parts) {
  using ojson = nlohmann::ordered_json;
  const ojson m = ojson::parse(messages_json, nullptr, false);  // (discarded, not thrown, when invalid)
  if (m.is_discarded()) throw Error("messages: not valid JSON");
  if (!m.is_array()) throw Error("messages: expected a list of {\"role\", \"content\"} objects");
  if (m.empty()) throw Error("messages: the list is empty");
  ojson out = ojson::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const ojson& x = m[i];
    if (!x.is_object()) throw Error(at + ": expected an object with \"role\" and \"content\"");
    const auto role = x.find("role");
    if (role == x.end() || !role->is_string()) throw Error(at + ".role: expected a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      throw Error(at + ".role: expected system, developer, user, assistant or tool, got \"" + r + "\"");
    const auto content = x.find("content");
    ojson msg = x;  // other fields (name, tool_calls, tool_call_id ...) pass to the template as they are
    const bool calls = r == "assistant" && x.contains("tool_calls") && !x["tool_calls"].is_null();
    if (content == x.end() || content->is_null()) {
      if (!calls) throw Error(at + ".content: required: a string or a list of text parts");
    } else if (content->is_array()) {
      std::string text;
      for (size_t k = 0; k < content->size(); ++k) {
        const ojson& p = (*content)[k];
        if (!p.is_object() || !p.contains("type") || p["type"] != "text" || !p.contains("text") || !p["text"].is_string())
          throw Error(at + ".content[" + std::to_string(k) + "]: expected {\"type\": \"text\", \"text\": \"...\"} (text only)");
        text += (k ? "\n" : "") + p["text"].get<std::string>();
      }
      if (join_text_parts) msg["content"] = text;
    } else if (!content->is_string()) {
      throw Error(at + ".content: expected a string or a list of text parts, got " + std::string(content->type_name()));
    }
    out.push_back(std::move(msg));
  }
  try {
    return out.dump();
  } catch (const ojson::type_error&) {
    throw Error("messages: a string is not valid UTF-8");
  }
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& opts) const {
  for (const auto& m : messages)
    if (!text::valid_utf8(m.role) || !text::valid_utf8(m.content)) throw Error(name_ + ": a message is not valid UTF-8");
  return render_json(chat_messages_json(messages), opts);
}

}  // namespace ffn
