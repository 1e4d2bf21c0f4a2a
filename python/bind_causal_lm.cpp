// Python bindings: the causal language model (CausalLM) (the module: python/ffn_python.cpp).
#include "bindings.hpp"

namespace ffn::python {

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
      .def("chat_prompt", &CausalLM::chat_prompt, "message"_a,
           "One user message in the model's (ChatML) chat template with the assistant's turn opened.")
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
             float top_p, float repeat_penalty, uint64_t seed, bool chat, std::optional<int> threads,
             const nb::object& on_token) -> nb::object {
            const bool text = nb::isinstance<nb::str>(prompt);
            if ((text || chat) && !lm.tokenizer()) throw Error("the model has no tokenizer; give token ids");
            if (chat && !text) throw Error("chat=True takes the user message as text");
            std::vector<int32_t> ids = !text ? nb::cast<std::vector<int32_t>>(prompt)
                                       : chat ? lm.tokenizer()->encode(lm.chat_prompt(nb::cast<std::string>(prompt)))
                                              : lm.encode_prompt(nb::cast<std::string>(prompt));
            SamplingOptions s;
            s.max_new_tokens = max_new_tokens;
            s.temperature = temperature;
            s.top_k = top_k;
            s.top_p = top_p;
            s.repeat_penalty = repeat_penalty;
            s.seed = seed;
            const RunOptions o = run_options(threads, false, 0);
            Interruptible stop;
            auto hook = stop.hook();
            std::vector<int32_t> out;
            stop.run([&] {
              out = lm.generate(ids, s, [&](int32_t id) {
                if (hook && hook()) throw Interrupted();
                if (!on_token.is_none()) {
                  nb::gil_scoped_acquire gil;
                  const nb::object r = on_token(id);
                  if (r.is_none()) return true;
                  const int truth = PyObject_IsTrue(r.ptr());
                  if (truth < 0) throw nb::python_error();
                  return truth == 1;
                }
                return true;
              }, o);
            });
            if (text) {
              std::vector<int32_t> known;  // ids past the tokenizer's (a model's padding rows) have no text
              for (int32_t id : out)
                if (id < lm.tokenizer()->vocab_size()) known.push_back(id);
              return utf8_text(lm.tokenizer()->decode(known, true));
            }
            return nb::cast(out);
          },
          "prompt"_a, "max_new_tokens"_a = 128, "temperature"_a = 0.0f, "top_k"_a = 0, "top_p"_a = 1.0f,
          "repeat_penalty"_a = 1.0f, "seed"_a = 0, "chat"_a = false, "threads"_a = nb::none(),
          "on_token"_a = nb::none(),
          "Continues prompt (text, or a list of token ids) as ffn generate does: greedy by default\n"
          "(temperature 0), else sampling with top_k/top_p, seeded; stops at EOS or max_new_tokens.\n"
          "Returns the new text (text prompt; special tokens left out) or the new ids (EOS included).\n"
          "chat: prompt is one user message, put in the model's chat template. on_token(id), if given,\n"
          "is called with each new id as it is chosen; returning False stops.");

}

}  // namespace ffn::python
