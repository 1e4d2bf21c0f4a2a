// Chat (include/ffn/chat.hpp): prompts in the model's own template, a
// conversation that keeps its cache between turns and replies token for
// token what generate() gives from scratch, stop strings, and the errors
// that leave a conversation as it was.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"
#include "ffn/chat.hpp"
#include "ffn/types.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace ffn;
using test::expect_error;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string llama_q() { return std::string(FFN_GGUF_DIR) + "/llama_q.gguf"; }

// A copy of the random LLaMA directory `name` with `tmpl` as its chat_template.jinja.
fs::path with_template(const std::string& name, const std::string& tmpl, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("ffn_chat_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(fs::path(FFN_LLAMA_DIR) / name, dir, fs::copy_options::recursive);
  std::ofstream(dir / "chat_template.jinja", std::ios::binary) << tmpl;
  return dir;
}

SamplingOptions greedy(int64_t n) {
  SamplingOptions s;
  s.max_new_tokens = n;
  return s;
}

// Each turn of a session against generate() on the whole conversation's
// prompt from scratch: the same tokens; prints the counts.
void expect_session_is_from_scratch(const CausalLM& m, const std::vector<std::string>& turns, ChatOptions o,
                                    bool append_only) {
  ChatSession chat(m, o);
  std::vector<ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  int64_t cache_after = 0, last_prompt = 0;
  for (size_t t = 0; t < turns.size(); ++t) {
    SCOPED_TRACE("turn " + std::to_string(t + 1));
    std::string streamed;
    const ChatReply r = chat.say(turns[t], greedy(6), [&](const std::string& s) { streamed += s; return true; });
    history.push_back({"user", turns[t]});
    const std::vector<int32_t> prompt = m.tokenizer()->encode(m.chat_prompt(history, o.render));
    EXPECT_EQ(r.prompt_tokens, int64_t(prompt.size()));
    EXPECT_EQ(r.ids, m.generate(prompt, greedy(6)));
    EXPECT_EQ(streamed, r.text);
    EXPECT_EQ(r.text, m.tokenizer()->decode(r.ids, true));
    std::printf("turn %zu: prompt %lld tokens, %lld kept from the cache, %lld read; %zu new\n", t + 1,
                (long long)r.prompt_tokens, (long long)r.reused_tokens, (long long)(r.prompt_tokens - r.reused_tokens),
                r.ids.size());
    if (t == 0) EXPECT_EQ(r.reused_tokens, 0);
    // Append-only templates keep at least the last prompt (and the reply's
    // tokens where its text tokenizes back to them: a random model's bytes
    // do not); a template that rewrites the start keeps less than that.
    if (append_only && t > 0) EXPECT_GE(r.reused_tokens, last_prompt);
    if (!append_only && t > 0) EXPECT_LT(r.reused_tokens, last_prompt);
    EXPECT_LE(r.reused_tokens, cache_after);
    cache_after = r.prompt_tokens + int64_t(r.ids.size()) - 1;
    last_prompt = r.prompt_tokens;
    // The reply as the conversation keeps it: its text, invalid UTF-8 (a
    // random model's bytes) replaced by U+FFFD as Python's decode does.
    EXPECT_EQ(chat.messages()[history.size()].role, "assistant");
    history.push_back(chat.messages()[history.size()]);
  }
  EXPECT_EQ(chat.messages().size(), history.size());
}

}  // namespace

TEST(Chat, SessionRepliesAreGenerateFromScratch) {
  // llama_q.gguf's context is 128 positions: two short turns.
  const std::vector<std::string> turns = {"hello there", "two plus two?"};
  for (LMCompute c : {LMCompute::native, LMCompute::fp32}) {
    SCOPED_TRACE(c == LMCompute::native ? "native" : "fp32");
    const CausalLM m = CausalLM::load(llama_q(), {c});
    ChatOptions o;
    expect_session_is_from_scratch(m, turns, o, true);
    o.system = "You are terse.";
    expect_session_is_from_scratch(m, turns, o, true);
  }
}

