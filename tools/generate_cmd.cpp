// ffn generate and ffn tokenize: a LLaMA-architecture model (include/ffn/causal_lm.hpp)
// from a GGUF file or a Hugging Face directory.
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include "commands.hpp"
#include "ffn/causal_lm.hpp"
#include "ffn/chat.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "ffn/io.hpp"

#include <nlohmann/json.hpp>

namespace ffn::cli {
namespace {

// Load progress on a terminal (stderr), once a load has taken a second:
// "ffn: loading NAME  45 %", cleared when it is done.
std::function<void(double)> load_progress(const std::string& path) {
  if (!::isatty(2)) return {};
  const auto start = std::chrono::steady_clock::now();
  auto shown = std::make_shared<int>(-1);  // the percentage on the line, -1: none yet
  const std::string name = std::filesystem::path(path).filename().string();
  return [start, shown, name](double share) {
    if (share >= 1.0) {
      if (*shown >= 0) std::fprintf(stderr, "\r%*s\r", int(name.size()) + 24, "");
      return;
    }
    const int percent = int(share * 100);
    if (percent == *shown || std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) return;
    *shown = percent;
    std::fprintf(stderr, "\rffn: loading %s %3d %%", name.c_str(), percent);
  };
}

void check_utf8(const std::string& text, const std::string& flag);

// The model generate and chat use when --model is not given: the SmolLM2
// scripts/setup.sh installs (FFN_SMOLLM2_GGUF moves it, as in setup).
std::string default_lm_path() {
  if (const char* e = std::getenv("FFN_SMOLLM2_GGUF"); e && *e) return e;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string model_or_default(const std::string& given) {
  if (!given.empty()) return given;
  const std::string path = default_lm_path();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error("--model: not given, and the model scripts/setup.sh installs is not at " + path +
                " (run scripts/setup.sh, or give --model FILE.gguf or DIR)");
  return path;
}

// Backslash escapes in --stop, --system and --chat, as llama.cpp's
// (string_process_escapes): \n \t \r \\ \' \" and \uXXXX (a UTF-16
// surrogate pair makes one character); another backslash stays as written.
// Bash passes "\n\n" as a backslash and an n; --no-escape keeps them so.
std::string unescape(const std::string& s, const std::string& flag) {
  // The four hex digits at `at`, or -1 (then the backslash stays as written, as llama.cpp's rule for unknown escapes).
  auto hex4 = [&](size_t at) -> int64_t {
    if (at + 4 > s.size()) return -1;
    int64_t v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      const char c = s[k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  };
  const std::string keep = " (--no-escape takes it as written)";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) { out += s[i]; continue; }
    const char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'u': {
        const int64_t v = hex4(i + 1);
        if (v < 0) { out += '\\', out += c; break; }
        uint32_t cp = uint32_t(v);
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
          const int64_t lo = i + 2 < s.size() && s[i + 1] == '\\' && s[i + 2] == 'u' ? hex4(i + 3) : -1;
          if (lo < 0xDC00 || lo > 0xDFFF)
            throw Error(flag + ": \\u" + s.substr(i - 3, 4) + " is half of a UTF-16 pair without its second half" + keep);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (uint32_t(lo) - 0xDC00);
          i += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          throw Error(flag + ": \\u" + s.substr(i - 3, 4) + " is half of a UTF-16 pair without its first half" + keep);
        }
        if (cp < 0x80) out += char(cp);
        else if (cp < 0x800) out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
        else if (cp < 0x10000) out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
        else out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
        break;
      }
      default: out += '\\', out += c;
    }
  }
  return out;
}

// --seed: 0..2^64-1, or -1 for a random seed, said on standard error so that the run can be repeated.
uint64_t parse_seed(const std::string& text) {
  if (text == "-1") {
    std::random_device rd;
    const uint64_t seed = (uint64_t(rd()) << 32 | rd()) >> 1;  // < 2^63: the same in every binding
    std::fprintf(stderr, "ffn: --seed -1: seed %llu (give --seed %llu to repeat the run)\n", (unsigned long long)seed,
                 (unsigned long long)seed);
    return seed;
  }
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw Error("--seed: expected -1 (a random seed, printed) or 0.." + std::to_string(UINT64_MAX) + ", got " + text);
  return v;
}

