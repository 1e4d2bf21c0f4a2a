// SentenceEncoder (include/ffn/sentence.hpp): a Hugging Face BERT checkpoint
// mapped onto ffn's encoder, the WordPiece tokenizer, pooling.
#include "ffn/sentence.hpp"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/json_file.hpp"

#include "ffn/diagnostics.hpp"
#include "io/safetensors.hpp"
#include "backends/context.hpp"
#include "ops/norm.hpp"
#include "text/calibration.hpp"
#include "text/wordpiece.hpp"
#include "text/xlmr_tokenizer.hpp"
#include "text/bpe_encoder_tokenizer.hpp"
#include "models/checkpoint.hpp"
#include "models/encoder_family.hpp"
#include "models/pooling.hpp"
#include "models/relative_bias.hpp"
#include "models/sentence_model.hpp"
#include "modules/stack_config.hpp"

namespace ffn {
namespace fs = std::filesystem;


namespace {

using models::json_get;
using models::json_opt;
using models::read_json;

// Embeddings of texts, with the encoder's run options (threads set there); below.
Array embed_texts(const detail::SentenceModel& m, const std::vector<std::string>& texts, const EmbedOptions& opts,
                  EncoderRunOptions o);
Array embed_id_lists(const detail::SentenceModel& m, int64_t N, const std::function<std::vector<int32_t>(int64_t)>& ids_of,
                     const EmbedOptions& opts, EncoderRunOptions o);


// The family's tokenizer from the directory's files; `path`: the vocabulary's file, for messages.
std::shared_ptr<const text::EncoderTokenizer> load_tokenizer(const fs::path& dir, const models::EncoderFamily& family,
                                                             fs::path& path) {
  std::error_code ec;
  const fs::path tp = dir / "tokenizer_config.json";
  const nlohmann::json tc = fs::exists(tp, ec) ? read_json(tp) : nlohmann::json::object();
  if (!tc.is_object()) throw Error(tp.string() + ": expected a JSON object");
  // The tokens in BERT's [CLS], [SEP], [UNK], [PAD] and [MASK] roles (MPNet: <s>, </s>, [UNK], <pad>, <mask>).
  text::WordPieceRoles roles;
  std::vector<std::pair<const char*, std::string*>> keys{
      {"cls_token", &roles.cls}, {"sep_token", &roles.sep}, {"unk_token", &roles.unk}, {"pad_token", &roles.pad},
      {"mask_token", &roles.mask}};
  // A token is written "t" or {"content": "t", ...} (an AddedToken).
  auto token_of = [](const nlohmann::json& v, const fs::path& file, const std::string& key) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    throw Error(file.string() + ": \"" + key + "\" is neither a token nor {\"content\": token}");
  };
  for (auto [key, role] : keys)
    if (tc.contains(key) && !tc[key].is_null()) *role = token_of(tc[key], tp, key);
  // XLM-R's tokenizer: the family's, or named by tokenizer_class (paraphrase-multilingual-MiniLM: a BERT body).
  const std::string tok_class = json_opt<std::string>(tc, "tokenizer_class", "", tp);
  if (family.tokenizer == models::EncoderFamily::Tokenizer::xlmr_sentencepiece ||
      tok_class == "XLMRobertaTokenizer" || tok_class == "XLMRobertaTokenizerFast") {
    // fairseq's ids are XLM-R's tokenizer's own: other special tokens would be another tokenizer.
    const std::pair<const std::string*, const char*> want[] = {
        {&roles.cls, "<s>"}, {&roles.sep, "</s>"}, {&roles.unk, "<unk>"}, {&roles.pad, "<pad>"}, {&roles.mask, "<mask>"}};
    for (size_t k = 0; k < keys.size(); ++k)
      if (tc.contains(keys[k].first) && !tc[keys[k].first].is_null() && *want[k].first != want[k].second)
        throw Error(tp.string() + ": " + keys[k].first + " '" + *want[k].first + "' is not XLM-R's " + want[k].second);
    path = dir / "sentencepiece.bpe.model";
    if (!fs::exists(path, ec))
      throw Error(path.string() + ": not found (XLM-R's tokenizer is its SentencePiece model; a tokenizer.json alone is not read)");
    return std::make_shared<text::XlmrTokenizer>(text::XlmrTokenizer::load(path.string()));
  }
  // A byte-level BPE with its template (ModernBERT): tokenizer.json is the tokenizer.
  if (family.tokenizer == models::EncoderFamily::Tokenizer::bpe_json) {
    path = dir / "tokenizer.json";
    if (!fs::exists(path, ec)) throw Error(path.string() + ": not found (a " + family.model_type +
                                           " model's tokenizer is its tokenizer.json)");
    return std::make_shared<text::BpeEncoderTokenizer>(text::BpeEncoderTokenizer::load(path.string()));
  }
  // WordPiece: the tokenizer this reproduces is uncased, accents stripped, CJK split.
  const bool lower = json_opt<bool>(tc, "do_lower_case", true, tp);
  const bool cjk = json_opt<bool>(tc, "tokenize_chinese_chars", true, tp);
  const bool strip = tc.contains("strip_accents") && !tc["strip_accents"].is_null() ? json_get<bool>(tc, "strip_accents", tp)
                                                                                    : lower;
  if (!lower || !strip || !cjk)
    throw Error(tp.string() + ": only the uncased BERT tokenizer is supported (do_lower_case, strip_accents and "
                "tokenize_chinese_chars on)");
  path = dir / "vocab.txt";
  auto wp = std::make_shared<text::WordPiece>(text::WordPiece::load(path.string(), roles));
  if (fs::exists(dir / "special_tokens_map.json", ec)) {  // the tokens matched verbatim in the text
    const fs::path sp = dir / "special_tokens_map.json";
    const nlohmann::json st = read_json(sp);
    if (!st.is_object()) throw Error(sp.string() + ": expected a JSON object");
    std::vector<std::string> specials;
    for (const auto& [key, v] : st.items())
      if (!v.is_array()) specials.push_back(token_of(v, sp, key));  // (additional_special_tokens: a list, not read)
    wp->set_special_tokens(specials, sp.string());
  }
  return wp;
}
}  // namespace

