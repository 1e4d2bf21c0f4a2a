// MarianMT checkpoints (include/ffn/translation.hpp): the mapping of
// transformers' names onto ffn::Encoder and ffn::Decoder, the embeddings and
// positions, the output projection, and greedy and beam search as
// transformers 4.46's generate (GenerationMixin._sample / _beam_search,
// BeamSearchScorer, BeamHypotheses).
#include "ffn/translation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "backends/cpu/isa.hpp"
#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "core/positions.hpp"
#include "core/thread_pool.hpp"
#include "core/json_file.hpp"
#include "ops/linear.hpp"
#include "decoding/decoding.hpp"
#include "models/checkpoint.hpp"

namespace ffn {

namespace fs = std::filesystem;
using models::json_get;
using models::json_opt;

namespace {

constexpr int64_t kMaxVocab = int64_t(1) << 24, kMaxPositions = int64_t(1) << 20;

Activation marian_activation(const std::string& name, const fs::path& p) {
  if (name == "swish" || name == "silu") return Activation::silu;
  if (name == "gelu") return Activation::gelu;
  if (name == "relu") return Activation::relu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  throw Error(p.string() + ": \"activation_function\" is '" + name +
              "', expected swish, silu, gelu, gelu_new, gelu_pytorch_tanh or relu");
}

int64_t positive(const nlohmann::json& j, const char* key, const fs::path& p, int64_t max) {
  const int64_t v = json_get<int64_t>(j, key, p);
  if (v < 1 || v > max)
    throw Error(p.string() + ": \"" + key + "\" is " + std::to_string(v) + ", expected 1.." + std::to_string(max));
  return v;
}

}  // namespace

// Marian's sinusoidal table: row p, column j < ⌈d/2⌉ is sin(p / 10000^(2j/d)),
// column ⌈d/2⌉ + j is cos(p / 10000^(2j/d)) (transformers computes it in
// double with numpy and rounds to float32, as here).
std::vector<float> marian_positions(int64_t n, int64_t d) {
  std::vector<float> t(size_t(n * d));
  const int64_t half = (d + 1) / 2;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t j = 0; j < d; ++j) {
      const double angle = double(p) / std::pow(10000.0, double(2 * (j / 2)) / double(d));
      const int64_t col = j % 2 == 0 ? j / 2 : half + j / 2;
      t[size_t(p * d + col)] = float(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  return t;
}

TranslationModel::TranslationModel(TranslationConfig cfg, Encoder e, Decoder d)
    : cfg_(std::move(cfg)), encoder_(std::move(e)), decoder_(std::move(d)) {}

TranslationModel TranslationModel::load(const std::string& dir_in, WeightDtype dtype) {
  const fs::path dir(dir_in);
  const fs::path cfg_path = dir / "config.json", gen_path = dir / "generation_config.json",
                 w_path = dir / "model.safetensors";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(dir_in + ": not a directory (expected a MarianMT model: config.json, model.safetensors)");
  for (const fs::path& p : {cfg_path, w_path})
    if (!fs::exists(p, ec)) throw Error(p.string() + ": missing (a MarianMT directory holds config.json and model.safetensors)");
  const nlohmann::json j = models::read_json(cfg_path);
  if (!j.is_object()) throw Error(cfg_path.string() + ": expected a JSON object");
  const std::string type = json_opt<std::string>(j, "model_type", "", cfg_path);
  if (type != "marian")
    throw Error(cfg_path.string() + ": \"model_type\" is '" + type + "', expected marian (a MarianMTModel checkpoint)");
  TranslationConfig c;
  c.d_model = positive(j, "d_model", cfg_path, int64_t(1) << 16);
  c.vocab_size = positive(j, "vocab_size", cfg_path, kMaxVocab);
  c.decoder_vocab_size = json_opt<int64_t>(j, "decoder_vocab_size", c.vocab_size, cfg_path);
  if (c.decoder_vocab_size < 1 || c.decoder_vocab_size > kMaxVocab)
    throw Error(cfg_path.string() + ": \"decoder_vocab_size\" is " + std::to_string(c.decoder_vocab_size) + ", expected 1.." +
                std::to_string(kMaxVocab));
  c.max_positions = positive(j, "max_position_embeddings", cfg_path, kMaxPositions);
  c.scale_embedding = json_opt<bool>(j, "scale_embedding", false, cfg_path);
  c.shared_embeddings = json_opt<bool>(j, "share_encoder_decoder_embeddings", true, cfg_path);
  c.tied_head = json_opt<bool>(j, "tie_word_embeddings", true, cfg_path);
  if (c.shared_embeddings) c.decoder_vocab_size = c.vocab_size;  // transformers ignores decoder_vocab_size then
  if (c.tied_head && c.decoder_vocab_size != c.vocab_size)
    throw Error(cfg_path.string() + ": \"tie_word_embeddings\" ties the output projection to the " +
                std::to_string(c.vocab_size) + " source embeddings, but \"decoder_vocab_size\" is " +
                std::to_string(c.decoder_vocab_size) + " (transformers cannot run this model either)");
  const Activation act = marian_activation(json_opt<std::string>(j, "activation_function", "gelu", cfg_path), cfg_path);
  if (json_opt<bool>(j, "normalize_before", false, cfg_path))
    throw Error(cfg_path.string() + ": \"normalize_before\" is true; MarianMT layers are post-LN");
  for (auto [stack, layers, heads, ffn_dim] :
       {std::tuple{&c.encoder, "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim"},
        std::tuple{&c.decoder, "decoder_layers", "decoder_attention_heads", "decoder_ffn_dim"}}) {
    stack->d_model = c.d_model;
    stack->layers = positive(j, layers, cfg_path, 4096);
    stack->heads = positive(j, heads, cfg_path, c.d_model);
    if (c.d_model % stack->heads != 0)
      throw Error(cfg_path.string() + ": \"" + heads + "\" " + std::to_string(stack->heads) + " does not divide d_model " +
                  std::to_string(c.d_model));
    stack->d_ff = positive(j, ffn_dim, cfg_path, int64_t(1) << 20);
    stack->activation = act;
    stack->norm = NormPlacement::post;
    stack->norm_type = NormType::layernorm;
    stack->eps = 1e-5f;  // nn.LayerNorm's default, which MarianMT uses
    stack->bias = true;
    stack->final_norm = false;
  }
  // Token ids: generation_config.json overrides config.json, as in transformers.
  nlohmann::json g = nlohmann::json::object();
  if (fs::exists(gen_path, ec)) {
    g = models::read_json(gen_path);
    if (!g.is_object()) throw Error(gen_path.string() + ": expected a JSON object");
  }
  auto id = [&](const char* key, std::optional<int64_t> otherwise) -> std::optional<int64_t> {
    std::optional<int64_t> v = otherwise;
    if (j.contains(key) && !j.at(key).is_null()) v = json_get<int64_t>(j, key, cfg_path);
    if (g.contains(key) && !g.at(key).is_null()) v = json_get<int64_t>(g, key, gen_path);
    if (v && (*v < 0 || *v >= c.decoder_vocab_size))
      throw Error((g.contains(key) ? gen_path : cfg_path).string() + ": \"" + key + "\" is " + std::to_string(*v) +
                  ", outside the target vocabulary of " + std::to_string(c.decoder_vocab_size));
    return v;
  };
  const auto pad = id("pad_token_id", std::nullopt), eos = id("eos_token_id", std::nullopt);
  if (!pad) throw Error(cfg_path.string() + ": no \"pad_token_id\"");
  if (!eos) throw Error(cfg_path.string() + ": no \"eos_token_id\"");
  c.pad_id = *pad;
  c.eos_id = *eos;
  c.decoder_start_id = *id("decoder_start_token_id", c.pad_id);
  // Generation settings: from generation_config.json alone when it exists
  // (transformers' GenerationConfig.from_pretrained, its defaults for absent
  // keys), else from config.json.
  const bool has_gen = fs::exists(gen_path, ec);
  const nlohmann::json& gs = has_gen ? g : j;
  const fs::path& gs_path = has_gen ? gen_path : cfg_path;
  auto setting = [&](const char* key, auto otherwise) { return json_opt<decltype(otherwise)>(gs, key, otherwise, gs_path); };
  c.forced_eos_id.reset();
  if (gs.contains("forced_eos_token_id") && !gs.at("forced_eos_token_id").is_null()) {
    c.forced_eos_id = json_get<int64_t>(gs, "forced_eos_token_id", gs_path);
    if (*c.forced_eos_id < 0 || *c.forced_eos_id >= c.decoder_vocab_size)
      throw Error(gs_path.string() + ": \"forced_eos_token_id\" is " + std::to_string(*c.forced_eos_id) +
                  ", outside the target vocabulary of " + std::to_string(c.decoder_vocab_size));
  }
  c.num_beams = setting("num_beams", int64_t(1));
  c.max_length = setting("max_length", int64_t(20));
  c.length_penalty = setting("length_penalty", 1.0);
  c.early_stopping = setting("early_stopping", false);
  c.min_length = setting("min_length", int64_t(0));
  if (gs.contains("min_new_tokens") && !gs.at("min_new_tokens").is_null())
    c.min_new_tokens = json_get<int64_t>(gs, "min_new_tokens", gs_path);
  if (gs.contains("max_new_tokens") && !gs.at("max_new_tokens").is_null()) {
    // transformers: max_new_tokens overrides max_length (the start token counted).
    const int64_t n = json_get<int64_t>(gs, "max_new_tokens", gs_path);
    if (n < 1) throw Error(gs_path.string() + ": \"max_new_tokens\" is " + std::to_string(n) + ", expected ≥ 1");
    c.max_length = n + 1;
  }
  c.renormalize_logits = setting("renormalize_logits", false);
  // Settings that change the result and that ffn does not implement: refused
  // unless they hold transformers' default.
  const std::vector<std::pair<const char*, nlohmann::json>> unsupported = {
      {"do_sample", false}, {"num_return_sequences", 1}, {"repetition_penalty", 1.0}, {"no_repeat_ngram_size", 0},
      {"encoder_no_repeat_ngram_size", 0}, {"num_beam_groups", 1}, {"diversity_penalty", 0.0},
      {"forced_bos_token_id", nullptr}, {"suppress_tokens", nullptr}, {"begin_suppress_tokens", nullptr},
      {"exponential_decay_length_penalty", nullptr}, {"sequence_bias", nullptr}, {"force_words_ids", nullptr},
      {"constraints", nullptr}, {"encoder_repetition_penalty", 1.0}, {"remove_invalid_values", false},
      {"penalty_alpha", nullptr}, {"epsilon_cutoff", 0.0}, {"eta_cutoff", 0.0}, {"typical_p", 1.0}};
  for (const auto& [key, def] : unsupported)
    if (gs.contains(key) && !gs.at(key).is_null() && !(gs.at(key).is_array() && gs.at(key).empty()) && gs.at(key) != def && !(def.is_number() && gs.at(key).is_number() &&
                                                                             gs.at(key).get<double>() == def.get<double>()))
      throw Error(gs_path.string() + ": \"" + key + "\" is " + gs.at(key).dump() + "; ffn's generation does not " +
                  "implement it (supported: num_beams, max_length, max_new_tokens, min_length, min_new_tokens, " +
                  "length_penalty, early_stopping, bad_words_ids, forced_eos_token_id, renormalize_logits)");
  if (gs.contains("early_stopping") && gs.at("early_stopping").is_string())
    throw Error(gs_path.string() + ": \"early_stopping\" is " + gs.at("early_stopping").dump() +
                "; ffn supports true and false");
  if (c.num_beams < 1 || c.num_beams > 1024)
    throw Error(gs_path.string() + ": \"num_beams\" is " + std::to_string(c.num_beams) + ", expected 1..1024");
  if (c.max_length < 2) throw Error(gs_path.string() + ": \"max_length\" is " + std::to_string(c.max_length) + ", expected ≥ 2");
  if (gs.contains("bad_words_ids") && !gs.at("bad_words_ids").is_null()) {
    std::vector<std::vector<int64_t>> bad;
    try {
      bad = gs.at("bad_words_ids").get<std::vector<std::vector<int64_t>>>();
    } catch (const nlohmann::json::exception&) {
      throw Error(gs_path.string() + ": \"bad_words_ids\" is not a list of lists of token ids");
    }
    for (const auto& w : bad) {
      if (w.size() != 1)
        throw Error(gs_path.string() + ": \"bad_words_ids\" holds a sequence of " + std::to_string(w.size()) +
                    " ids; only single-token bad words are supported");
      if (w[0] < 0 || w[0] >= c.decoder_vocab_size)
        throw Error(gs_path.string() + ": \"bad_words_ids\" holds " + std::to_string(w[0]) + ", outside the vocabulary");
      c.bad_words.push_back(w[0]);
    }
  }

  // The tensors.
  // Read lazily, tensor by tensor (src/models/checkpoint.hpp).
  const models::TensorSource f = models::TensorSource::open(w_path.string(), "config.json");
  const int64_t d = c.d_model;
  using T = models::Seq2SeqTensor;
  const models::Seq2SeqNameTable& names = models::marian_names();
  auto tensor = [&](T t, int64_t layer, std::vector<int64_t> shape) { return f.read(names.name(t, layer), shape); };
  auto has = [&](T t, int64_t layer = -1) { return f.has(names.name(t, layer)); };
  auto at = [](T base, int k) { return T(int(base) + k); };
  // An attention block's tensors from its Q weight on: Q, K, V (packed into
  // in_proj) and the output projection, each weight then bias.
  auto attention = [&](T q, int64_t l, std::vector<float>& in_w, std::vector<float>& in_b, std::vector<float>& out_w,
                       std::vector<float>& out_b) {
    in_w.clear();
    in_b.clear();
    for (int k = 0; k < 6; k += 2) {
      const std::vector<float> w = tensor(at(q, k), l, {d, d});
      const std::vector<float> b = tensor(at(q, k + 1), l, {d});
      in_w.insert(in_w.end(), w.begin(), w.end());
      in_b.insert(in_b.end(), b.begin(), b.end());
    }
    out_w = tensor(at(q, 6), l, {d, d});
    out_b = tensor(at(q, 7), l, {d});
  };
  // The FFN's tensors from its up projection on: up, down, the norm after it.
  auto ffn_weights = [&](T up, int64_t l, int64_t F) {
    Weights w;
    w.w1 = tensor(at(up, 0), l, {F, d});
    w.b1 = tensor(at(up, 1), l, {F});
    w.w2 = tensor(at(up, 2), l, {d, F});
    w.b2 = tensor(at(up, 3), l, {d});
    w.norm_weight = tensor(at(up, 4), l, {d});
    w.norm_bias = tensor(at(up, 5), l, {d});
    return w;
  };
  EncoderWeights ew = EncoderWeights::zeros(c.encoder);
  for (int64_t l = 0; l < c.encoder.layers; ++l) {
    auto& lw = ew.layers[size_t(l)];
    attention(T::enc_q, l, lw.in_proj_weight, lw.in_proj_bias, lw.out_proj_weight, lw.out_proj_bias);
    lw.norm1_weight = tensor(T::enc_attn_norm, l, {d});
    lw.norm1_bias = tensor(T::enc_attn_norm_bias, l, {d});
    lw.ffn = ffn_weights(T::enc_up, l, c.encoder.d_ff);
  }
  DecoderWeights dw = DecoderWeights::zeros(c.decoder);
  for (int64_t l = 0; l < c.decoder.layers; ++l) {
    auto& lw = dw.layers[size_t(l)];
    attention(T::dec_q, l, lw.self_attn.in_proj_weight, lw.self_attn.in_proj_bias, lw.self_attn.out_proj_weight,
              lw.self_attn.out_proj_bias);
    attention(T::dec_cross_q, l, lw.cross_attn.in_proj_weight, lw.cross_attn.in_proj_bias,
              lw.cross_attn.out_proj_weight, lw.cross_attn.out_proj_bias);
    lw.norm1_weight = tensor(T::dec_attn_norm, l, {d});
    lw.norm1_bias = tensor(T::dec_attn_norm_bias, l, {d});
    lw.norm2_weight = tensor(T::dec_cross_norm, l, {d});
    lw.norm2_bias = tensor(T::dec_cross_norm_bias, l, {d});
    lw.ffn = ffn_weights(T::dec_up, l, c.decoder.d_ff);
  }
  if (has(T::enc_up, c.encoder.layers) || has(T::dec_up, c.decoder.layers))
    throw Error(w_path.string() + ": holds more layers than config.json's encoder_layers / decoder_layers");
  Encoder enc(c.encoder, std::move(ew));
  Decoder dec(c.decoder, std::move(dw));
  if (dtype != WeightDtype::fp32) {
    // int8: the decoder's attention projections too (and the output
    // projection, below). The encoder's stay fp32: on the test models their
    // int8 form moved the logits by up to 0.3 of the largest (the token
    // signal is small beside the positions in the first layer's input).
    enc = enc.converted(dtype);
    dec = dec.converted(dtype, dtype == WeightDtype::int8);
  }
  TranslationModel m(c, std::move(enc), std::move(dec));
  // Embeddings: transformers saves one of tied tensors (model.shared.weight
  // when shared); accept any of the tied names.
  auto first_of = [&](std::initializer_list<T> tied, int64_t rows) {
    for (T t : tied)
      if (has(t)) return tensor(t, -1, {rows, d});
    return tensor(*tied.begin(), -1, {rows, d});  // the error names the first
  };
  if (c.shared_embeddings) {
    m.src_embed_ = first_of({T::shared, T::enc_embed, T::dec_embed}, c.vocab_size);
  } else {
    m.src_embed_ = first_of({T::enc_embed}, c.vocab_size);
    // transformers makes both tables copies of one of vocab_size rows
    // (resize_decoder_token_embeddings: decoder_vocab_size rows); every
    // target id (< decoder_vocab_size) must have a row.
    const std::string name = names.name(T::dec_embed);
    const std::vector<int64_t> sh = f.shape(name);
    if (sh.size() != 2 || sh[1] != d || (sh[0] != c.vocab_size && sh[0] != c.decoder_vocab_size) ||
        sh[0] < c.decoder_vocab_size)
      models::throw_shape_error(w_path.string(), name, sh,
                                "[" + std::to_string(std::max(c.vocab_size, c.decoder_vocab_size)) + ", " +
                                    std::to_string(d) + "]",
                                "config.json's vocab_size / decoder_vocab_size: one row per target id");
    m.tgt_embed_ = f.read(name, sh);
  }
  if (!c.tied_head) m.head_ = tensor(T::head, -1, {c.decoder_vocab_size, d});
  m.logits_bias_ = has(T::logits_bias) ? tensor(T::logits_bias, -1, {1, c.decoder_vocab_size})
                                            : std::vector<float>(size_t(c.decoder_vocab_size), 0.0f);
  // opus-mt's final_logits_bias is all zeros: adding it would only sweep
  // the [n, vocabulary] logits once more (and turn −0 into +0, which
  // compares equal everywhere the logits are used).
  const bool no_bias =
      std::all_of(m.logits_bias_.begin(), m.logits_bias_.end(), [](float v) { return v == 0.0f; });
  auto head = std::make_shared<nn::Linear>(m.head().data(), d, c.decoder_vocab_size,
                                           no_bias ? nullptr : m.logits_bias_.data());
  if (dtype == WeightDtype::int8)
    head->set_int8(std::make_shared<const nn::Int8Linear>(
        nn::quantize_linear(m.head().data(), d, c.decoder_vocab_size, {}, "output projection")));
  m.head_linear_ = std::move(head);
  m.positions_ = marian_positions(c.max_positions, d);
  return m;
}

void TranslationModel::embed(const std::vector<float>& table, int64_t id, int64_t position, float* out) const {
  const int64_t d = cfg_.d_model;
  const float scale = cfg_.scale_embedding ? float(std::sqrt(double(d))) : 1.0f;
  const float* e = table.data() + id * d;
  const float* p = positions_.data() + position * d;
  for (int64_t j = 0; j < d; ++j) out[j] = e[j] * scale + p[j];
}

void TranslationModel::project(const float* h, int64_t n, float* logits, int threads, Isa isa) const {
  static_cast<const nn::Linear*>(head_linear_.get())->forward(nn::Context(isa, threads), h, n, logits);
}

void TranslationModel::encode(const std::vector<std::vector<int64_t>>& sources, std::vector<float>& memory,
                              Shape& shape, const GenerateOptions& opts) const {
  const int64_t d = cfg_.d_model, B = int64_t(sources.size());
  int64_t S = 0;
  for (size_t b = 0; b < sources.size(); ++b) {
    const auto& s = sources[b];
    if (s.empty()) throw Error("source " + std::to_string(b) + " is empty (a source ends with EOS, id " +
                               std::to_string(cfg_.eos_id) + ")");
    if (int64_t(s.size()) > cfg_.max_positions)
      throw Error("source " + std::to_string(b) + " has " + std::to_string(s.size()) + " tokens, more than the " +
                  std::to_string(cfg_.max_positions) + " positions of the model (max_position_embeddings)");
    for (int64_t id : s)
      if (id < 0 || id >= cfg_.vocab_size)
        throw Error("source " + std::to_string(b) + ": token id " + std::to_string(id) + " is outside the vocabulary of " +
                    std::to_string(cfg_.vocab_size));
    S = std::max<int64_t>(S, int64_t(s.size()));
  }
  shape = Shape{B, S, Layout::tokens, {}};
  std::vector<float> x(size_t(B * S * d), 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    shape.lengths.push_back(int64_t(sources[size_t(b)].size()));
    for (size_t i = 0; i < sources[size_t(b)].size(); ++i)
      embed(src_embed_, sources[size_t(b)][i], int64_t(i), x.data() + (b * S + int64_t(i)) * d);
  }
  memory.assign(x.size(), 0.0f);
  EncoderRunOptions eo;
  eo.threads = opts.threads;
  eo.isa = opts.isa;
  eo.interrupted = opts.interrupted;
  encoder_.forward(x.data(), memory.data(), shape, eo);
}

std::vector<float> TranslationModel::logits(const std::vector<int64_t>& source, const std::vector<int64_t>& decoder_input,
                                            const RunOptions& opts) const {
  GenerateOptions go;
  go.threads = opts.threads;
  go.isa = opts.isa;
  std::vector<float> memory;
  Shape ms;
  encode({source}, memory, ms, go);
  const int64_t d = cfg_.d_model, T = int64_t(decoder_input.size());
  if (T > cfg_.max_positions) throw Error("decoder input longer than the position table");
  std::vector<float> x(size_t(T * d)), y(x.size()), out(size_t(T * cfg_.decoder_vocab_size));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = decoder_input[size_t(t)];
    if (id < 0 || id >= cfg_.decoder_vocab_size) throw Error("decoder input id " + std::to_string(id) + " is outside the vocabulary");
    embed(target_embeddings(), id, t, x.data() + t * d);
  }
  DecoderRunOptions ro;
  ro.threads = opts.threads;
  ro.isa = opts.isa;
  decoder_.forward(x.data(), Shape{1, T, Layout::tokens, {}}, memory.data(), ms, y.data(), ro);
  project(y.data(), T, out.data(), nn::thread_count(opts), opts.isa);
  return out;
}

// ---- generation ----------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::vector<std::vector<int64_t>> TranslationModel::generate(const std::vector<std::vector<int64_t>>& sources,
                                                             const GenerateOptions& opts, GenerateTimes* times) const {
  const bool sampling = opts.temperature != 0.0f;
  const int64_t beams = opts.beams.value_or(sampling ? 1 : cfg_.num_beams);
  const int64_t N = opts.max_new_tokens.value_or(cfg_.max_length - 1);
  if (beams < 1 || beams > 1024) throw Error("beams: expected 1..1024, got " + std::to_string(beams));
  if (N < 1) throw Error("max_new_tokens: expected a positive number, got " + std::to_string(N));
  if (N > cfg_.max_positions)
    throw Error("max_new_tokens " + std::to_string(N) + " is past the model's " + std::to_string(cfg_.max_positions) +
                " positions (max_position_embeddings)");
  if (beams > cfg_.decoder_vocab_size / 2)
    throw Error("beams: " + std::to_string(beams) + " is more than half the target vocabulary");
  {
    SamplingOptions so;  // the sampling settings' ranges, named as the command line names them
    so.max_new_tokens = N;
    so.temperature = opts.temperature;
    so.top_k = opts.top_k;
    so.top_p = opts.top_p;
    so.repeat_penalty = opts.repeat_penalty;
    so.beams = beams;
    so.validate();
  }
  GenerateTimes local;
  GenerateTimes& tm = times ? *times : local;
  RunOptions ro;
  ro.threads = opts.threads;
  ro.isa = opts.isa;
  const int threads = nn::thread_count(ro);
  ro.threads = threads;
  const int64_t V = cfg_.decoder_vocab_size, B = int64_t(sources.size());
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  if (B == 0) return out;
  auto t0 = Clock::now();
  std::vector<float> memory;
  Shape ms;
  encode(sources, memory, ms, opts);
  tm.encoder += seconds_since(t0);
  DecoderState st = decoder_.start(memory.data(), ms, N, ro);
  auto ask = [&] {
    if (opts.interrupted && opts.interrupted()) throw Interrupted();
  };
  const float ninf = -std::numeric_limits<float>::infinity();
  // The logits processors transformers applies, in its order: EOS banned
  // before min_length / min_new_tokens, bad words, EOS forced at the last
  // position (cur_len == max_length − 1, i.e. the N-th new token).
  const int64_t min_new = std::max<int64_t>(cfg_.min_length - 1, cfg_.min_new_tokens.value_or(0));
  auto process = [&](float* row, int64_t t) {
    if (t < min_new) row[cfg_.eos_id] = ninf;
    for (int64_t b : cfg_.bad_words) row[b] = ninf;
    if (cfg_.forced_eos_id && t == N - 1) {
      for (int64_t j = 0; j < V; ++j)
        if (j != *cfg_.forced_eos_id) row[j] = ninf;
      row[*cfg_.forced_eos_id] = 0.0f;
    }
  };
  // The model side of the decoding engine (src/decoding/decoding.hpp): one
  // decoder step of the live sequences whose last tokens are `last`, and
  // their logits.
  struct Model final : decoding::Stepper {
    const TranslationModel& m;
    DecoderState& st;
    const RunOptions& ro;
    const GenerateOptions& opts;
    GenerateTimes& tm;
    std::vector<float> x, y;
    Model(const TranslationModel& m, DecoderState& st, const RunOptions& ro, const GenerateOptions& opts,
          GenerateTimes& tm)
        : m(m), st(st), ro(ro), opts(opts), tm(tm) {}
    void step(const std::vector<int64_t>& last, int64_t t, float* logits) override {
      const int64_t n = int64_t(last.size()), d = m.cfg_.d_model;
      x.resize(size_t(n * d));
      y.resize(size_t(n * d));
      for (int64_t i = 0; i < n; ++i) m.embed(m.target_embeddings(), last[size_t(i)], t, x.data() + i * d);
      auto t1 = Clock::now();
      m.decoder_.step(st, x.data(), y.data(), ro);
      auto t2 = Clock::now();
      m.project(y.data(), n, logits, ro.threads, opts.isa);
      tm.decoder += std::chrono::duration<double>(t2 - t1).count();
      tm.projection += seconds_since(t2);
      ++tm.steps;
    }
    void select(const std::vector<int64_t>& from) override { st.select(from); }
  } model(*this, st, ro, opts, tm);
  decoding::Search search;
  search.vocab = V;
  search.max_new = N;
  search.end_ids = {cfg_.eos_id};
  search.beams = beams;
  search.length_penalty = cfg_.length_penalty;
  search.early_stopping = cfg_.early_stopping;
  search.renormalize = cfg_.renormalize_logits;
  search.sampling.temperature = opts.temperature;
  search.sampling.top_k = opts.top_k;
  search.sampling.top_p = opts.top_p;
  search.sampling.repeat_penalty = opts.repeat_penalty;
  search.sampling.seed = opts.seed;
  search.process = [&](float* row, int64_t, int64_t t) { process(row, t); };
  search.ask = ask;
  const nn::Context cx(opts.isa, threads);
  search.kernels = &cx.kernels();
  search.threads = threads;
  // transformers' repetition penalty counts the decoder's start token.
  const std::vector<std::vector<int32_t>> seen(size_t(B), {int32_t(cfg_.decoder_start_id)});
  decoding::SearchStats stats;
  out = decoding::decode(model, std::vector<int64_t>(size_t(B), cfg_.decoder_start_id), seen, search, &stats);
  tm.tokens += stats.tokens;
  tm.search += stats.seconds;
  return out;
}

}  // namespace ffn