// A template that rewrites the start of the prompt every turn (the message
// count first): the kept prefix shrinks, the replies stay those from scratch.
TEST(Chat, ATemplateThatRewritesEarlierTurnsShrinksThePrefix) {
  const fs::path dir = with_template(
      "gqa3_tied", "{{ messages|length }} {% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:",
      "rewrite");
  const CausalLM m = CausalLM::load(dir.string());
  expect_session_is_from_scratch(m, {"one", "two", "three"}, {}, false);
  fs::remove_all(dir);
}

TEST(Chat, TheModelsTemplateWithItsTokenizersSpecials) {
  const CausalLM m = CausalLM::load(llama_q());
  const std::string bos = m.tokenizer()->token(int32_t(m.config().bos));
  const ChatTemplate t(m.chat_template());
  ChatRenderOptions o;
  o.bos_token = bos;
  o.eos_token = m.tokenizer()->token(int32_t(m.config().eos));
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}};
  EXPECT_EQ(m.chat_prompt(msgs), t.render(msgs, o));
  EXPECT_EQ(m.chat_prompt_json(chat_messages_json(msgs)), t.render(msgs, o));
  EXPECT_EQ(m.chat_prompt("hi"), t.render({{"user", "hi"}}, o));
  // A template's BOS text is the BOS id once, not the text's pieces.
  const fs::path dir = with_template("gqa3_tied", "{{ bos_token }}{{ messages[0].content }}", "bos");
  const CausalLM d = CausalLM::load(dir.string());
  if (d.config().bos >= 0) {
    const std::vector<int32_t> ids = d.tokenizer()->encode(d.chat_prompt("hi"));
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], d.config().bos);
  }
  fs::remove_all(dir);
}

TEST(Chat, StopStringsEndTheTextBeforeThem) {
  const CausalLM m = CausalLM::load(llama_q());
  const Tokenizer& tok = *m.tokenizer();
  const std::string text = "hello world, hello moon, goodbye";
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(tok.decode(ids, true), text);
  for (const auto& [stops, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{}, text},
           {{"moon"}, "hello world, hello "},
           {{"o w"}, "hell"},
           {{"bye", "lo m"}, "hello world, hel"},
           {{"absent"}, text},
           {{"goodbye!"}, text},
           {{"h"}, ""}}) {
    SCOPED_TRACE(stops.empty() ? "no stop" : stops[0]);
    TextStream s(tok, stops);
    std::string got;
    for (int32_t id : ids) {
      got += s.push(id);
      // Nothing given out is taken back: a stop string's start is held.
      EXPECT_EQ(want.compare(0, got.size(), got), 0) << "gave out " << got;
      if (s.stopped()) break;
    }
    got += s.finish();
    EXPECT_EQ(got, want);
    EXPECT_EQ(s.text(), want);
    EXPECT_EQ(s.stopped(), want != text);
  }
  expect_error([&] { TextStream(tok, {""}); }, "--stop: a stop string must not be empty");
  // In a session: the reply ends before the stop string, generation stops there.
  ChatOptions o;
  ChatSession free_run(m, o);
  const ChatReply full = free_run.say("hello", greedy(24));
  ASSERT_GE(full.text.size(), 4u) << full.text;
  o.stop = {full.text.substr(2, 2)};
  ChatSession stopped(m, o);
  const ChatReply cut = stopped.say("hello", greedy(24));
  EXPECT_TRUE(cut.stopped_by_string);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(o.stop[0])));
  EXPECT_LE(cut.ids.size(), full.ids.size());
  EXPECT_EQ(stopped.messages().back().role, "assistant");
}

