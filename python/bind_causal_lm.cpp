// Python bindings: the causal language model (CausalLM) (the module: python/ffn_python.cpp).
#include "bindings.hpp"
#include "ffn/quant.hpp"

namespace ffn::python {
namespace {

// A str argument's UTF-8; ValueError naming the argument for a str that
// has none (a lone surrogate), TypeError for another type.
std::string utf8_arg(const nb::handle& h, const char* name) {
  if (!nb::isinstance<nb::str>(h))
    throw nb::type_error((std::string(name) + ": expected str, got " + nb::inst_name(h).c_str()).c_str());
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
  if (!p) {
    PyErr_Clear();
    throw nb::value_error((std::string(name) + ": the text has no UTF-8 form (a lone surrogate such as '\\ud800')").c_str());
  }
  return std::string(p, size_t(n));
}

// A conversation from Python: a list of {"role", "content"} dicts as JSON
// (the template sees every field as given), or one user message; checked as
// the OpenAI API checks messages (check_chat_messages: ffn.Error naming
// messages[i].field).
std::string messages_json(const nb::object& messages, const char* name = "messages") {
  if (nb::isinstance<nb::str>(messages)) return chat_messages_json({{"user", utf8_arg(messages, name)}});
  if (!nb::isinstance<nb::list>(messages) && !nb::isinstance<nb::tuple>(messages))
    throw nb::type_error((std::string(name) + ": expected a list of {\"role\": ..., \"content\": ...} dicts or one "
                          "message as str, got " + nb::inst_name(messages).c_str()).c_str());
  const nb::object dumps = nb::module_::import_("json").attr("dumps");
  return check_chat_messages(utf8_arg(dumps(messages, "ensure_ascii"_a = false), name));
}

// A library message that names CLI flags ("--max-new-tokens: ...") in
// Python's terms: the keyword arguments (max_new_tokens).
std::string keyword_names(const std::string& msg) {
  std::string out;
  for (size_t i = 0; i < msg.size(); ++i) {
    if (msg.compare(i, 2, "--") == 0 && i + 2 < msg.size() && std::islower(static_cast<unsigned char>(msg[i + 2])) &&
        (i == 0 || !std::isalnum(static_cast<unsigned char>(msg[i - 1])))) {
      for (i += 2; i < msg.size() && (std::islower(static_cast<unsigned char>(msg[i])) || msg[i] == '-'); ++i)
        out += msg[i] == '-' ? '_' : msg[i];
      --i;
    } else {
      out += msg[i];
    }
  }
  return out;
}

// The template's extra variables (apply_chat_template's keyword arguments) as JSON.
ChatRenderOptions render_options(const nb::object& template_vars) {
  ChatRenderOptions o;
  if (template_vars.is_none()) return o;
  if (!nb::isinstance<nb::dict>(template_vars)) throw Error("template_vars: expected a dict of the template's variables");
  const nb::object dumps = nb::module_::import_("json").attr("dumps");
  o.variables_json = nb::cast<std::string>(dumps(template_vars, "ensure_ascii"_a = false));
  return o;
}

// CausalLM.load's docstring, its list of native types from the quant table.
const std::string& load_doc() {
  static const std::string doc =
      "compute: native (" + quant_type_names(QuantSet::native, "/") +
      " matrices stay quantized, F16/BF16 16-bit; products on 16-bit activations) or\n"
      "fp32 (every matrix dequantized to float32; logits as transformers'). dtype: the SwiGLU\n"
      "sublayers' weights where they are float32 (Hugging Face checkpoints, GGUF with compute fp32):\n"
      "fp32, int8 or bf16.";
  return doc;
}

// render_options plus a template given in place of the model's (template=).
ChatRenderOptions render_options(const nb::object& template_vars, const nb::object& chat_template) {
  ChatRenderOptions o = render_options(template_vars);
  if (!chat_template.is_none()) {
    o.chat_template = utf8_arg(chat_template, "template");
    o.chat_template_name = "template";
  }
  return o;
}

std::string prompt_of(const CausalLM& lm, const nb::object& messages, const nb::object& template_vars,
                      const nb::object& chat_template, const char* name = "messages") {
  try {
    return lm.chat_prompt_json(messages_json(messages, name), render_options(template_vars, chat_template));
  } catch (const Error& e) {
    // The check names the list "messages"; generate's argument is prompt.
    const std::string what = e.what();
    if (std::string(name) != "messages" && what.rfind("messages", 0) == 0) throw Error(name + what.substr(8));
    throw;
  }
}

// f(), its ffn::Error messages in Python's terms (keyword_names).
template <class F>
void in_python_terms(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw Error(keyword_names(e.what()));
  }
}

// Token ids from a list, tuple or integer array: ValueError naming prompt for one outside int32.
std::vector<int32_t> token_ids(const nb::object& prompt) {
  std::vector<int32_t> ids;
  const nb::object items = nb::isinstance<nb::list>(prompt) || nb::isinstance<nb::tuple>(prompt) ? prompt : prompt.attr("tolist")();
  for (nb::handle x : items) {
    PyObject* index = PyNumber_Index(x.ptr());  // new reference, or null with an error set
    const long long v = index ? PyLong_AsLongLong(index) : -1;
    Py_XDECREF(index);
    if (PyErr_Occurred()) PyErr_Clear();
    else if (v >= 0 && v <= INT32_MAX) { ids.push_back(int32_t(v)); continue; }
    throw nb::value_error(("prompt: token id " + nb::cast<std::string>(nb::str(x)) + " is not in 0..2147483647").c_str());
  }
  return ids;
}

// What generate's prompt is: text, token ids (a list or tuple of ints, numpy
// integers included, or an integer numpy array), or a conversation (a list of message dicts).
enum class PromptKind { text, ids, messages };
PromptKind prompt_kind(const nb::object& prompt) {
  if (nb::isinstance<nb::str>(prompt)) return PromptKind::text;
  if (nb::isinstance<nb::list>(prompt) || nb::isinstance<nb::tuple>(prompt)) {
    bool dicts = false, ints = true;
    for (nb::handle x : prompt) {
      dicts |= nb::isinstance<nb::dict>(x);
      ints &= PyIndex_Check(x.ptr()) && !PyBool_Check(x.ptr());
    }
    if (dicts) return PromptKind::messages;
    if (ints) return PromptKind::ids;
  }
  if (nb::hasattr(prompt, "dtype") && nb::hasattr(prompt, "tolist") && nb::hasattr(prompt, "ndim") &&
      nb::cast<int>(prompt.attr("ndim")) == 1 && nb::cast<std::string>(prompt.attr("dtype").attr("kind")) == "i")
    return PromptKind::ids;
  throw nb::type_error((std::string("prompt: expected str (text), a list of token ids (int), or a list of messages "
                                    "({\"role\": ..., \"content\": ...} dicts), got ") +
                        nb::inst_name(prompt).c_str()).c_str());
}

bool python_truth(const nb::object& r) {
  if (r.is_none()) return true;
  const int truth = PyObject_IsTrue(r.ptr());
  if (truth < 0) throw nb::python_error();
  return truth == 1;
}

SamplingOptions sampling(int64_t max_new_tokens, float temperature, int64_t top_k, float top_p, float repeat_penalty,
                         uint64_t seed) {
  SamplingOptions s;
  s.max_new_tokens = max_new_tokens;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.repeat_penalty = repeat_penalty;
  s.seed = seed;
  try {
    s.validate();
  } catch (const Error& e) {
    throw Error(keyword_names(e.what()));
  }
  return s;
}

}  // namespace

