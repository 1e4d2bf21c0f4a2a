// ffn generate and ffn tokenize: a LLaMA-architecture model (include/ffn/causal_lm.hpp)
// from a GGUF file or a Hugging Face directory.
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
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

struct GenerateArgs {
  std::string model, prompt, prompt_file, chat, messages, system, compute = "native", logits, dtype = "fp32";
  bool ids = false, chat_given = false, system_given = false;
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

// A --messages file's shape, before the model loads: a JSON array of
// objects with a string role, valid UTF-8 (the template reads the rest).
void check_messages(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);  // (discarded, not thrown, when invalid)
  if (j.is_discarded()) throw Error(where + ": not valid JSON");
  if (!j.is_array()) throw Error(where + ": the messages must be a JSON array of {\"role\", \"content\"} objects");
  for (size_t k = 0; k < j.size(); ++k)
    if (!j[k].is_object() || !j[k].contains("role") || !j[k]["role"].is_string())
      throw Error(where + ": message " + std::to_string(k) + " must be an object with a string \"role\"");
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

int cmd_generate(GenerateArgs& a) {
  const int given = int(!a.prompt.empty()) + int(!a.prompt_file.empty()) + int(a.chat_given) + int(!a.messages.empty());
  if (given != 1) throw Error("give exactly one of PROMPT, --prompt-file F, --chat MESSAGE or --messages FILE.json");
  if (a.chat_given && a.ids) throw Error("--chat: not with --ids (the chat template is text)");
  if (!a.messages.empty() && a.ids) throw Error("--messages: not with --ids (the chat template is text)");
  if (a.system_given && !a.chat_given)
    throw Error("--system: only with --chat (a --messages file holds its own system message)");
  if (!a.stop.empty() && a.ids) throw Error("--stop: not with --ids (stop strings end the text)");
  if (!a.template_var.empty() && !a.chat_given && a.messages.empty())
    throw Error("--template-var: only with --chat or --messages");
  check_stops(a.stop);
  ChatRenderOptions render;
  render.variables_json = template_vars(a.template_var);
  const LMCompute compute = parse_lm_compute(a.compute);
  a.s.validate();
  const int threads = threads_or_throw(a.threads);
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
  if (a.ids) {
    prompt = parse_ids(text, where, m.config().vocab);
  } else if (a.chat_given) {
    std::vector<ChatMessage> msgs;
    if (a.system_given) msgs.push_back({"system", a.system});
    msgs.push_back({"user", text});
    prompt = tok->encode(m.chat_prompt(msgs, render));
  } else if (!a.messages.empty()) {
    try {
      prompt = tok->encode(m.chat_prompt_json(text, render));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  } else {
    prompt = m.encode_prompt(text);
  }
  if (prompt.empty()) throw Error(where + ": the prompt has no tokens");
  RunOptions ro;
  ro.threads = threads;
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
  std::string model, system, compute = "native", dtype = "fp32";
  std::vector<std::string> stop, template_var;
  SamplingOptions s;
  int64_t context = 0;
  int threads = 0;
};

// One line of standard input is one user message; the reply streams to
// standard output, then a newline. Each turn's counts go to standard error.
int cmd_chat(ChatArgs& a) {
  check_stops(a.stop);
  (void)template_vars(a.template_var);  // checked before the model loads
  check_utf8(a.system, "--system");
  if (a.context < 0) throw Error("--context: expected a positive number of positions, got " + std::to_string(a.context));
  a.s.validate();
  if (a.s.beams != 1) throw Error("--beams: not in ffn chat (greedy or sampling)");
  const LMCompute compute = parse_lm_compute(a.compute);
  const int threads = threads_or_throw(a.threads);
  const CausalLM m = load_lm(a.model, compute, a.dtype);
  if (!m.tokenizer()) throw Error(a.model + ": no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json)");
  if (m.chat_template().empty()) throw Error(a.model + ": the model has no chat template (ffn generate takes plain prompts)");
  ChatOptions o;
  o.system = a.system;
  o.stop = a.stop;
  o.context = a.context;
  o.render.variables_json = template_vars(a.template_var);
  ChatSession chat(m, o);
  RunOptions ro;
  ro.threads = threads;
  const bool terminal = ::isatty(0) && ::isatty(1);
  int turn = 0;
  for (std::string line;;) {
    if (terminal) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    ++turn;
    const auto t0 = std::chrono::steady_clock::now();
    ChatReply r;
    try {
      r = chat.say(line, a.s, [](const std::string& piece) {
        std::cout.write(piece.data(), std::streamsize(piece.size()));
        std::cout.flush();
        return bool(std::cout);
      }, ro);
    } catch (const Error& e) {
      // At a terminal the conversation goes on (the turn left it as it was); a script gets exit 2.
      if (!terminal) throw;
      std::fprintf(stderr, "ffn: error: %s\n", e.what());
      continue;
    }
    std::cout << '\n' << std::flush;
    if (!std::cout) throw Error("standard output: write error");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[turn %d: prompt %lld tokens, %lld kept from the cache, %lld read; %zu new tokens; %.2f s]\n",
                 turn, (long long)r.prompt_tokens, (long long)r.reused_tokens, (long long)(r.prompt_tokens - r.reused_tokens),
                 r.ids.size(), s);
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
                   int warmup, bool json) {
  if (prompt_tokens < 1) throw Error("--prompt-tokens: expected a positive integer, got " + std::to_string(prompt_tokens));
  if (new_tokens < 0) throw Error("--new-tokens: expected 0 or more, got " + std::to_string(new_tokens));
  CausalLMLoadOptions lo;
  lo.compute = parse_lm_compute(compute);
  if (!json) lo.on_progress = load_progress(model);
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
  const double bw = measure_read_bandwidth(int64_t(step), threads);
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
  cmd->add_option("--model", a->model, "GGUF file (architecture llama) or Hugging Face directory (config.json, "
                                       "model.safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("prompt", a->prompt, "the prompt text (or ids with --ids)");
  cmd->add_option("--prompt-file", a->prompt_file, "read the prompt from this file (- reads standard input)");
  cmd->add_option("--chat", a->chat, "one user message, put in the model's own chat template (as transformers' "
                                     "apply_chat_template) with the assistant's turn opened")
      ->each([a](const std::string&) { a->chat_given = true; });
  cmd->add_option("--system", a->system, "with --chat: a system message before it")
      ->each([a](const std::string&) { a->system_given = true; });
  cmd->add_option("--messages", a->messages, "a JSON file of OpenAI-style messages ([{\"role\": \"user\", \"content\": "
                                             "...}, ...]; - reads standard input), put in the model's chat template");
  cmd->add_option("--stop", a->stop, "end the text before this string (repeatable), as llama.cpp and the OpenAI API do");
  cmd->add_option("--template-var", a->template_var,
                  "KEY=JSON: a variable for the chat template (repeatable), as apply_chat_template's keyword "
                  "arguments: --template-var enable_thinking=false");
  cmd->add_flag("--ids", a->ids, "the prompt is token ids (space-separated); the generated ids are printed on one "
                                 "line, EOS included");
  cmd->add_option("--max-new-tokens", a->s.max_new_tokens, "most new tokens (default 128); 0 with --logits");
  cmd->add_option("--temperature", a->s.temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)");
  cmd->add_option("--top-k", a->s.top_k, "sample among the K most likely tokens (default 0: all)");
  cmd->add_option("--top-p", a->s.top_p, "sample among the most likely tokens whose probability reaches P (default 1)");
  cmd->add_option("--seed", a->s.seed, "seed of the sampling draws (default 0); the same seed gives the same tokens");
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
                  "native (default): Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K matrices stay quantized, F16/BF16 in 16 bits, products on 16-bit activations (two 8-bit planes); fp32: "
                  "every matrix dequantized to float32 (logits as transformers')");
  cmd->add_option("--dtype", a->dtype,
                  "the SwiGLU sublayers' weights where they are float32 (Hugging Face checkpoints, or GGUF with "
                  "--compute fp32): fp32 (default), int8 or bf16, converted on load");
  cmd->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  cmd->add_option("--logits", a->logits, "with --max-new-tokens 0: write float32 [prompt tokens, vocabulary] .npy, "
                                         "the logits after every prompt position");
  return {cmd, [a] { return cmd_generate(*a); }};
}

Command add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "a conversation with a model in its own chat template: each line of standard input is a user message, "
              "each reply is printed as it is made; the cache is kept between turns");
  cmd->add_option("--model", a->model, "GGUF file or Hugging Face directory with a chat template")->required();
  cmd->add_option("--system", a->system, "a system message first");
  cmd->add_option("--stop", a->stop, "end a reply before this string (repeatable)");
  cmd->add_option("--template-var", a->template_var, "KEY=JSON: a variable for the chat template (repeatable)");
  cmd->add_option("--context", a->context, "positions the conversation may fill (default: the model's, at most 4096)");
  cmd->add_option("--max-new-tokens", a->s.max_new_tokens, "most new tokens per reply (default 128)");
  cmd->add_option("--temperature", a->s.temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)");
  cmd->add_option("--top-k", a->s.top_k, "sample among the K most likely tokens (default 0: all)");
  cmd->add_option("--top-p", a->s.top_p, "sample among the most likely tokens whose probability reaches P (default 1)");
  cmd->add_option("--seed", a->s.seed, "seed of the sampling draws (default 0)");
  cmd->add_option("--repeat-penalty", a->s.repeat_penalty, "as ffn generate's (default 1: off)");
  cmd->add_option("--min-p", a->s.min_p, "as ffn generate's (default 0: off)");
  cmd->add_option("--presence-penalty", a->s.presence_penalty, "as ffn generate's (default 0: off)");
  cmd->add_option("--frequency-penalty", a->s.frequency_penalty, "as ffn generate's (default 0: off)");
  cmd->add_option("--compute", a->compute, "native (default) or fp32, as ffn generate's");
  cmd->add_option("--dtype", a->dtype, "as ffn generate's");
  cmd->add_option("--threads", a->threads, "threads, 0 = all cores (default 0)");
  return {cmd, [a] { return cmd_chat(*a); }};
}

Command add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "the token ids of text (no BOS/EOS added), one line of ids per input line");
  cmd->add_option("--model", a->model, "GGUF file or Hugging Face directory (its tokenizer.json)")->required();
  cmd->add_option("text", a->text, "the text")->each([a](const std::string&) { a->text_given = true; });
  cmd->add_option("--input-file", a->input_file, "one text per line; - reads standard input");
  cmd->add_option("--output", a->output, "write the ids here (default: standard output)");
  return {cmd, [a] { return cmd_tokenize(*a); }};
}

}  // namespace ffn::cli