// Errors come before any work and leave the conversation as it was.
TEST(Chat, ErrorsLeaveTheConversationAsItWas) {
  const CausalLM m = CausalLM::load(llama_q());
  ChatOptions o;
  o.context = 100;
  ChatSession chat(m, o);
  const ChatReply first = chat.say("hi", greedy(4));
  const size_t n = chat.messages().size();
  expect_error([&] { chat.say(std::string(400, 'x'), greedy(4)); }, "past the context of 100");
  EXPECT_EQ(chat.messages().size(), n);
  // The next turn still runs, on the kept cache.
  const ChatReply second = chat.say("ok", greedy(4));
  EXPECT_GT(second.reused_tokens, 0);
  expect_error([&] { ChatSession(m, ChatOptions{.context = 1 << 30}); }, "past the model's context");
  // The template's own refusal (Gemma 2's on a system message), with its message.
  const fs::path dir = with_template(
      "gqa3_tied",
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
      "{% for m in messages %}{{ m.content }}{% endfor %}",
      "raise");
  const CausalLM g = CausalLM::load(dir.string());
  ChatSession sys(g, ChatOptions{.system = "be brief"});
  expect_error([&] { sys.say("hi", greedy(2)); }, "System role not supported");
  EXPECT_EQ(sys.messages().size(), 1u);
  ChatSession plain(g, ChatOptions{});
  EXPECT_NO_THROW(plain.say("hi", greedy(2)));
  expect_error([&] { ChatSession(CausalLM::load((fs::path(FFN_LLAMA_DIR) / "mha_odd").string())); }, "no chat template");
  fs::remove_all(dir);
}

// apply_chat_template's keyword arguments (Qwen3's enable_thinking) reach the template.
TEST(Chat, TemplateVariablesReachTheTemplate) {
  const fs::path dir = with_template(
      "gqa3_tied", "{% if enable_thinking is defined and enable_thinking is false %}<no-think>{% endif %}{{ messages[0].content }}",
      "vars");
  const CausalLM m = CausalLM::load(dir.string());
  ChatRenderOptions o;
  EXPECT_EQ(m.chat_prompt("hi"), "hi");
  o.variables_json = R"({"enable_thinking": false})";
  EXPECT_EQ(m.chat_prompt(std::vector<ChatMessage>{{"user", "hi"}}, o), "<no-think>hi");
  o.variables_json = R"([1])";
  expect_error([&] { m.chat_prompt(std::vector<ChatMessage>{{"user", "hi"}}, o); }, "a JSON object");
  ChatOptions co;
  co.render.variables_json = R"({"enable_thinking": false})";
  ChatSession chat(m, co);
  EXPECT_EQ(chat.say("hi", greedy(2)).prompt_tokens, int64_t(m.tokenizer()->encode("<no-think>hi").size()));
  fs::remove_all(dir);
}

// A directory's template gets the tokenizer's own bos_token and eos_token
// texts, as transformers passes them (tokenizer_config.json, strings or
// AddedToken objects; special_tokens_map.json otherwise), not the texts of
// config.json's ids, where the two differ (Mistral-Nemo-Instruct-2407's
// assistant turns end in the tokenizer's eos).
TEST(Chat, TemplateGetsTheTokenizersOwnBosAndEos) {
  const std::string tmpl = "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}";
  const fs::path dir = with_template("gqa3_tied", tmpl, "eos");
  const CausalLM ids_only = CausalLM::load(dir.string());
  // Without the tokenizer's files: config.json's ids (1 <|im_start|>, 2 <|im_end|>).
  EXPECT_EQ(ids_only.chat_prompt("hi"), "<|im_start|>hi<|im_end|>");
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<|im_start|>", "lstrip": false},
                                                     "eos_token": "<|endoftext|>"})";
  EXPECT_EQ(CausalLM::load(dir.string()).chat_prompt("hi"), "<|im_start|>hi<|endoftext|>");
  fs::remove(dir / "tokenizer_config.json");
  std::ofstream(dir / "special_tokens_map.json") << R"({"eos_token": {"content": "<|endoftext|>"}})";
  EXPECT_EQ(CausalLM::load(dir.string()).chat_prompt("hi"), "<|im_start|>hi<|endoftext|>");
  fs::remove_all(dir);
}