std::string SentenceEncoder::default_model_dir() {
  if (const char* e = std::getenv("FFN_MODEL_DIR"); e && *e) return e;
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/root") / ".cache" / "ffn" / "all-MiniLM-L6-v2").string();
}

SentenceEncoder::SentenceEncoder() : impl_(std::make_unique<detail::SentenceModel>()) {}
SentenceEncoder::~SentenceEncoder() = default;
SentenceEncoder::SentenceEncoder(SentenceEncoder&&) noexcept = default;
SentenceEncoder& SentenceEncoder::operator=(SentenceEncoder&&) noexcept = default;

SentenceEncoder SentenceEncoder::load(const std::string& dir_in, const SentenceLoadOptions& opts) {
  return load_body(dir_in, opts, true);
}

SentenceEncoder SentenceEncoder::load_body(const std::string& dir_in, const SentenceLoadOptions& opts, bool pipeline) {
  const fs::path dir(dir_in);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(dir_in + ": not a model directory (expected config.json, model.safetensors and vocab.txt" +
                std::string(dir_in == default_model_dir() ? "; scripts/setup.sh installs all-MiniLM-L6-v2 there" : "") + ")");
  SentenceEncoder s;
  detail::SentenceModel& m = *s.impl_;
  m.dir = dir_in;

  const fs::path cfg_path = dir / "config.json";
  m.config_path = cfg_path.string();
  const nlohmann::json cfg = read_json(cfg_path);
  if (!cfg.is_object()) throw Error(cfg_path.string() + ": expected a JSON object");
  const std::string model_type = json_opt<std::string>(cfg, "model_type", "bert", cfg_path);
  const models::EncoderFamily* family = models::find_encoder_family(model_type);
  if (!family)
    throw Error(cfg_path.string() + ": model_type '" + model_type + "' is not supported (" +
                models::encoder_family_names() + ")");
  const models::EncoderNameTable& names = *family->names;
  // The family's stack, as a spec; the encoder's config is made from it.
  const nn::StackSpec spec = family->config(cfg, cfg_path);
  // Rotary positions (ModernBERT): a stack the Encoder cannot hold, run by models::RotaryEncoder.
  const bool rotary = spec.embedding.positions == nn::Positions::rotary;
  if ((spec.embedding.positions != nn::Positions::learned && !rotary) || !spec.embedding.norm)
    throw Error(cfg_path.string() + ": the sentence encoder runs a learned position table or rotary positions with a "
                "norm after the embedding (BERT's, ModernBERT's); model_type '" + model_type + "' has another embedding");
  // The relative position bias (MPNet) is not a layer setting but a table
  // each forward call adds (EncoderRunOptions::position_bias), made below.
  nn::StackSpec layer_spec = spec;
  layer_spec.attention.relative_buckets = layer_spec.attention.relative_max_distance = 0;
  EncoderConfig ec_;
  try {
    if (rotary) {
      spec.validate();
      spec.check_supported(cfg_path.string());
    } else {
      ec_ = nn::encoder_config(layer_spec);
      ec_.validate();
    }
  } catch (const Error& e) {
    const std::string what = e.what();
    throw Error(what.rfind(cfg_path.string(), 0) == 0 ? what : cfg_path.string() + ": " + what);
  }
  if (rotary && opts.dtype != WeightDtype::fp32)
    throw Error(cfg_path.string() + ": model_type '" + model_type + "' runs in float32 only for now (--dtype " +
                std::string(to_string(opts.dtype)) + " is BERT's, MPNet's and XLM-R's)");
  m.eps = rotary ? spec.norm.eps : ec_.eps;
  const int64_t table_rows = spec.embedding.max_positions, offset = spec.embedding.position_offset;
  m.positions = table_rows - offset;
  if (offset > 0) m.position_pad = int32_t(offset - 1);
  const int64_t vocab_size = spec.embedding.vocab;
  const int64_t types = spec.embedding.token_types;
  if (m.positions < 2 || types < 0)
    throw Error(cfg_path.string() + ": max_position_embeddings must leave at least 2 positions and type_vocab_size must not be negative");
  m.d = spec.d_model;

  // Tokens per text: sentence-transformers' max_seq_length, capped by the position table.
  m.max_tokens = m.positions;
  if (fs::exists(dir / "sentence_bert_config.json", ec)) {
    const fs::path sp = dir / "sentence_bert_config.json";
    const int64_t msl = json_opt<int64_t>(read_json(sp), "max_seq_length", m.positions, sp);
    if (msl < 2) throw Error(sp.string() + ": max_seq_length must be at least 2, got " + std::to_string(msl));
    m.max_tokens = std::min(m.positions, msl);
  }
  if (opts.max_tokens) {
    if (*opts.max_tokens < 2 || *opts.max_tokens > m.positions)
      throw Error("max tokens (--max-tokens): expected 2.." + std::to_string(m.positions) +
                  " (the model's position table), got " + std::to_string(*opts.max_tokens));
    m.max_tokens = *opts.max_tokens;
  }
  // What follows the encoder: pooling and normalization (modules.json,
  // 1_Pooling/config.json), and the prompts (config_sentence_transformers.json).
  if (pipeline) {
    m.pooling = models::read_pooling(dir, m.d, m.notes);
    m.prompts = models::read_prompts(dir);
  }
  fs::path tok_path;
  m.vocab = load_tokenizer(dir, *family, tok_path);
  // The tokenizer's ids must index the embedding (which may have rows no id reaches, as transformers allows).
  if (m.vocab->vocab_size() > vocab_size)
    throw Error(tok_path.string() + ": " + std::to_string(m.vocab->vocab_size()) + " tokens, but " +
                cfg_path.string() + " says vocab_size " + std::to_string(vocab_size));

  // Weights: the family's names (BertModel's), with or without its prefix
  // ("bert."), from model.safetensors only: a pytorch_model.bin is a pickle,
  // which runs code when it is read, so it is never read, only named with the
  // way out.
  const fs::path weights_path = dir / "model.safetensors";
  if (const fs::path bin = dir / "pytorch_model.bin"; !fs::exists(weights_path, ec) && fs::exists(bin, ec))
    throw Error(weights_path.string() + ": not found; " + bin.string() +
                " is a PyTorch checkpoint, which ffn does not read (loading it runs pickled code); convert it once "
                "with python -c \"from transformers import AutoModel; AutoModel.from_pretrained('" + dir_in +
                "').save_pretrained('" + dir_in + "', safe_serialization=True)\"");
  const models::TensorSource f = models::TensorSource::open(weights_path.string(), "");
  const std::string pre = !family->optional_prefix.empty() && !f.has(names.name(models::EncTensor::word)) &&
                                  f.has(family->optional_prefix + names.name(models::EncTensor::word))
                              ? family->optional_prefix
                              : "";
  using T = models::EncTensor;
  auto get = [&](T t, int64_t layer, std::vector<int64_t> shape) { return f.read(pre + names.name(t, layer), shape); };
  if (rotary) {  // Norm(word) and the rotary stack
    m.word = get(T::word, -1, {vocab_size, m.d});
    m.ln_weight = get(T::embed_norm, -1, {m.d});
    m.ln_bias = spec.norm.kind == nn::NormKind::layernorm ? get(T::embed_norm_bias, -1, {m.d})
                                                          : std::vector<float>(size_t(m.d), 0.0f);
    m.rotary.emplace(models::RotaryEncoder::load(spec, f, names, pre, m.positions));
    return s;
  }
  // Layers the file holds beyond num_hidden_layers are not run (transformers
  // also loads such a model and warns that those weights were not used).
  int64_t file_layers = 0;
  const std::string q_name = names.names[size_t(models::EncTensor::q)];
  const std::string layer_prefix = pre + q_name.substr(0, q_name.find("{L}"));  // "encoder.layer."
  for (const std::string& name : f.names()) {
    if (name.rfind(layer_prefix, 0) != 0) continue;
    const size_t at = layer_prefix.size(), end = name.find('.', at);
    if (end == std::string::npos || end == at || name.find_first_not_of("0123456789", at) != end) continue;
    if (end - at <= 9) file_layers = std::max<int64_t>(file_layers, std::stoll(name.substr(at, end - at)) + 1);
  }
  if (file_layers > ec_.layers)
    m.notes.push_back(cfg_path.string() + ": num_hidden_layers is " + std::to_string(ec_.layers) + ", but " +
                      f.path() + " holds " + std::to_string(file_layers) + " layers; the tensors of layer" +
                      (file_layers - ec_.layers > 1 ? "s " + std::to_string(ec_.layers) + ".." : " ") +
                      std::to_string(file_layers - 1) + " are not used");
  const int64_t d = m.d, F = ec_.d_ff;
  m.word = get(T::word, -1, {vocab_size, d});
  m.position = get(T::position, -1, {table_rows, d});
  if (types > 0) m.token_type = get(T::token_type, -1, {types, d});
  if (const int64_t buckets = spec.attention.relative_buckets; buckets > 0) {
    // transformers' MPNet reads relative_attention_num_buckets rows but buckets with 32 and distance 128
    // (compute_position_bias's defaults): the config's reader checks it has at least 32.
    const auto w = get(T::relative_bias, -1, {buckets, ec_.heads});
    m.rel_span = m.positions;
    m.rel_bias = models::relative_bias_table(w, 32, ec_.heads, spec.attention.relative_max_distance, m.rel_span);
  }
  m.ln_weight = get(T::embed_norm, -1, {d});
  m.ln_bias = get(T::embed_norm_bias, -1, {d});
  EncoderWeights w;
  for (int64_t l = 0; l < ec_.layers; ++l) {
    EncoderLayerWeights L;
    for (const auto& [wq, bq] : {std::pair{T::q, T::q_bias}, {T::k, T::k_bias}, {T::v, T::v_bias}}) {
      // in_proj packs W_q, W_k, W_v (and their biases)
      const auto wt = get(wq, l, {d, d});
      const auto bs = get(bq, l, {d});
      L.in_proj_weight.insert(L.in_proj_weight.end(), wt.begin(), wt.end());
      L.in_proj_bias.insert(L.in_proj_bias.end(), bs.begin(), bs.end());
    }
    L.out_proj_weight = get(T::o, l, {d, d});
    L.out_proj_bias = get(T::o_bias, l, {d});
    L.norm1_weight = get(T::attn_norm, l, {d});
    L.norm1_bias = get(T::attn_norm_bias, l, {d});
    L.ffn.w1 = get(T::up, l, {F, d});
    L.ffn.b1 = get(T::up_bias, l, {F});
    L.ffn.w2 = get(T::down, l, {d, F});
    L.ffn.b2 = get(T::down_bias, l, {d});
    L.ffn.norm_weight = get(T::ffn_norm, l, {d});
    L.ffn.norm_bias = get(T::ffn_norm_bias, l, {d});
    w.layers.push_back(std::move(L));
  }
  m.encoder.emplace(ec_, std::move(w));
  if (opts.dtype == WeightDtype::fp32) return s;
  std::vector<Int8Options> int8, attention_int8;
  if (!(opts.outlier_threshold >= 0.0f) || !std::isfinite(opts.outlier_threshold))
    throw Error("outlier_threshold: expected a finite number >= 0, got " + std::to_string(opts.outlier_threshold));
  const bool int8_attention = opts.dtype == WeightDtype::int8 && opts.int8_attention;
  if (opts.dtype == WeightDtype::int8 && opts.int8_outliers) {
    // Calibration: each layer's FFN inputs (and attention inputs) under the float32 model, each channel's
    // largest |x| / rms(row) (input_peak_ratio: an outlier whatever the row's scale; MPNet's [CLS] and
    // [SEP] rows are near 0.1 but for a channel near 2.8).
    std::vector<std::vector<float>> peak(static_cast<size_t>(ec_.layers)), peak_attn(peak.size());
    EncoderRunOptions o;
    o.ffn_input = [&](int64_t l, const float* x, int64_t n) {
      m.encoder->ffn_layer(l).input_peak_ratio(x, n, peak[size_t(l)], opts.isa);
    };
    if (int8_attention)  // the same statistic (a post-norm layer: no norm before either)
      o.attention_input = [&](int64_t l, const float* x, int64_t n) {
        m.encoder->ffn_layer(l).input_peak_ratio(x, n, peak_attn[size_t(l)], opts.isa);
      };
    EmbedOptions calibration;
    calibration.isa = opts.isa;
    embed_texts(m, opts.calibration_texts.empty() ? text::calibration_texts() : opts.calibration_texts, calibration, o);
    for (const auto& a : peak) int8.push_back(Int8Options::outliers(a, opts.outlier_threshold));
    if (int8_attention)
      for (const auto& a : peak_attn) attention_int8.push_back(Int8Options::outliers(a, opts.outlier_threshold));
  } else if (int8_attention) {
    attention_int8.assign(size_t(ec_.layers), Int8Options{});
  }
  m.encoder.emplace(m.encoder->converted(opts.dtype, opts.dtype_layers, int8, attention_int8));
  return s;
}

