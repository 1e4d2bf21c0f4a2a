// Chat templates (src/text/jinja.cpp) against Python's jinja2 as
// transformers runs it: tests/data/chat/jinja_cases.json pins one construct
// per case, tests/data/chat/templates.json holds the prompts transformers'
// own compiler renders from llama.cpp's real templates (the llama-cpp-python
// sdist's models/templates, extracted by scripts/setup.sh) for one-, two- and
// five-turn conversations with and without a system message. Both files come
// from scripts/make_chat_golden.py (jinja2 3.1.4, transformers 4.46.3).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ffn/chat_template.hpp"
#include "ffn/gguf.hpp"
#include "ffn/tokenizer.hpp"
#include "ffn/types.hpp"

namespace fs = std::filesystem;
using namespace ffn;
using json = nlohmann::ordered_json;

namespace {

std::string chat_dir() { return std::string(FFN_CHAT_GOLDEN_DIR); }

std::string templates_dir() {
  if (const char* env = std::getenv("FFN_LLAMA_CPP_MODELS")) return std::string(env) + "/templates";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/ffn/llama.cpp-models/templates";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json load(const std::string& name) { return json::parse(slurp(fs::path(chat_dir()) / name)); }

// The golden files' fixed clock: 2026-11-27 12:34:56.
std::tm golden_now() {
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 10;
  t.tm_mday = 27;
  t.tm_hour = 12;
  t.tm_min = 34;
  t.tm_sec = 56;
  t.tm_wday = 5;  // a Friday
  t.tm_yday = 330;
  return t;
}

// Renders `text` with `context` as jinja2's render(**context) does: the
// messages and every other variable as given, nothing added but what
// apply_chat_template adds (tools and documents None).
std::string render_context(const std::string& text, const json& context) {
  ChatTemplate t(text, "case");
  ChatRenderOptions o;
  o.now = golden_now();
  json vars = json::object();
  for (const auto& [k, v] : context.items())
    if (k != "messages") vars[k] = v;
  if (!context.contains("add_generation_prompt")) vars["add_generation_prompt"] = nullptr;  // undefined → falsy either way
  o.variables_json = vars.dump();
  return t.render_json(context.contains("messages") ? context["messages"].dump() : "[]", o);
}

}  // namespace

TEST(ChatTemplate, EachConstructRendersAsJinja2) {
  const json cases = load("jinja_cases.json");
  int outputs = 0, errors = 0, refused = 0;
  for (const auto& c : cases["cases"]) {
    const std::string name = c["name"], text = c["template"];
    SCOPED_TRACE(name + ": " + text);
    if (c.contains("output")) {
      std::string got;
      try {
        got = render_context(text, c["context"]);
      } catch (const Error& e) {
        // Outside the subset: refused, naming the construct; never rendered differently.
        const std::string what = e.what();
        if (what.find("unsupported construct") == std::string::npos) ADD_FAILURE() << "jinja2 renders it, ffn refuses: " << what;
        else std::printf("refused: %s (%s)\n", name.c_str(), what.c_str());
        ++refused;
        continue;
      }
      EXPECT_EQ(got, c["output"].get<std::string>());
      ++outputs;
    } else {
      // jinja2 raises: ffn raises too, one line naming the template and line.
      try {
        const std::string got = render_context(text, c["context"]);
        ADD_FAILURE() << "jinja2 raises " << c["error"] << ", ffn renders: " << got;
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        EXPECT_EQ(what.rfind("case: line ", 0), 0u) << what;
      }
      ++errors;
    }
  }
  std::printf("jinja2 cases: %d rendered byte for byte, %d raised as jinja2 raises, %d refused as unsupported\n", outputs,
              errors, refused);
  EXPECT_GT(outputs, 330);
  EXPECT_LT(refused, 30);
}

// The templates of the families ffn runs must render byte for byte; every
// other real template either renders byte for byte or is refused naming an
// unsupported construct: never a different prompt.
TEST(ChatTemplate, RealTemplatesRenderAsTransformers) {
  const json golden = load("templates.json");
  if (!fs::exists(templates_dir()))
    GTEST_SKIP() << "llama.cpp's chat templates are not installed in " << templates_dir()
                 << " (scripts/setup.sh extracts them from the llama-cpp-python sdist; FFN_LLAMA_CPP_MODELS overrides)";
  const std::set<std::string> families = {
      "meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
      "meta-llama-Llama-3.3-70B-Instruct.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja",
      "google-gemma-2-2b-it.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
      "mistralai-Mistral-Nemo-Instruct-2407.jinja", "smollm2.gguf",
      "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
      "ggml-vocab-qwen2.gguf", "ggml-vocab-phi-3.gguf"};
  std::map<std::string, std::string> texts;
  for (const auto& [name, text] : golden["inline_templates"].items()) texts[name] = text.get<std::string>();
  std::map<std::string, int> matched, refused;
  std::map<std::string, std::string> why;
  std::set<std::string> seen_families;
  for (const auto& r : golden["renders"]) {
    const std::string name = r["template"];
    if (!texts.count(name))  // a .jinja file, or the template a vocabulary GGUF stores
      texts[name] = name.size() > 5 && name.substr(name.size() - 5) == ".gguf"
                        ? GgufFile((fs::path(templates_dir()).parent_path() / name).string()).get_string("tokenizer.chat_template")
                        : slurp(fs::path(templates_dir()) / name);
    const json& messages = golden["conversations"][r["conversation"].get<std::string>()];
    SCOPED_TRACE(name + " on conversation " + r["conversation"].get<std::string>());
    const bool family = families.count(name) > 0;
    if (family) seen_families.insert(name);
    ChatRenderOptions o;
    o.now = golden_now();
    if (!r["bos_token"].is_null()) o.bos_token = r["bos_token"].get<std::string>();
    if (!r["eos_token"].is_null()) o.eos_token = r["eos_token"].get<std::string>();
    std::string got, error;
    try {
      got = ChatTemplate(texts[name], name).render_json(messages.dump(), o);
    } catch (const Error& e) {
      error = e.what();
    }
    const bool unsupported = error.find("unsupported construct") != std::string::npos;
    if (r.contains("output")) {
      if (error.empty()) {
        EXPECT_EQ(got, r["output"].get<std::string>());
        matched[name] += got == r["output"].get<std::string>();
      } else {
        EXPECT_TRUE(unsupported && !family) << "transformers renders it, ffn refuses: " << error;
        refused[name] += 1;
        why[name] = error;
      }
    } else {
      // The template's own error (Gemma 2 on a system message, Mistral's
      // alternation rule): ffn raises it too, with the template's message.
      EXPECT_FALSE(error.empty()) << "transformers raises " << r["error"] << ", ffn renders: " << got;
      const std::string want = r["error"];
      const size_t colon = want.find(": ");
      if (!error.empty() && !unsupported && want.rfind("TemplateError", 0) == 0 && colon != std::string::npos) {
        EXPECT_NE(error.find(want.substr(colon + 2)), std::string::npos) << error << " against " << want;
      }
      if (unsupported) {
        EXPECT_FALSE(family) << error;
      }
      matched[name] += !error.empty() && !unsupported;
    }
  }
  EXPECT_EQ(seen_families.size(), families.size()) << "a family's template is missing from templates.json";
  int all = 0, some = 0;
  for (const auto& [name, n] : refused) std::printf("refused on %d renders: %s\n", n, why[name].c_str());
  for (const auto& [name, text] : texts) (refused.count(name) ? some : all) += 1;
  std::printf("real templates: %d render every conversation as transformers does, %d are refused on some\n", all, some);
  EXPECT_GE(all, 73);
}

// With tools passed (apply_chat_template(tools=[...])): the three templates
// that mark their tool JSON |safe (Nemotron-3-Nano, Qwen3-Coder,
// functionary-v3.1, issue 62) render byte for byte, functionary's
// markupsafe escaping included (Markup + str escapes the str: transformers
// writes its tool JSON as &#34;...). Every other template renders byte for
// byte, raises as transformers raises, or is refused naming the construct.
TEST(ChatTemplate, RealTemplatesRenderToolsAsTransformers) {
  const json golden = load("templates.json");
  if (!fs::exists(templates_dir()))
    GTEST_SKIP() << "llama.cpp's chat templates are not installed in " << templates_dir()
                 << " (scripts/setup.sh extracts them from the llama-cpp-python sdist; FFN_LLAMA_CPP_MODELS overrides)";
  const std::set<std::string> must = {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "Qwen3-Coder.jinja",
                                      "meetkai-functionary-medium-v3.1.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                      "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja"};
  std::map<std::string, std::string> texts;
  for (const auto& [name, text] : golden["inline_templates"].items()) texts[name] = text.get<std::string>();
  const std::string messages = golden["tool_conversation"].dump();
  int same = 0, raised = 0, refused = 0;
  std::set<std::string> seen;
  for (const auto& r : golden["tool_renders"]) {
    const std::string name = r["template"];
    if (!texts.count(name))
      texts[name] = name.size() > 5 && name.substr(name.size() - 5) == ".gguf"
                        ? GgufFile((fs::path(templates_dir()).parent_path() / name).string()).get_string("tokenizer.chat_template")
                        : slurp(fs::path(templates_dir()) / name);
    SCOPED_TRACE(name + " with tools");
    if (must.count(name)) seen.insert(name);
    ChatRenderOptions o;
    o.now = golden_now();
    if (!r["bos_token"].is_null()) o.bos_token = r["bos_token"].get<std::string>();
    if (!r["eos_token"].is_null()) o.eos_token = r["eos_token"].get<std::string>();
    o.variables_json = json{{"tools", r["tools"]}}.dump();
    std::string got, error;
    try {
      got = ChatTemplate(texts[name], name).render_json(messages, o);
    } catch (const Error& e) {
      error = e.what();
    }
    const bool unsupported = error.find("unsupported construct") != std::string::npos;
    if (r.contains("output")) {
      if (error.empty()) {
        EXPECT_EQ(got, r["output"].get<std::string>());
        same += got == r["output"].get<std::string>();
      } else {
        EXPECT_TRUE(unsupported && !must.count(name)) << "transformers renders it, ffn refuses: " << error;
        std::printf("refused with tools: %s\n", error.c_str());
        ++refused;
      }
    } else {
      EXPECT_FALSE(error.empty()) << "transformers raises " << r["error"] << ", ffn renders: " << got;
      EXPECT_FALSE(must.count(name)) << "transformers raises " << r["error"];
      raised += !error.empty() && !unsupported;
      refused += unsupported;
    }
  }
  EXPECT_EQ(seen.size(), must.size()) << "a template is missing from templates.json's tool_renders";
  std::printf("with tools: %d templates render as transformers does, %d raise as it raises, %d are refused\n", same,
              raised, refused);
}

TEST(ChatTemplate, HostileTemplatesGetOneLineEach) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% if x %}never closed", "unexpected end of template"},
      {"{{ x ", "is not closed"},
      {"{# comment", "missing end of comment"},
      {"{% for x in y %}{% endif %}", "unexpected {% endif %}; expected {% endfor or else %}"},
      {"{% endfor %}", "unexpected {% endfor %}"},
      {"{% frobnicate %}", "unknown tag 'frobnicate'"},
      {"{{ 'unterminated }}", "string is not closed"},
      {"{% include 'x.jinja' %}", "unsupported construct: {% include %}"},
      {"{% extends 'base' %}", "unsupported construct"},
      {"{% call m() %}{% endcall %}", "unsupported construct"},
      {"{{ x | frobnicate }}", "unsupported construct: the filter frobnicate"},
      {"{{ x is frobnicated }}", "unsupported construct: the test frobnicated"},
      {"{{ '{:>5}'.format(1) }}", "unsupported construct: str.format with a format spec"},
      {"{{ 'a'.format_map({}) }}", "unsupported construct: the string method format_map()"},
      {"{{ {1.5: 'x'} }}", "unsupported construct: a dict key of type float"},
      {"{{ {[1]: 'x'} }}", "unhashable type: 'list'"},
      {"{{ messages.append(1) }}", "unsupported construct"},
      {"{% for i in range(100000) %}{{ i }}{{ i }}{{ i }}{{ i }}{{ i }}{{ i }}{{ i }}{{ i }}{{ i }}{{ i }}{% endfor %}",
       "a million steps"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "256 Mi units of work"},
      {"{% set ns = namespace(a=[]) %}{% for i in range(1000) %}{% set ns.a = ns.a + [range(100000)|list] %}{% endfor %}",
       "256 Mi units of work"},
      {"{{ (range(100000)|list + range(100000)|list)|unique|list|length }}", "256 Mi units of work"},
      {"{{ 1" + [] { std::string s; for (int i = 0; i < 5000; ++i) s += "+1"; return s; }() + " }}", "200 deep"},
      {"{{ 1" + [] { std::string s; for (int i = 0; i < 5000; ++i) s += "|abs"; return s; }() + " }}", "200 deep"},
      {"{% set ns = namespace(s='x') %}{% for i in range(100000) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "16 MiB"},
      {"{{ 'x' * 100000000 }}", "16 MiB"},
      {"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "100 deep"},
      {"{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "200 deep"},
      {"{{ " + std::string(300, '[') + std::string(300, ']') + " }}", "200 deep"},
      {"{{ undefined_thing.attr }}", "'undefined_thing' is undefined"},
      {"{{ 'a' + 1 }}", "unsupported operand type(s) for +: 'str' and 'int'"},
      {"{{ 1 // 0 }}", "division or modulo by zero"},
      {"{{ raise_exception('no system role') }}", "raise_exception: no system role"},
      {"{{ 99999999999999999999 }}", "past 64 bits"},
      {"{{ 9223372036854775807 + 1 }}", "past 64 bits"},
      {"{% break %}", "'break' outside a loop"},
      {"{{ \"\\x4\" }}", "truncated escape"},
      {std::string("{{ '\xff' }}"), "not valid UTF-8"},
      {"{{ strftime_now('%Q') }}", "unsupported construct: strftime_now's directive %Q"},
  };
  for (const auto& [text, want] : cases) {
    SCOPED_TRACE(text.substr(0, 120));
    try {
      const std::string got = ChatTemplate(text, "hostile.jinja").render_json("[{\"role\": \"user\", \"content\": \"hi\"}]");
      ADD_FAILURE() << "rendered: " << got.substr(0, 200);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(want), std::string::npos) << what;
      EXPECT_EQ(what.rfind("hostile.jinja: ", 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  // Hostile messages: bad JSON, not an array, no role, invalid UTF-8.
  const ChatTemplate t("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", "ok.jinja");
  for (const auto& [messages, want] : std::vector<std::pair<std::string, std::string>>{
           {"[{\"role\": \"user\"", "not valid JSON"},
           {"{\"role\": \"user\"}", "must be a JSON array"},
           {"[{\"content\": \"hi\"}]", "string \"role\""},
           {"[{\"role\": \"user\", \"content\": \"\xc3\x28\"}]", "UTF-8"}}) {
    try {
      t.render_json(messages);
      ADD_FAILURE() << "rendered " << messages;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(t.render({{"user", "\xff"}}), Error);
  EXPECT_EQ(t.render({{"user", "hi"}, {"assistant", "hello"}}), "user: hi\nassistant: hello\n");
}

// A rendered prompt through the family's real tokenizer (llama.cpp's
// vocabularies): each special token the template writes is its one id, as
// many times as the text holds it (never split into pieces of text).
TEST(ChatTemplate, PromptsTokenizeToTheVocabularysSpecialIds) {
  const fs::path models = fs::path(templates_dir()).parent_path();
  if (!fs::exists(models / "ggml-vocab-qwen2.gguf"))
    GTEST_SKIP() << "llama.cpp's vocabularies are not installed in " << models << " (scripts/setup.sh extracts them)";
  const json golden = load("templates.json");
  const json& conv = golden["conversations"]["five_sys"];
  struct Case {
    std::string vocab, tmpl;
    std::vector<std::string> specials;
  };
  const std::vector<Case> cases = {
      {"ggml-vocab-qwen2.gguf", "", {"<|im_start|>", "<|im_end|>"}},
      {"ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja", {"<|im_start|>", "<|im_end|>"}},
      {"ggml-vocab-llama-bpe.gguf", "meta-llama-Llama-3.1-8B-Instruct.jinja",
       {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}},
      {"ggml-vocab-phi-3.gguf", "", {"<|user|>", "<|assistant|>", "<|end|>"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.vocab + " " + c.tmpl);
    const GgufFile f((models / c.vocab).string());
    std::unique_ptr<Tokenizer> tok;
    try {
      tok = Tokenizer::from_gguf(f);
    } catch (const Error& e) {
      std::printf("[ SKIPPED  ] %s: %s\n", c.vocab.c_str(), e.what());  // SentencePiece not built
      continue;
    }
    const std::string text = c.tmpl.empty() ? f.get_string("tokenizer.chat_template") : slurp(fs::path(templates_dir()) / c.tmpl);
    ChatRenderOptions o;
    o.now = golden_now();
    o.bos_token = tok->token(int32_t(f.get_uint("tokenizer.ggml.bos_token_id")));
    o.eos_token = tok->token(int32_t(f.get_uint("tokenizer.ggml.eos_token_id")));
    const std::string prompt = ChatTemplate(text, c.vocab).render_json(conv.dump(), o);
    const std::vector<int32_t> ids = tok->encode(prompt);
    for (const auto& sp : c.specials) {
      const int32_t id = tok->id_of(sp);
      ASSERT_GE(id, 0) << sp;
      size_t in_text = 0;
      for (size_t at = prompt.find(sp); at != std::string::npos; at = prompt.find(sp, at + sp.size())) ++in_text;
      EXPECT_GT(in_text, 0u) << sp;
      EXPECT_EQ(size_t(std::count(ids.begin(), ids.end(), id)), in_text) << sp;
    }
    // The text between them comes back as it was written.
    const std::string last = conv.back()["content"];
    EXPECT_NE(tok->decode(ids, false).find(last), std::string::npos) << last;
  }
}
