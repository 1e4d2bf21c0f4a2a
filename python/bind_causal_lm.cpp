// Python bindings: the causal language model (CausalLM) (the module: python/ffn_python.cpp).
#include "bindings.hpp"

namespace ffn::python {
namespace {

// A conversation from Python: a list of {"role", "content"} dicts as JSON
// (the template sees every field as given), or one user message.
std::string messages_json(const nb::object& messages) {
  if (nb::isinstance<nb::str>(messages)) return chat_messages_json({{"user", nb::cast<std::string>(messages)}});
  if (!nb::isinstance<nb::list>(messages) && !nb::isinstance<nb::tuple>(messages))
    throw Error("messages: expected a list of {\"role\": ..., \"content\": ...} dicts or one message as text");
  const nb::object dumps = nb::module_::import_("json").attr("dumps");
  return nb::cast<std::string>(dumps(messages, "ensure_ascii"_a = false));
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

std::string prompt_of(const CausalLM& lm, const nb::object& messages, const nb::object& template_vars) {
  return lm.chat_prompt_json(messages_json(messages), render_options(template_vars));
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
          "compute: native (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K matrices stay quantized, F16/BF16 16-bit; products on 16-bit activations) or\n"
          "fp32 (every matrix dequantized to float32; logits as transformers'). dtype: the SwiGLU\n"
          "sublayers' weights where they are float32 (Hugging Face checkpoints, GGUF with compute fp32):\n"
          "fp32, int8 or bf16.")
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
           [](const CausalLM& lm, const nb::object& messages, const nb::object& template_vars) {
             return prompt_of(lm, messages, template_vars);
           },
           "messages"_a, "template_vars"_a = nb::none(),
           "A conversation (a list of {\"role\", \"content\"} dicts, or one user message as text) in the\n"
           "model's own chat template with the assistant's turn opened, as transformers'\n"
           "apply_chat_template(add_generation_prompt=True, tokenize=False) renders it; template_vars:\n"
           "more variables, as its keyword arguments ({\"enable_thinking\": False}).")
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
             const nb::object& template_vars, std::optional<int> threads, const nb::object& on_token) -> nb::object {
            // Text out for a text prompt or a conversation; ids out for ids.
            const bool text = nb::isinstance<nb::str>(prompt) || chat;
            if (text && !lm.tokenizer()) throw Error("the model has no tokenizer; give token ids");
            if (!text && !stop.empty()) throw Error("stop: stop strings end text; give the prompt as text");
            if (!chat && !template_vars.is_none()) throw Error("template_vars: only with chat=True");
            std::vector<int32_t> ids = chat   ? lm.tokenizer()->encode(prompt_of(lm, prompt, template_vars))
                                       : text ? lm.encode_prompt(nb::cast<std::string>(prompt))
                                              : nb::cast<std::vector<int32_t>>(prompt);
            const SamplingOptions s = sampling(max_new_tokens, temperature, top_k, top_p, repeat_penalty, seed);
            std::optional<TextStream> stream;
            if (text) stream.emplace(*lm.tokenizer(), stop);
            const RunOptions o = run_options(threads, false, 0);
            Interruptible guard;
            auto hook = guard.hook();
            std::vector<int32_t> out;
            guard.run([&] {
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
            });
            if (text) {
              stream->finish();
              return utf8_text(stream->text());
            }
            return nb::cast(out);
          },
          "prompt"_a, "max_new_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f,
          "repeat_penalty"_a = 1.0f, "seed"_a = 0, "chat"_a = false, "stop"_a = std::vector<std::string>{},
          "template_vars"_a = nb::none(), "threads"_a = nb::none(), "on_token"_a = nb::none(),
          "Continues prompt (text, or a list of token ids) as ffn generate does: greedy by default\n"
          "(temperature 0), else sampling with top_k/top_p, seeded; stops at EOS or max_new_tokens.\n"
          "Returns the new text (text prompt; special tokens left out) or the new ids (EOS included).\n"
          "chat: prompt is a conversation (a list of {\"role\", \"content\"} dicts) or one user message,\n"
          "put in the model's own chat template. stop: strings that end the text before them.\n"
          "on_token(id), if given, is called with each new id as it is chosen; returning False stops.")
      .def(
          "chat",
          [](const CausalLM& lm, const std::string& system, const std::vector<std::string>& stop, int64_t context,
             const nb::object& template_vars) {
            ChatOptions o;
            o.render = render_options(template_vars);
            o.system = system;
            o.stop = stop;
            o.context = context;
            return new ChatSession(lm, o);
          },
          "system"_a = "", "stop"_a = std::vector<std::string>{}, "context"_a = 0, "template_vars"_a = nb::none(),
          nb::keep_alive<0, 1>(),
          "A conversation that keeps its cache between turns (ffn chat): say(message) re-renders the whole\n"
          "conversation in the model's template and reads only the tokens past what it shares with the\n"
          "last turn. context: positions it may fill (0: the model's, at most 4096).");

  nb::class_<ChatSession>(m, "ChatSession", "A conversation with a CausalLM (CausalLM.chat()).")
      .def(
          "say",
          [](ChatSession& c, const std::string& message, int64_t max_new_tokens, float temperature, int64_t top_k,
             float top_p, float repeat_penalty, uint64_t seed, std::optional<int> threads, const nb::object& on_text) {
            const SamplingOptions s = sampling(max_new_tokens, temperature, top_k, top_p, repeat_penalty, seed);
            const RunOptions o = run_options(threads, false, 0);
            Interruptible stop;
            auto hook = stop.hook();
            ChatReply r;
            stop.run([&] {
              r = c.say(message, s, [&](const std::string& piece) {
                if (on_text.is_none()) return true;
                nb::gil_scoped_acquire gil;
                return python_truth(on_text(utf8_text(piece)));
              }, o, [&](int32_t) {
                if (hook && hook()) throw Interrupted();
                return true;
              });
            });
            nb::dict d;
            d["text"] = utf8_text(r.text);
            d["ids"] = r.ids;
            d["prompt_tokens"] = r.prompt_tokens;
            d["reused_tokens"] = r.reused_tokens;
            d["stopped_by_string"] = r.stopped_by_string;
            return d;
          },
          "message"_a, "max_new_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f,
          "repeat_penalty"_a = 1.0f, "seed"_a = 0, "threads"_a = nb::none(), "on_text"_a = nb::none(),
          "The user's message, then the assistant's reply: a dict with text, ids, prompt_tokens and\n"
          "reused_tokens (the prompt tokens whose cache was kept). on_text(piece), if given, gets the\n"
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