std::vector<std::vector<int64_t>> SentenceEncoder::fp32_input_channels() const {
  std::vector<std::vector<int64_t>> c;
  if (!impl_->encoder) return c;  // a rotary stack: float32
  for (int64_t l = 0; l < impl_->encoder->config().layers; ++l)
    c.push_back(impl_->encoder->ffn_layer(l).fp32_input_channels());
  return c;
}

std::vector<int32_t> SentenceEncoder::tokenize(const std::string& text, bool* cut) const {
  return impl_->vocab->encode(text, impl_->max_tokens, "text", cut);
}

std::string SentenceEncoder::prompt_text(const EmbedOptions& opts) const {
  return impl_->prompts.choose(opts.prompt, opts.prompt_name);
}

const std::vector<std::string>& SentenceEncoder::load_notes() const { return impl_->notes; }
int64_t SentenceEncoder::dim() const { return impl_->pooling.dim(impl_->d); }
std::string SentenceEncoder::pooling() const { return impl_->pooling.describe(); }
const std::map<std::string, std::string>& SentenceEncoder::prompts() const { return impl_->prompts.named; }
const std::string& SentenceEncoder::default_prompt_name() const { return impl_->prompts.default_name; }
int64_t SentenceEncoder::max_tokens() const { return impl_->max_tokens; }
const Encoder& SentenceEncoder::encoder() const {
  if (!impl_->encoder)
    throw Error(impl_->config_path + ": this model's stack (rotary positions, local windows: ModernBERT's) is not an "
                "ffn::Encoder");
  return *impl_->encoder;
}
const std::string& SentenceEncoder::dir() const { return impl_->dir; }