void bind_causal_lm(nb::module_& m) {
  nb::class_<CausalLM>(m, "CausalLM",
                       "A LLaMA-architecture language model (SmolLM2, LLaMA, ...) from a GGUF file or a Hugging\n"
                       "Face directory, with its byte-level BPE tokenizer: logits and generation, as ffn generate.")
      .def_static(
          "load",
          [](const std::string& path, const std::string& compute, const std::string& dtype) {
            CausalLMLoadOptions o;
            if (compute == "native") o.compute = LMCompute::native;
            else if (compute == "fp32") o.compute = LMCompute::fp32;
            else throw Error("compute: expected native or fp32, got " + compute);
            o.ffn_dtype = parse_weight_dtype(dtype, "dtype");
            nb::gil_scoped_release nogil;
            return CausalLM::load(path, o);
          },
          "path"_a, "compute"_a = "native", "dtype"_a = "fp32",
          load_doc().c_str())
      .def_prop_ro("config",
                   [](const CausalLM& lm) {
                     const CausalLMConfig& c = lm.config();
                     nb::dict d;
                     d["vocab"] = c.vocab; d["d_model"] = c.d_model; d["layers"] = c.layers; d["heads"] = c.heads;
                     d["kv_heads"] = c.kv_heads; d["head_dim"] = c.head_dim; d["d_ff"] = c.d_ff;
                     d["rope_theta"] = c.rope_theta; d["eps"] = c.eps; d["tied"] = c.tied; d["context"] = c.context;
                     d["bos"] = c.bos; d["eos"] = c.eos; d["end_ids"] = c.end_ids; d["add_bos"] = c.add_bos;
                     return d;
                   })
      .def_prop_ro("quantized", &CausalLM::quantized, "Whether some products keep quantized blocks.")
      .def_prop_ro("chat_template", &CausalLM::chat_template)
      .def(
          "tokenize",
          [](const CausalLM& lm, const std::string& text) {
            if (!lm.tokenizer()) throw Error("the model has no tokenizer");
            return lm.tokenizer()->encode(text);
          },
          "text"_a, "Token ids of text (special tokens in it recognized; no BOS/EOS added).")
      .def(
          "decode",
          [](const CausalLM& lm, const std::vector<int32_t>& ids, bool skip_special) {
            if (!lm.tokenizer()) throw Error("the model has no tokenizer");
            return utf8_text(lm.tokenizer()->decode(ids, skip_special));
          },
          "ids"_a, "skip_special"_a = true, "The text of ids.")
      .def("chat_prompt",
           [](const CausalLM& lm, const nb::object& messages, const nb::object& template_vars,
              const nb::object& chat_template) { return prompt_of(lm, messages, template_vars, chat_template); },
           "messages"_a, "template_vars"_a = nb::none(), "template"_a = nb::none(),
           "A conversation (a list of {\"role\", \"content\"} dicts, or one user message as text) in the\n"
           "model's own chat template with the assistant's turn opened, as transformers'\n"
           "apply_chat_template(add_generation_prompt=True, tokenize=False) renders it; template_vars:\n"
           "more variables, as its keyword arguments ({\"enable_thinking\": False}); template: a Jinja\n"
           "chat template (str) to render in place of the model's.")
      .def(
          "logits",
          [](const CausalLM& lm, const std::vector<int32_t>& ids, std::optional<int> threads) {
            RunOptions o = run_options(threads, false, 0);
            Interruptible stop;
            std::vector<float> out;
            stop.run([&] { out = lm.logits(ids, o); });
            return to_numpy(out, {int64_t(ids.size()), lm.config().vocab});
          },
          "ids"_a, "threads"_a = nb::none(), "float32 [len(ids), vocab]: the logits after every position.")
      .def(
          "generate",
          [](const CausalLM& lm, const nb::object& prompt, int64_t max_new_tokens, float temperature, int64_t top_k,
             float top_p, float repeat_penalty, uint64_t seed, bool chat, const std::vector<std::string>& stop,
             const nb::object& template_vars, const nb::object& chat_template, std::optional<int> threads,
             const nb::object& on_token) -> nb::object {
            // Text out for a text prompt or a conversation; ids out for ids. A list of messages chats.
            const PromptKind kind = prompt_kind(prompt);
            if (kind == PromptKind::messages) chat = true;
            if (chat && kind == PromptKind::ids && nb::len(prompt) > 0)
              throw nb::type_error("prompt: with chat=True, a list of messages or one message as str, not token ids");
            const bool text = kind == PromptKind::text || chat;
            if (text && !lm.tokenizer()) throw Error("prompt: the model has no tokenizer; give token ids");
            if (!text && !stop.empty()) throw Error("stop: stop strings end text; give the prompt as text");
            if (!chat && !template_vars.is_none()) throw Error("template_vars: only with chat=True or a list of messages");
            if (!chat && !chat_template.is_none()) throw Error("template: only with chat=True or a list of messages");
            const SamplingOptions s = sampling(max_new_tokens, temperature, top_k, top_p, repeat_penalty, seed);
            std::vector<int32_t> ids = chat   ? lm.tokenizer()->encode(prompt_of(lm, prompt, template_vars, chat_template, "prompt"))
                                       : text ? lm.encode_prompt(utf8_arg(prompt, "prompt"))
                                              : token_ids(prompt);
            std::optional<TextStream> stream;
            if (text) in_python_terms([&] { stream.emplace(*lm.tokenizer(), stop); });
            const RunOptions o = run_options(threads, false, 0);
            Interruptible guard;
            auto hook = guard.hook();
            std::vector<int32_t> out;
            in_python_terms([&] { guard.run([&] {
              out = lm.generate(ids, s, [&](int32_t id) {
                if (hook && hook()) throw Interrupted();
                if (stream) stream->push(id);
                bool go_on = true;
                if (!on_token.is_none()) {
                  nb::gil_scoped_acquire gil;
                  go_on = python_truth(on_token(id));
                }
                return go_on && !(stream && stream->stopped());
              }, o);
            }); });
            if (text) {
              stream->finish();
              return utf8_text(stream->text());
            }
            return nb::cast(out);
          },
          "prompt"_a, "max_new_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f,
          "repeat_penalty"_a = 1.0f, "seed"_a = 0, "chat"_a = false, "stop"_a = std::vector<std::string>{},
          "template_vars"_a = nb::none(), "template"_a = nb::none(), "threads"_a = nb::none(), "on_token"_a = nb::none(),
          "Continues prompt (text, or a list of token ids) as ffn generate does: greedy by default\n"
          "(temperature 0), else sampling with top_k/top_p, seeded; stops at EOS or max_new_tokens.\n"
          "Returns the new text (text prompt; special tokens left out) or the new ids (EOS included).\n"
          "chat: prompt is a conversation (a list of {\"role\", \"content\"} dicts: chat=True is implied)\n"
          "or one user message, put in the model's own chat template (template: a Jinja template str in its\n"
          "place). stop: strings that end the text before them.\n"
          "on_token(id), if given, is called with each new id as it is chosen; returning False stops.")
      .def(
          "chat",
          [](const CausalLM& lm, const nb::object& system, const std::vector<std::string>& stop, int64_t context,
             const nb::object& template_vars, const nb::object& chat_template, bool context_shift) {
            ChatOptions o;
            o.render = render_options(template_vars, chat_template);
            o.system = utf8_arg(system, "system");
            o.stop = stop;
            o.context = context;
            o.context_shift = context_shift;
            try {
              return new ChatSession(lm, o);
            } catch (const Error& e) {
              throw Error(keyword_names(e.what()));
            }
          },
          "system"_a = "", "stop"_a = std::vector<std::string>{}, "context"_a = 0, "template_vars"_a = nb::none(),
          "template"_a = nb::none(), "context_shift"_a = false,
          nb::keep_alive<0, 1>(),
          "A conversation that keeps its cache between turns (ffn chat): say(message) re-renders the whole\n"
          "conversation in the model's template and reads only the tokens past what it shares with the\n"
          "last turn. context: positions it may fill (0: the model's, at most 4096); a reply is cut where it\n"
          "is full (finish_reason \"length\"). context_shift: drop the oldest turns after the system message\n"
          "until a turn and its max_new_tokens fit (say() reports dropped_messages). template: a Jinja chat\n"
          "template str in place of the model's.");

  nb::class_<ChatSession>(m, "ChatSession", "A conversation with a CausalLM (CausalLM.chat()).")
      .def(
          "say",
          [](ChatSession& c, const nb::object& message_obj, int64_t max_new_tokens, float temperature, int64_t top_k,
             float top_p, float repeat_penalty, uint64_t seed, std::optional<int> threads, const nb::object& on_text) {
            const std::string message = utf8_arg(message_obj, "message");
            const SamplingOptions s = sampling(max_new_tokens, temperature, top_k, top_p, repeat_penalty, seed);
            const RunOptions o = run_options(threads, false, 0);
            Interruptible stop;
            auto hook = stop.hook();
            ChatReply r;
            in_python_terms([&] { stop.run([&] {
              r = c.say(message, s, [&](const std::string& piece) {
                if (on_text.is_none()) return true;
                nb::gil_scoped_acquire gil;
                return python_truth(on_text(utf8_text(piece)));
              }, o, [&](int32_t) {
                if (hook && hook()) throw Interrupted();
                return true;
              });
            }); });
            nb::dict d;
            d["text"] = utf8_text(r.text);
            d["ids"] = r.ids;
            d["prompt_tokens"] = r.prompt_tokens;
            d["reused_tokens"] = r.reused_tokens;
            d["stopped_by_string"] = r.stopped_by_string;
            d["finish_reason"] = r.finish_reason;
            d["dropped_messages"] = r.dropped_messages;
            return d;
          },
          "message"_a, "max_new_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f,
          "repeat_penalty"_a = 1.0f, "seed"_a = 0, "threads"_a = nb::none(), "on_text"_a = nb::none(),
          "The user's message, then the assistant's reply: a dict with text, ids, prompt_tokens,\n"
          "reused_tokens (the prompt tokens whose cache was kept), finish_reason (stop, length,\n"
          "interrupted) and dropped_messages (context_shift). on_text(piece), if given, gets the\n"
          "reply's text as it is made; returning False stops.")
      .def_prop_ro("messages", [](const ChatSession& c) {
        nb::list l;
        for (const auto& msg : c.messages()) {
          nb::dict d;
          d["role"] = msg.role;
          d["content"] = msg.content;
          l.append(d);
        }
        return l;
      });

}

}  // namespace ffn::python
