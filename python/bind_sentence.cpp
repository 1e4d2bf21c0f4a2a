// Python bindings: sentence embeddings (SentenceEncoder) and rerankers (CrossEncoder) (the module: python/ffn_python.cpp).
#include "bindings.hpp"
#include "ffn/cross_encoder.hpp"

namespace ffn::python {

namespace {

// EmbedOptions of the Python keywords.
EmbedOptions embed_options(std::optional<int> threads, std::optional<std::string> prompt_name,
                           std::optional<std::string> prompt, bool truncate, const std::string& compute) {
  EmbedOptions o;
  o.compute = parse_compute(compute, "compute");
  o.threads = run_options(threads, false, 0).threads;
  o.prompt_name = std::move(prompt_name);
  o.prompt = std::move(prompt);
  o.truncate = truncate;
  return o;
}

}  // namespace

void bind_sentence(nb::module_& m) {
  nb::class_<SentenceEncoder>(m, "SentenceEncoder",
                              "Sentence embeddings from a Hugging Face BERT checkpoint (e.g. all-MiniLM-L6-v2):\n"
                              "WordPiece tokens, ffn's encoder layers, mean (or [CLS]) pooling, L2 normalization,\n"
                              "as the model's sentence-transformers files say.")
      .def_static(
          "load",
          [](std::optional<std::string> model, std::optional<int64_t> max_tokens, const std::string& dtype,
             bool int8_outliers, bool int8_attention, float outlier_threshold,
             std::optional<std::vector<int64_t>> layers) {
            SentenceLoadOptions o;
            o.max_tokens = max_tokens;
            o.dtype = parse_weight_dtype(dtype, "dtype");
            o.int8_outliers = int8_outliers;
            o.int8_attention = int8_attention;
            o.outlier_threshold = outlier_threshold;
            if (layers) o.dtype_layers = *layers;
            const std::string dir = model ? *model : SentenceEncoder::default_model_dir();
            SentenceEncoder enc = [&] {
              nb::gil_scoped_release nogil;
              return SentenceEncoder::load(dir, o);
            }();
            // What the directory's files left unsaid, as ffn embed's stderr
            // lines: a UserWarning each, at the caller's line (stacklevel 1
            // from C is the calling Python frame).
            for (const std::string& note : enc.load_notes())
              if (PyErr_WarnEx(PyExc_UserWarning, note.c_str(), 1) != 0) throw nb::python_error();
            return enc;
          },
          "model"_a = nb::none(), "max_tokens"_a = nb::none(), "dtype"_a = "fp32", "int8_outliers"_a = true,
          "int8_attention"_a = true, "outlier_threshold"_a = SentenceLoadOptions{}.outlier_threshold, "layers"_a = nb::none(),
          "Loads a model directory (config.json, model.safetensors, vocab.txt); None: $FFN_MODEL_DIR,\n"
          "else ~/.cache/ffn/all-MiniLM-L6-v2 (scripts/setup.sh installs it). What the files leave\n"
          "unsaid (e.g. no 1_Pooling/config.json: mean pooling) raises a UserWarning each (load_notes).\n"
          "dtype: the FFN sublayers' weights as fp32, bf16 or int8. max_tokens: per text, [CLS] and\n"
          "[SEP] included.\n"
          "int8_outliers: keep each layer's outlier input channels in float32, found by running the\n"
          "float32 model over built-in calibration texts at load (False: plain per-token int8).\n"
          "int8_attention: the attention's Q/K/V and output projections in int8 too (False: FFN only).\n"
          "outlier_threshold: an input channel is kept in float32 where its largest |x| / rms(row) over the\n"
          "calibration texts exceeds this (at most 16 per layer). layers: the layers that take dtype\n"
          "(None: all; the others stay float32), e.g. to find which layer costs int8 its accuracy.")
      .def(
          "tokenize", [](const SentenceEncoder& s, const std::string& text) { return s.tokenize(text); }, "text"_a,
          "Token ids: [CLS] ... [SEP], truncated to max_tokens (no prompt: as sentence-transformers' tokenize).")
      .def(
          "embed",
          [](const SentenceEncoder& s, const std::string& text, std::optional<int> threads,
             std::optional<std::string> prompt_name, std::optional<std::string> prompt, bool truncate,
             const std::string& compute) {
            EmbedOptions o = embed_options(threads, prompt_name, prompt, truncate, compute);
            Interruptible stop;
            o.interrupted = stop.hook();
            Array a;
            stop.run([&] { a = s.embed({text}, o); });
            return to_numpy(a.data, {a.shape[1]});
          },
          "text"_a, "threads"_a = nb::none(), "prompt_name"_a = nb::none(), "prompt"_a = nb::none(),
          "truncate"_a = true, "compute"_a = "fp32",
          "The embedding of one text: float32 [dim]. prompt_name, prompt, truncate, compute: as below.")
      .def(
          "embed",
          [](const SentenceEncoder& s, const std::vector<std::string>& texts, int64_t batch, std::optional<int> threads,
             std::optional<std::string> prompt_name, std::optional<std::string> prompt, bool truncate,
             const std::string& compute) {
            EmbedOptions o = embed_options(threads, prompt_name, prompt, truncate, compute);
            o.batch = batch;
            Interruptible stop;
            o.interrupted = stop.hook();
            Array a;
            stop.run([&] { a = s.embed(texts, o); });
            return to_numpy(a.data, a.shape);
          },
          "texts"_a, "batch"_a = 32, "threads"_a = nb::none(), "prompt_name"_a = nb::none(), "prompt"_a = nb::none(),
          "truncate"_a = true, "compute"_a = "fp32",
          "Embeddings of a list of texts: float32 [len(texts), dim]; batch: texts per encoder call\n"
          "(padding has no effect on the result). prompt_name: the model's prompt of that name\n"
          "(config_sentence_transformers.json; default: its default prompt), or prompt: a text, put\n"
          "before each text, as sentence-transformers' encode. truncate=False: a text longer than\n"
          "max_tokens raises ValueError instead of being cut. compute: 'fp32', or 'bf16' (every\n"
          "projection's operands rounded to bf16, sums in fp32: AMX or AVX512_BF16 where the CPU has\n"
          "them; a model loaded with fp32 or bf16 weights).")
      .def_prop_ro("pooling", &SentenceEncoder::pooling, "The pooling after the encoder: 'mean, normalized', 'cls', ...")
      .def_prop_ro("prompts", &SentenceEncoder::prompts, "The model's prompts: name -> text.")
      .def_prop_ro("default_prompt_name", &SentenceEncoder::default_prompt_name,
                   "The prompt used when none is named ('' for none).")
      .def_prop_ro("dim", &SentenceEncoder::dim)
      .def_prop_ro("max_tokens", &SentenceEncoder::max_tokens)
      .def_prop_ro("model_dir", &SentenceEncoder::dir)
      .def_prop_ro("load_notes", &SentenceEncoder::load_notes,
                   "What load assumed or left unused because the directory's files do not say: one line\n"
                   "each, naming the file (each was also a UserWarning from load).")
      .def_prop_ro("fp32_input_channels", &SentenceEncoder::fp32_input_channels,
                   "Per layer, the FFN input channels kept in float32 (int8 with outliers).");

  nb::class_<CrossEncoder>(m, "CrossEncoder",
                           "A cross-encoder reranker (sentence-transformers' CrossEncoder, e.g.\n"
                           "cross-encoder/ms-marco-MiniLM-L-6-v2): a BERT reads each (query, document) pair and\n"
                           "its classification head scores it.")
      .def_static(
          "load",
          [](const std::string& model, std::optional<int64_t> max_tokens) {
            CrossEncoderLoadOptions o;
            o.max_tokens = max_tokens;
            nb::gil_scoped_release nogil;
            return CrossEncoder::load(model, o);
          },
          "model"_a, "max_tokens"_a = nb::none(),
          "Loads a BertForSequenceClassification, XLMRobertaForSequenceClassification or\n"
          "ModernBertForSequenceClassification directory (config.json, model.safetensors,\n"
          "vocab.txt, sentencepiece.bpe.model or tokenizer.json).\n"
          "max_tokens: tokens per pair (default: the tokenizer's model_max_length).")
      .def(
          "predict",
          [](const CrossEncoder& ce, const std::vector<std::pair<std::string, std::string>>& pairs, int64_t batch,
             std::optional<int> threads, bool truncate) {
            RerankOptions o;
            o.batch = batch;
            o.threads = run_options(threads, false, 0).threads;
            o.truncate = truncate;
            Interruptible stop;
            o.interrupted = stop.hook();
            Array a;
            stop.run([&] { a = ce.predict(pairs, o); });
            if (ce.labels() == 1) return to_numpy(a.data, {a.shape[0]});
            return to_numpy(a.data, a.shape);
          },
          "pairs"_a, "batch"_a = 32, "threads"_a = nb::none(), "truncate"_a = true,
          "Scores of (first, second) text pairs as CrossEncoder.predict: float32 [len(pairs)] for a\n"
          "one-label model, else [len(pairs), labels]. truncate=False: a pair over max_tokens raises\n"
          "ValueError instead of being cut (longest first).")
      .def(
          "rank",
          [](const CrossEncoder& ce, const std::string& query, const std::vector<std::string>& documents,
             std::optional<int64_t> top_k, bool return_documents, int64_t batch, std::optional<int> threads,
             bool truncate) {
            if (top_k && *top_k < 1) throw Error("top_k: expected a positive integer, got " + std::to_string(*top_k));
            RerankOptions o;
            o.truncate = truncate;
            o.batch = batch;
            o.threads = run_options(threads, false, 0).threads;
            Interruptible stop;
            o.interrupted = stop.hook();
            std::vector<std::pair<int64_t, float>> r;
            stop.run([&] { r = ce.rank(query, documents, o); });
            nb::list out;
            for (size_t k = 0; k < r.size() && (!top_k || int64_t(k) < *top_k); ++k) {
              nb::dict d;
              d["corpus_id"] = r[k].first;
              d["score"] = r[k].second;
              if (return_documents) d["text"] = documents[size_t(r[k].first)];
              out.append(d);
            }
            return out;
          },
          "query"_a, "documents"_a, "top_k"_a = nb::none(), "return_documents"_a = false, "batch"_a = 32,
          "threads"_a = nb::none(), "truncate"_a = true,
          "The documents ranked for the query, best first, as CrossEncoder.rank: a list of\n"
          "{'corpus_id', 'score'} (and 'text' with return_documents).")
      .def_prop_ro("labels", &CrossEncoder::labels)
      .def_prop_ro("max_tokens", &CrossEncoder::max_tokens)
      .def_prop_ro("activation", &CrossEncoder::activation, "'identity' or 'sigmoid', as config.json says")
      .def_prop_ro("model_dir", &CrossEncoder::dir);
}

}  // namespace ffn::python