namespace {

// x[B, S, d] (padding left zero) = LayerNorm(word + position + token type) of each text's ids (types null: type 0).
void embed_tokens(const detail::SentenceModel& m, const std::vector<std::vector<int32_t>>& ids,
                  const std::vector<std::vector<int32_t>>* types, int64_t S, float* x, const nn::Context& ctx) {
  const int64_t d = m.d;
  for (size_t b = 0; b < ids.size(); ++b) {
    const int64_t n = int64_t(ids[b].size());
    float* xb = x + int64_t(b) * S * d;
    int64_t counted = 0;  // non-pad ids so far (RoBERTa's and MPNet's positions)
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = ids[b][size_t(i)];
      const float* w = m.word.data() + int64_t(id) * d;
      if (m.position.empty()) {  // rotary positions: in the attention
        std::copy(w, w + d, xb + i * d);
        continue;
      }
      int64_t row = i;
      if (m.position_pad >= 0) row = m.position_pad + (id == m.position_pad ? 0 : ++counted);
      const float* p = m.position.data() + row * d;
      for (int64_t j = 0; j < d; ++j) xb[i * d + j] = w[j] + p[j];
      if (!m.token_type.empty()) {
        const float* t = m.token_type.data() + (types ? int64_t((*types)[b][size_t(i)]) * d : 0);
        for (int64_t j = 0; j < d; ++j) xb[i * d + j] += t[j];
      }
    }
    std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
    nn::norm_forward(ctx, NormType::layernorm, m.eps, xb, n, d, m.ln_weight.data(),
                     m.ln_bias.data(), xb, mean.data(), rstd.data());
  }
}

}  // namespace