// --chat-template FILE: its text, checked (UTF-8, parsed) before the model loads.
std::optional<std::string> chat_template_file(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("--chat-template " + path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  check_utf8(text, "--chat-template " + path);
  (void)ChatTemplate(text, "--chat-template " + path);  // a syntax error names the file and line
  return text;
}

// --show-prompt: the prompt text as it is, then its ids.
int show_prompt(const std::string& text, const std::vector<int32_t>& ids) {
  std::cout << text << "\n--- ids (" << ids.size() << " tokens):\n";
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << '\n';
  std::cout.flush();
  if (!std::cout) throw Error("standard output: write error");
  return 0;
}

struct GenerateArgs {
  std::string model, prompt, prompt_file, chat, messages, system, compute = "native", logits, dtype = "fp32";
  std::string seed = "0", chat_template;
  bool ids = false, chat_given = false, system_given = false, no_escape = false, show_prompt = false;
  std::vector<std::string> stop, template_var;
  SamplingOptions s;
  int threads = 0;
};

std::vector<int32_t> parse_ids(const std::string& text, const std::string& where, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t v : parse_token_ids(text, where)) {
    if (v >= vocab)
      throw Error(where + ": token id " + std::to_string(v) + " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
    ids.push_back(int32_t(v));
  }
  return ids;
}

std::string read_all(const std::string& path, const std::string& flag) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(flag + " " + path + ": cannot open");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

LMCompute parse_lm_compute(const std::string& compute) {
  if (compute == "fp32") return LMCompute::fp32;
  if (compute == "native") return LMCompute::native;
  throw Error("--compute: expected native or fp32, got " + compute);
}

// A --messages file checked before the model loads (include/ffn/chat_template.hpp: check_chat_messages).
void check_messages(const std::string& text, const std::string& where) {
  try {
    (void)check_chat_messages(text);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

void check_utf8(const std::string& text, const std::string& flag) {
  try {
    (void)nlohmann::json(text).dump();  // dump() refuses a string that is not UTF-8
  } catch (const nlohmann::json::type_error&) {
    throw Error(flag + ": not valid UTF-8");
  }
}

// --template-var KEY=JSON (repeatable) as one JSON object of the template's extra variables.
std::string template_vars(const std::vector<std::string>& vars) {
  if (vars.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string& v = vars[i];
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("--template-var: expected KEY=VALUE (VALUE in JSON: true, 3, \"text\"), got '" + v + "'");
    const std::string key = v.substr(0, eq), value = v.substr(eq + 1);
    for (char c : key)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
        throw Error("--template-var: the name '" + key + "' is not an identifier");
    if (key == "messages" || key == "add_generation_prompt")
      throw Error("--template-var: " + key + " is set by ffn, not by a variable");
    if (!nlohmann::json::accept(value))
      throw Error("--template-var " + key + ": the VALUE is not one JSON value (strings need quotes: " + key +
                  "='\"text\"'), got '" + value + "'");
    out += (i ? ", \"" : "\"") + key + "\": " + value;
  }
  return out + "}";
}

void check_stops(const std::vector<std::string>& stop) {
  for (const auto& s : stop)
    if (s.empty()) throw Error("--stop: a stop string must not be empty");
}

CausalLM load_lm(const std::string& model, LMCompute compute, const std::string& dtype) {
  CausalLMLoadOptions lo;
  lo.compute = compute;
  lo.ffn_dtype = parse_weight_dtype(dtype, "--dtype");
  if (lo.ffn_dtype == WeightDtype::fp16) throw Error("--dtype: expected fp32, int8 or bf16, got fp16");
  std::error_code ec;
  if (lo.ffn_dtype != WeightDtype::fp32 && compute == LMCompute::native && !std::filesystem::is_directory(model, ec))
    throw Error("--dtype " + dtype + ": for Hugging Face checkpoints, or a GGUF with --compute fp32 (native compute "
                "keeps the file's own quantized blocks)");
  lo.on_progress = load_progress(model);
  return CausalLM::load(model, lo);
}

int cmd_generate(GenerateArgs& a, const Common& c) {
  a.model = model_or_default(a.model);
  const int given = int(!a.prompt.empty()) + int(!a.prompt_file.empty()) + int(a.chat_given) + int(!a.messages.empty());
  if (given != 1) throw Error("give exactly one of PROMPT, --prompt-file F, --chat MESSAGE or --messages FILE.json");
  if (a.chat_given && a.ids) throw Error("--chat: not with --ids (the chat template is text)");
  if (!a.messages.empty() && a.ids) throw Error("--messages: not with --ids (the chat template is text)");
  if (a.system_given && !a.chat_given)
    throw Error("--system: only with --chat (a --messages file holds its own system message)");
  if (!a.stop.empty() && a.ids) throw Error("--stop: not with --ids (stop strings end the text)");
  if (!a.template_var.empty() && !a.chat_given && a.messages.empty())
    throw Error("--template-var: only with --chat or --messages");
  if (!a.chat_template.empty() && !a.chat_given && a.messages.empty())
    throw Error("--chat-template: only with --chat or --messages");
  if (a.show_prompt && !a.logits.empty()) throw Error("--show-prompt: not with --logits (it prints the prompt and exits)");
  if (!a.no_escape) {
    for (auto& stop : a.stop) stop = unescape(stop, "--stop");
    if (a.chat_given) a.chat = unescape(a.chat, "--chat");
    if (a.system_given) a.system = unescape(a.system, "--system");
  }
  check_stops(a.stop);
  ChatRenderOptions render;
  render.variables_json = template_vars(a.template_var);
  render.chat_template = chat_template_file(a.chat_template);
  if (render.chat_template) render.chat_template_name = "--chat-template " + a.chat_template;
  const LMCompute compute = parse_lm_compute(a.compute);
  a.s.validate();
  const int threads = threads_or_throw(a.threads);
  a.s.seed = a.show_prompt && a.seed == "-1" ? 0 : parse_seed(a.seed);
  if (!a.logits.empty()) {
    if (a.s.max_new_tokens != 0) throw Error("--logits: only with --max-new-tokens 0 (the prompt's logits)");
    io::check_writable_target(a.logits);
    if (!a.prompt_file.empty() && a.prompt_file != "-") check_not_an_input(a.logits, "--logits", {{"--prompt-file", a.prompt_file}});
    check_not_an_input(a.logits, "--logits", {{"--model", a.model}});
  }
  const std::string text = !a.prompt_file.empty() ? read_all(a.prompt_file, "--prompt-file")
                           : !a.messages.empty()   ? read_all(a.messages, "--messages")
                           : a.chat_given          ? a.chat
                                                   : a.prompt;
  if (!a.messages.empty()) check_messages(text, "--messages " + a.messages);
  if (a.chat_given) check_utf8(a.chat, "--chat");
  if (a.system_given) check_utf8(a.system, "--system");
  for (const auto& stop : a.stop) check_utf8(stop, "--stop");
  const CausalLM m = load_lm(a.model, compute, a.dtype);
  const Tokenizer* tok = m.tokenizer();
  if (!a.ids && !tok) throw Error(a.model + ": no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json); give token ids with --ids");
  const std::string where = !a.prompt_file.empty() ? "--prompt-file " + a.prompt_file
                            : !a.messages.empty()   ? "--messages " + a.messages
                            : a.chat_given          ? "--chat"
                                                    : "PROMPT";
  std::vector<int32_t> prompt;
  std::string shown = text;  // the prompt's text, as --show-prompt prints it
  if (a.ids) {
    prompt = parse_ids(text, where, m.config().vocab);
  } else if (a.chat_given) {
    std::vector<ChatMessage> msgs;
    if (a.system_given) msgs.push_back({"system", a.system});
    msgs.push_back({"user", text});
    shown = m.chat_prompt(msgs, render);
    prompt = tok->encode(shown);
  } else if (!a.messages.empty()) {
    try {
      shown = m.chat_prompt_json(text, render);
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    prompt = tok->encode(shown);
  } else {
    prompt = m.encode_prompt(text);
  }
  if (a.show_prompt) return show_prompt(shown, prompt);
  if (prompt.empty()) throw Error(where + ": the prompt has no tokens");
  RunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  if (!a.logits.empty()) {
    Array out;
    out.shape = {int64_t(prompt.size()), m.config().vocab};
    out.data = m.logits(prompt, ro);
    write_npy(a.logits, out);
    return 0;
  }
  std::vector<int32_t> made;
  std::optional<TextStream> stream;  // the text as it becomes final (include/ffn/chat.hpp), cut at a stop string
  if (!a.ids) stream.emplace(*tok, a.stop);
  auto on_token = [&](int32_t id) {
    made.push_back(id);
    if (!stream) return true;
    const std::string piece = stream->push(id);
    std::cout.write(piece.data(), std::streamsize(piece.size()));
    std::cout.flush();
    return !stream->stopped();
  };
  m.generate(prompt, a.s, on_token, ro);
  if (a.ids) {
    for (size_t i = 0; i < made.size(); ++i) std::cout << (i ? " " : "") << made[i];
    std::cout << '\n';
  } else {
    std::cout << stream->finish() << '\n';
  }
  std::cout.flush();
  if (!std::cout) throw Error("standard output: write error");
  return 0;
}

struct ChatArgs {
  std::string model, system, compute = "native", dtype = "fp32", seed = "0", chat_template;
  std::vector<std::string> stop, template_var;
  SamplingOptions s;
  int64_t context = 0;
  int threads = 0;
  bool no_escape = false, show_prompt = false, context_shift = false, json = false;
};

// The next user message from standard input: one line, or several joined
// with newlines: lines that end in a backslash continue on the next, a line
// starting with """ opens a block that a line ending in """ closes (as
// Ollama), and text pasted at a terminal in bracketed-paste mode (ESC[200~
// ... ESC[201~, which ffn chat turns on there) is one message up to the
// Enter after it. Blank and whitespace-only messages are skipped. line
// counts the lines read; first_line is the message's first. nullopt at the end.
struct InputMessage {
  std::string text;
  int64_t first_line = 0;
};

std::optional<InputMessage> read_message(std::istream& in, int64_t& line, bool prompt) {
  static const std::string paste_start = "\x1b[200~", paste_end = "\x1b[201~";
  bool pasting = false;  // between the paste markers: the lines belong to the message being read
  auto next_line = [&](std::string& l) {
    if (!std::getline(in, l)) return false;
    ++line;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    for (size_t at = 0; at < l.size();) {  // the markers go; they only say where a paste starts and ends
      if (l.compare(at, paste_start.size(), paste_start) == 0) pasting = true, l.erase(at, paste_start.size());
      else if (l.compare(at, paste_end.size(), paste_end) == 0) pasting = false, l.erase(at, paste_end.size());
      else ++at;
    }
    return true;
  };
  auto more = [&](std::string& text) {  // the rest of a paste begun on the line just read
    for (std::string l; pasting && next_line(l);) text += "\n" + l;
  };
  for (std::string l;;) {
    if (prompt) std::cout << "> " << std::flush;
    if (!next_line(l)) return std::nullopt;
    InputMessage m;
    m.first_line = line;
    if (l.rfind("\"\"\"", 0) == 0) {
      std::string body = l.substr(3);
      bool closed = body.size() >= 3 && body.compare(body.size() - 3, 3, "\"\"\"") == 0;
      if (closed) body.resize(body.size() - 3);
      while (!closed) {
        if (prompt) std::cout << ". " << std::flush;
        if (!next_line(l)) throw Error("standard input: line " + std::to_string(m.first_line) + ": a \"\"\" block is not closed");
        closed = l.size() >= 3 && l.compare(l.size() - 3, 3, "\"\"\"") == 0;
        if (closed) l.resize(l.size() - 3);
        body += "\n" + l;
      }
      m.text = body;
    } else {
      m.text = l;
      more(m.text);
      while (!m.text.empty() && m.text.back() == '\\') {
        m.text.back() = '\n';
        if (prompt) std::cout << ". " << std::flush;
        if (!next_line(l)) break;
        m.text += l;
        more(m.text);
      }
    }
    if (m.text.find_first_not_of(" \t\n\r\f\v") == std::string::npos) continue;  // nothing to say
    return m;
  }
}

bool valid_utf8_text(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// Each message of standard input (read_message) is a user message; the reply
// streams to standard output, then a newline (--json: one JSON object a
// turn). Each turn's counts go to standard error.
int cmd_chat(ChatArgs& a, const Common& c) {
  a.model = model_or_default(a.model);
  if (!a.no_escape) {
    for (auto& stop : a.stop) stop = unescape(stop, "--stop");
    a.system = unescape(a.system, "--system");
  }
  check_stops(a.stop);
  (void)template_vars(a.template_var);  // checked before the model loads
  check_utf8(a.system, "--system");
  if (a.context < 0) throw Error("--context: expected a positive number of positions, got " + std::to_string(a.context));
  a.s.validate();
  if (a.s.beams != 1) throw Error("--beams: not in ffn chat (greedy or sampling)");
  a.s.seed = a.show_prompt && a.seed == "-1" ? 0 : parse_seed(a.seed);
  const LMCompute compute = parse_lm_compute(a.compute);
  const int threads = threads_or_throw(a.threads);
  ChatOptions o;
  o.system = a.system;
  o.stop = a.stop;
  o.context = a.context;
  o.context_shift = a.context_shift;
  o.render.variables_json = template_vars(a.template_var);
  o.render.chat_template = chat_template_file(a.chat_template);
  if (o.render.chat_template) o.render.chat_template_name = "--chat-template " + a.chat_template;
  const CausalLM m = load_lm(a.model, compute, a.dtype);
  if (!m.tokenizer()) throw Error(a.model + ": no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json)");
  if (m.chat_template().empty() && !o.render.chat_template)
    throw Error(a.model + ": the model has no chat template (give one with --chat-template FILE; ffn generate takes plain prompts)");
  const bool terminal = ::isatty(0) && ::isatty(1);
  int64_t line = 0;
  if (a.show_prompt) {  // the first turn's prompt: the system message and the first message of standard input
    const std::optional<InputMessage> first = read_message(std::cin, line, terminal);
    if (!first) throw Error("--show-prompt: standard input has no message (it shows the first turn's prompt)");
    if (!valid_utf8_text(first->text)) throw Error("standard input: line " + std::to_string(first->first_line) + ": not valid UTF-8");
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", first->text});
    const std::string text = m.chat_prompt(msgs, o.render);
    return show_prompt(text, m.tokenizer()->encode(text));
  }
  ChatSession chat(m, o);
  RunOptions ro;
  ro.threads = threads;
  ro.isa = c.isa;
  int turn = 0;
  // Bracketed paste at a terminal: a pasted paragraph is one message (read_message), not a turn a line.
  // Ctrl-C (SIGINT) and SIGTERM turn the mode off before the default action, so the terminal is left as found.
  struct PasteMode {
    bool on;
    static void off_then_default(int sig) {
      static const char off[] = "\x1b[?2004l";
      (void)!::write(1, off, sizeof off - 1);
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
    explicit PasteMode(bool t) : on(t) {
      if (!on) return;
      std::signal(SIGINT, off_then_default);
      std::signal(SIGTERM, off_then_default);
      std::fputs("\x1b[?2004h", stdout), std::fflush(stdout);
    }
    ~PasteMode() {
      if (!on) return;
      std::fputs("\x1b[?2004l", stdout), std::fflush(stdout);
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
    }
  } paste(terminal && !a.json);
  while (const std::optional<InputMessage> msg = read_message(std::cin, line, terminal && !a.json)) {
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> first;  // when the first new token came: the prompt's end
    ChatReply r;
    try {
      if (!valid_utf8_text(msg->text)) throw Error("standard input: line " + std::to_string(msg->first_line) + ": not valid UTF-8");
      r = chat.say(msg->text, a.s, [&](const std::string& piece) {
        if (a.json) return true;
        std::cout.write(piece.data(), std::streamsize(piece.size()));
        std::cout.flush();
        return bool(std::cout);
      }, ro, [&](int32_t) {
        if (!first) first = std::chrono::steady_clock::now();
        return true;
      });
    } catch (const Error& e) {
      // At a terminal the conversation goes on (the turn left it as it was); a script gets exit 2.
      if (!terminal) throw;
      std::fprintf(stderr, "ffn: error: %s\n", e.what());
      continue;
    }
    ++turn;
    const auto t1 = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    // Reading the prompt ends with the first new token; the rate is of the tokens after it.
    const double prompt_secs = std::chrono::duration<double>(first.value_or(t1) - t0).count();
    const double gen_secs = std::chrono::duration<double>(t1 - first.value_or(t1)).count();
    const double rate = r.ids.size() > 1 && gen_secs > 0 ? double(r.ids.size() - 1) / gen_secs : 0.0;
    if (r.dropped_messages > 0)
      std::fprintf(stderr, "[turn %d: --context-shift dropped the oldest %lld messages to fit the context of %lld]\n", turn,
                   (long long)r.dropped_messages, (long long)chat.context());
    if (a.json) {
      nlohmann::ordered_json j;
      j["turn"] = turn;
      j["reply"] = r.text;
      j["finish_reason"] = r.finish_reason;
      j["prompt_tokens"] = r.prompt_tokens;
      j["reused_tokens"] = r.reused_tokens;
      j["new_tokens"] = r.ids.size();
      j["dropped_messages"] = r.dropped_messages;
      j["seconds"] = secs;
      j["prompt_seconds"] = prompt_secs;
      j["tokens_per_second"] = rate;
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n' << std::flush;
    } else {
      std::cout << '\n' << std::flush;
    }
    if (!std::cout) throw Error("standard output: write error");
    std::fprintf(stderr,
                 "[turn %d: prompt %lld tokens, %lld kept from the cache, %lld read in %.2f s; %zu new tokens, %.1f "
                 "tokens/s; finish: %s; %.2f s]\n",
                 turn, (long long)r.prompt_tokens, (long long)r.reused_tokens, (long long)(r.prompt_tokens - r.reused_tokens),
                 prompt_secs, r.ids.size(), rate, r.finish_reason.c_str(), secs);
  }
  return 0;
}

struct TokenizeArgs {
  std::string model, text, input_file, output;
  bool text_given = false;
};

int cmd_tokenize(const TokenizeArgs& a) {
  if (int(a.text_given) + int(!a.input_file.empty()) != 1) throw Error("give exactly one of TEXT or --input-file F");
  if (!a.output.empty()) {
    io::check_writable_target(a.output);
    if (!a.input_file.empty() && a.input_file != "-") check_not_an_input(a.output, "--output", {{"--input-file", a.input_file}});
  }
  // Only the tokenizer is needed: tokenizer.json alone, or a GGUF's metadata.
  std::unique_ptr<Tokenizer> tok;
  std::error_code ec;
  if (std::filesystem::is_directory(a.model, ec)) {
    const std::string p = a.model + "/tokenizer.json";
    if (!std::filesystem::exists(p, ec)) throw Error(p + ": missing (ffn tokenize reads a directory's tokenizer.json)");
    tok = std::make_unique<BpeTokenizer>(BpeTokenizer::from_json(p));
  } else {
    const GgufFile f(a.model);
    tok = Tokenizer::from_gguf(f);
  }
  std::vector<std::string> lines;
  if (a.text_given) lines.push_back(a.text);
  else lines = a.input_file == "-" ? read_stdin_lines(std::numeric_limits<int64_t>::max()) : read_lines(a.input_file);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(lines[i]);
    } catch (const Error& e) {
      throw Error((a.text_given ? std::string("TEXT") : "--input-file " + a.input_file + ": line " + std::to_string(i + 1)) +
                  ": " + e.what());
    }
    for (size_t k = 0; k < ids.size(); ++k) out += (k ? " " : "") + std::to_string(ids[k]);
    out += '\n';
  }
  if (a.output.empty()) {
    std::cout << out;
    std::cout.flush();
    if (!std::cout) throw Error("standard output: write error");
  } else {
    io::write_file_atomic(a.output, [&](std::FILE* f) { io::write_all(f, out.data(), out.size(), a.output); });
  }
  return 0;
}

}  // namespace

int bench_generate(const std::string& model, const std::string& compute, int64_t prompt_tokens, int64_t new_tokens, int threads, int repeats,
                   int warmup, bool json, bool yes, Isa isa) {
  if (prompt_tokens < 1) throw Error("--prompt-tokens: expected a positive integer, got " + std::to_string(prompt_tokens));
  if (new_tokens < 0) throw Error("--new-tokens: expected 0 or more, got " + std::to_string(new_tokens));
  CausalLMLoadOptions lo;
  lo.compute = parse_lm_compute(compute);
  if (!json) lo.on_progress = load_progress(model);
  // The read bandwidth, measured before the model loads on a buffer the size
  // of its checkpoint (a GGUF's bytes are its weights in their stored types):
  // the working set a generation step reads, without holding it twice (after
  // the load it doubled the bench's peak: 1.75 GB against generate's 0.85 GB
  // on a 1B Q4_K_M).
  std::error_code ec;
  int64_t checkpoint = 0;
  if (std::filesystem::is_directory(model, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(model, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") checkpoint += int64_t(e.file_size(ec));
  } else {
    checkpoint = int64_t(std::filesystem::file_size(model, ec));
    if (ec) checkpoint = 0;  // the load names what is wrong with the path
  }
  const double bw = measure_read_bandwidth(std::max<int64_t>(checkpoint, int64_t(64) << 20), threads);
  const CausalLM m = CausalLM::load(model, lo);
  // A fixed pseudo-random prompt (no EOS), as llama-bench uses random tokens.
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (auto& t : prompt) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    t = int32_t(r % uint64_t(m.config().vocab));
    if (t == m.config().eos) t = 0;
  }
  RunOptions ro;
  ro.threads = threads;
  ro.isa = isa;
  const int64_t V = m.config().vocab;
  std::vector<double> pp, tg;
  std::vector<float> lg(static_cast<size_t>(V));
  for (int rep = 0; rep < warmup + repeats; ++rep) {
    CausalLMState st = m.start(1, prompt_tokens + new_tokens);
    const auto t0 = std::chrono::steady_clock::now();
    m.extend(st, prompt.data(), {prompt_tokens}, lg.data(), false, ro);
    const auto t1 = std::chrono::steady_clock::now();
    SamplingOptions s;
    for (int64_t t = 0; t < new_tokens; ++t) {
      const int32_t next = choose_token(lg.data(), V, {}, s, t);
      m.extend(st, &next, {1}, lg.data(), false, ro);
    }
    const auto t2 = std::chrono::steady_clock::now();
    if (rep == 0 && !yes) {  // the rest, estimated from the first run, past a minute: stop with the estimate
      const double per_run = std::chrono::duration<double>(t2 - t0).count();
      const double rest = per_run * (warmup + repeats - 1);
      if (rest > 60.0)
        throw Error("--generate: " + std::to_string(warmup + repeats) + " runs (--warmup " + std::to_string(warmup) +
                    ", --repeats " + std::to_string(repeats) + ") would take about " + std::to_string(int(rest + per_run)) +
                    " s (" + std::to_string(int(per_run + 0.5)) +
                    " s a run, measured), over the 60 s limit; pass --yes to run it anyway, or lower --repeats, "
                    "--prompt-tokens or --new-tokens");
    }
    if (rep < warmup) continue;
    pp.push_back(std::chrono::duration<double>(t1 - t0).count());
    tg.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double p = median(pp), g = median(tg);
  const double pp_tps = double(prompt_tokens) / p, tg_tps = new_tokens > 0 ? double(new_tokens) / g : 0.0;
  // A generation step reads the weights a token touches, in their stored
  // types, and the key and value caches: its floor is the time to read
  // step_bytes() at the machine's read bandwidth (same threads), at the
  // generated tokens' mean position.
  const int64_t mean_position = prompt_tokens + new_tokens / 2;
  const size_t step = m.step_bytes(mean_position), kv = step - m.step_bytes(0);

  const double floor_tps = bw * 1e9 / double(step);
  if (json) {
    std::printf("{\"model\": \"%s\", \"prompt_tokens\": %lld, \"new_tokens\": %lld, \"threads\": %d, \"compute\": \"%s\", "
                "\"weight_bytes\": %zu, \"prompt_s\": %.9g, \"generate_s\": %.9g, \"prompt_tokens_per_s\": %.6g, "
                "\"generate_tokens_per_s\": %.6g, \"step_bytes\": %zu, \"read_gb_per_s\": %.6g, "
                "\"read_floor_tokens_per_s\": %.6g}\n",
                model.c_str(), (long long)prompt_tokens, (long long)new_tokens, threads, compute.c_str(), m.weight_bytes(),
                p, g, pp_tps, tg_tps, step, bw, floor_tps);
  } else {
    std::printf("ffn bench --generate: %s, %d threads, compute %s (weights %.1f MiB), median of %d runs\n",
                model.c_str(), threads, compute.c_str(), double(m.weight_bytes()) / (1 << 20), repeats);
    std::printf("  prompt %lld tokens   %.3f s   %.1f tokens/s\n", (long long)prompt_tokens, p, pp_tps);
    std::printf("  generate %lld tokens %.3f s   %.1f tokens/s\n", (long long)new_tokens, g, tg_tps);
    std::printf("  reading floor: %.1f MiB per token (weights %.1f MiB in their stored types, KV cache %.1f MiB at "
                "position %lld) at %.1f GB/s (measured read bandwidth, %d threads) = %.1f tokens/s; generation at "
                "%.0f %% of it\n",
                double(step) / (1 << 20), double(step - kv) / (1 << 20), double(kv) / (1 << 20),
                (long long)mean_position, bw, threads, floor_tps, floor_tps > 0 ? 100.0 * tg_tps / floor_tps : 0.0);
  }
  return 0;
}

Command add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "continue a prompt with a LLaMA-architecture model (GGUF file or Hugging Face directory); prints the "
                  "new text only, as it is made");
  cmd->add_option("--model", a->model, "GGUF file or Hugging Face directory (config.json, model.safetensors, "
                                       "tokenizer.json) of architecture " + CausalLM::architecture_names() +
                                       " (default: the SmolLM2 scripts/setup.sh installs, " + default_lm_path() + ")");
  cmd->add_option("prompt", a->prompt, "the prompt text (or ids with --ids)");
  cmd->add_option("--prompt-file", a->prompt_file, "read the prompt from this file (- reads standard input)");
  cmd->add_option("--chat", a->chat, "one user message, put in the model's own chat template (as transformers' "
                                     "apply_chat_template) with the assistant's turn opened")
      ->each([a](const std::string&) { a->chat_given = true; });
  cmd->add_option("--system", a->system, "with --chat: a system message before it")
      ->each([a](const std::string&) { a->system_given = true; });
  cmd->add_option("--messages", a->messages, "a JSON file of OpenAI-style messages ([{\"role\": \"user\", \"content\": "
                                             "...}, ...]; - reads standard input), put in the model's chat template");
  cmd->add_option("--stop", a->stop, "end the text before this string (repeatable), as llama.cpp and the OpenAI API do; "
                                     "\\n \\t \\\\ \\uXXXX in it are unescaped (--no-escape)");
  cmd->add_flag("--no-escape", a->no_escape, "take --stop, --system and --chat as written (default: \\n, \\t, \\r, "
                                            "\\\\, \\', \\\" and \\uXXXX unescaped, as llama.cpp's --escape)");
  cmd->add_option("--chat-template", a->chat_template, "with --chat or --messages: a Jinja chat template FILE to use in "
                                                       "place of the model's (llama-server's --chat-template-file)");
  cmd->add_flag("--show-prompt", a->show_prompt, "print the prompt as the model would read it (the chat template "
                                                 "rendered, BOS where added) and its ids, then exit");
  cmd->add_option("--template-var", a->template_var,
                  "KEY=JSON: a variable for the chat template (repeatable), as apply_chat_template's keyword "
                  "arguments: --template-var enable_thinking=false");
  cmd->add_flag("--ids", a->ids, "the prompt is token ids (space-separated); the generated ids are printed on one "
                                 "line, EOS included");
  cmd->add_option("--max-new-tokens", a->s.max_new_tokens, "most new tokens (default 128); 0 with --logits");
  cmd->add_option("--temperature", a->s.temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)");
  cmd->add_option("--top-k", a->s.top_k, "sample among the K most likely tokens (default 0: all)");
  cmd->add_option("--top-p", a->s.top_p, "sample among the most likely tokens whose probability reaches P (default 1)");
  cmd->add_option("--seed", a->seed, "seed of the sampling draws (default 0); the same seed gives the same tokens; -1: "
                                     "a random seed, printed on standard error");
  cmd->add_option("--repeat-penalty", a->s.repeat_penalty,
                  "divide the logits of tokens already seen by R (multiply if negative), as transformers' "
                  "repetition_penalty (default 1: off)");
  cmd->add_option("--min-p", a->s.min_p, "sampling: drop tokens less likely than P times the most likely (default 0: off)");
  cmd->add_option("--presence-penalty", a->s.presence_penalty,
                  "subtract P from the logit of every token generated so far, as the OpenAI API (-2..2, default 0)");
  cmd->add_option("--frequency-penalty", a->s.frequency_penalty,
                  "subtract F times its count from the logit of every token generated so far, as the OpenAI API "
                  "(-2..2, default 0)");
  cmd->add_option("--beams", a->s.beams,
                  "beam search with N beams (default 1: greedy or sampling); prints the best hypothesis when it is "
                  "done, not token by token");
  cmd->add_option("--length-penalty", a->s.length_penalty,
                  "beam search: a hypothesis scores its log-probability sum / length^P (default 1)");
  cmd->add_option("--compute", a->compute,
                  "native (default): " + quant_type_names(QuantSet::native, "/") +
                      " matrices stay quantized, F16/BF16 in 16 bits, products on 16-bit activations (two 8-bit "
                      "planes); fp32: every matrix dequantized to float32 (logits as transformers')");
  cmd->add_option("--dtype", a->dtype,
                  "the SwiGLU sublayers' weights where they are float32 (Hugging Face checkpoints, or GGUF with "
                  "--compute fp32): fp32 (default), int8 or bf16, converted on load");
  cmd->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  cmd->add_option("--logits", a->logits, "with --max-new-tokens 0: write float32 [prompt tokens, vocabulary] .npy, "
                                         "the logits after every prompt position");
  return {cmd, [a](const Common& c) { return cmd_generate(*a, c); }};
}

Command add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "a conversation with a model in its own chat template: each line of standard input is a user message "
              "(a line ending in \\ continues on the next; \"\"\" opens and closes a multi-line block; blank lines are "
              "skipped), each reply is printed as it is made; the cache is kept between turns");
  cmd->add_option("--model", a->model, "GGUF file or Hugging Face directory with a chat template, of architecture " +
                                       CausalLM::architecture_names() + " (default: the SmolLM2 scripts/setup.sh installs, " +
                                       default_lm_path() + ")");
  cmd->add_option("--system", a->system, "a system message first");
  cmd->add_option("--stop", a->stop, "end a reply before this string (repeatable); \\n \\t \\\\ \\uXXXX unescaped");
  cmd->add_flag("--no-escape", a->no_escape, "take --stop and --system as written (default: backslash escapes unescaped)");
  cmd->add_option("--chat-template", a->chat_template, "a Jinja chat template FILE to use in place of the model's");
  cmd->add_flag("--show-prompt", a->show_prompt, "print the first turn's prompt (--system and the first message of "
                                                 "standard input in the template) and its ids, then exit");
  cmd->add_flag("--context-shift", a->context_shift,
                "when a turn and its --max-new-tokens do not fit --context, drop the oldest turns after the system "
                "message (said on standard error), as llama.cpp's --context-shift; default: the reply is cut at the "
                "context (finish: length), and a prompt that fills it alone is an error");
  cmd->add_flag("--json", a->json, "one JSON object a turn on standard output (reply, finish_reason, prompt/reused/new "
                                   "tokens, seconds, tokens_per_second) in place of the streamed text");
  cmd->add_option("--template-var", a->template_var, "KEY=JSON: a variable for the chat template (repeatable)");
  cmd->add_option("--context", a->context, "positions the conversation may fill (default: the model's, at most 4096)");
  cmd->add_option("--max-new-tokens", a->s.max_new_tokens, "most new tokens per reply (default 128)");
  cmd->add_option("--temperature", a->s.temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)");
  cmd->add_option("--top-k", a->s.top_k, "sample among the K most likely tokens (default 0: all)");
  cmd->add_option("--top-p", a->s.top_p, "sample among the most likely tokens whose probability reaches P (default 1)");
  cmd->add_option("--seed", a->seed, "seed of the sampling draws (default 0; -1: random, printed on standard error)");
  cmd->add_option("--repeat-penalty", a->s.repeat_penalty, "as ffn generate's (default 1: off)");
  cmd->add_option("--min-p", a->s.min_p, "as ffn generate's (default 0: off)");
  cmd->add_option("--presence-penalty", a->s.presence_penalty, "as ffn generate's (default 0: off)");
  cmd->add_option("--frequency-penalty", a->s.frequency_penalty, "as ffn generate's (default 0: off)");
  cmd->add_option("--compute", a->compute, "native (default) or fp32, as ffn generate's");
  cmd->add_option("--dtype", a->dtype, "as ffn generate's");
  cmd->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  return {cmd, [a](const Common& c) { return cmd_chat(*a, c); }};
}

Command add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "the token ids of text (no BOS/EOS added), one line of ids per input line");
  cmd->add_option("--model", a->model, "GGUF file or Hugging Face directory (its tokenizer.json)")->required();
  cmd->add_option("text", a->text, "the text")->each([a](const std::string&) { a->text_given = true; });
  cmd->add_option("--input-file", a->input_file, "one text per line; - reads standard input");
  cmd->add_option("--output", a->output, "write the ids here (default: standard output)");
  return {cmd, [a](const Common&) { return cmd_tokenize(*a); }};
}

}  // namespace ffn::cli