std::vector<float> SentenceEncoder::hidden(const std::vector<int32_t>& ids, int threads,
                                           const EncoderRunOptions& opts) const {
  const detail::SentenceModel& m = *impl_;
  const int64_t n = int64_t(ids.size()), d = m.d;
  if (n > m.positions) throw Error("hidden: " + std::to_string(n) + " tokens, more than the position table's " + std::to_string(m.positions));
  for (int32_t id : ids)
    if (id < 0 || id >= m.vocab->vocab_size()) throw Error("hidden: token id " + std::to_string(id) + " outside the vocabulary");
  std::vector<float> x(size_t(n * d)), y(x.size());
  const int t = resolve_threads(threads);
  embed_tokens(m, {ids}, nullptr, n, x.data(), nn::Context(opts.isa, t));
  EncoderRunOptions o = opts;
  o.threads = t;
  if (!m.rel_bias.empty() && !o.position_bias) {  // the model's table, unless the call brings one
    o.position_bias = m.rel_bias.data();
    o.position_bias_span = m.rel_span;
  }
  if (m.rotary) m.rotary->forward(x.data(), y.data(), Shape{1, n, Layout::tokens, {}}, o);
  else m.encoder->forward(x.data(), y.data(), Shape{1, n, Layout::tokens, {}}, o);
  return y;
}

Array SentenceEncoder::embed(const std::vector<std::string>& texts, const EmbedOptions& opts) const {
  return embed_texts(*impl_, texts, opts, {});
}

Array SentenceEncoder::embed_ids(const std::vector<std::vector<int32_t>>& ids, const EmbedOptions& opts) const {
  const detail::SentenceModel& m = *impl_;
  for (size_t b = 0; b < ids.size(); ++b) {
    const std::string at = "input " + std::to_string(b);
    if (ids[b].empty()) throw Error(at + ": no token ids");
    if (int64_t(ids[b].size()) > m.max_tokens)
      throw Error(at + ": " + std::to_string(ids[b].size()) + " token ids, more than the model's " + std::to_string(m.max_tokens));
    for (int32_t id : ids[b])
      if (id < 0 || id >= m.vocab->vocab_size())
        throw Error(at + ": token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                    std::to_string(m.vocab->vocab_size() - 1) + ")");
  }
  return embed_id_lists(m, int64_t(ids.size()), [&](int64_t b) { return ids[size_t(b)]; }, opts, {});
}

namespace {

Array embed_texts(const detail::SentenceModel& m, const std::vector<std::string>& texts, const EmbedOptions& opts,
                  EncoderRunOptions o) {
  const std::string prompt = m.prompts.choose(opts.prompt, opts.prompt_name);
  return embed_id_lists(m, int64_t(texts.size()), [&](int64_t b) {
    const std::string what = "text " + std::to_string(b) + (prompt.empty() ? "" : " with its prompt");
    bool cut = false;
    std::vector<int32_t> ids = m.vocab->encode(prompt + texts[size_t(b)], m.max_tokens, what, &cut);
    if (cut && !opts.truncate)
      throw Error(what + ": more than the model's " + std::to_string(m.max_tokens) +
                  " tokens (its special tokens included), and truncation is off (--no-truncate, truncate=False)");
    if (cut && opts.truncated) opts.truncated(b);
    return ids;
  }, opts, std::move(o));
}

// Embeddings of N token lists (ids_of(b): list b, read one batch at a time).
Array embed_id_lists(const detail::SentenceModel& m, int64_t N, const std::function<std::vector<int32_t>(int64_t)>& ids_of,
                     const EmbedOptions& opts, EncoderRunOptions o) {
  if (opts.batch < 1) throw Error("batch: expected a positive integer, got " + std::to_string(opts.batch));
  const int threads = resolve_threads(opts.threads);
  const int64_t d = m.d;
  Array out;
  const int64_t dim = m.pooling.dim(d);
  out.shape = {N, dim};
  out.data.assign(size_t(N * dim), 0.0f);
  std::vector<float> y;
  // A stop is asked for before each batch and inside the encoder (between its sublayers).
  if (opts.interrupted) o.interrupted = opts.interrupted;
  o.isa = opts.isa;
  if (opts.compute == Compute::bf16) {
    if (m.rotary)
      throw Error(m.config_path + ": compute bf16: this model runs in float32 only for now (bf16 compute is BERT's, "
                  "MPNet's and XLM-R's)");
    for (int64_t l = 0; l < m.encoder->config().layers; ++l)
      if (m.encoder->ffn_layer(l).weight_dtype() == WeightDtype::int8)
        throw Error("compute bf16: layer " + std::to_string(l) +
                    " was loaded with int8 weights; expected fp32 or bf16 weights (dtype)");
  }
  o.compute = opts.compute;
  for (int64_t b0 = 0; b0 < N; b0 += opts.batch) {
    if (o.interrupted && o.interrupted()) throw Interrupted();
    const int64_t B = std::min(opts.batch, N - b0);
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) ids[size_t(b)] = ids_of(b0 + b);
    Shape shape;
    models::encode_ids(m, ids, nullptr, threads, o, shape, y);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = shape.lengths[size_t(b)];
      const float* h = y.data() + b * shape.seq * d;
      m.pooling.pool(h, n, d, out.data.data() + (b0 + b) * dim);
    }
    if (opts.progress) opts.progress(b0 + B, N);
  }
  return out;
}

}  // namespace

void models::encode_ids(const detail::SentenceModel& m, const std::vector<std::vector<int32_t>>& ids,
                        const std::vector<std::vector<int32_t>>* types, int threads, EncoderRunOptions o, Shape& shape,
                        std::vector<float>& y) {
  shape = Shape{int64_t(ids.size()), 0, Layout::tokens, {}};
  for (const auto& l : ids) {
    shape.lengths.push_back(int64_t(l.size()));
    shape.seq = std::max(shape.seq, shape.lengths.back());
  }
  std::vector<float> x(size_t(shape.batch * shape.seq * m.d), 0.0f);
  y.resize(x.size());
  embed_tokens(m, ids, types, shape.seq, x.data(), nn::Context(o.isa, threads));
  o.threads = threads;
  if (!m.rel_bias.empty()) {
    o.position_bias = m.rel_bias.data();
    o.position_bias_span = m.rel_span;
  }
  if (m.rotary) m.rotary->forward(x.data(), y.data(), shape, o);
  else m.encoder->forward(x.data(), y.data(), shape, o);
}

}  // namespace ffn
