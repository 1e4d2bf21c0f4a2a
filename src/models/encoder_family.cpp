// The encoder families (src/models/encoder_family.hpp): the registry and BERT's row.
#include "models/encoder_family.hpp"

#include <nlohmann/json.hpp>

#include "core/json_file.hpp"
#include "ffn/types.hpp"

namespace ffn::models {

namespace {

// BertModel's names (transformers' modeling_bert.py).
const EncoderNameTable kBertNames{{
    "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight",
    "embeddings.LayerNorm.weight",
    "embeddings.LayerNorm.bias",
    "encoder.layer.{L}.attention.self.query.weight",
    "encoder.layer.{L}.attention.self.query.bias",
    "encoder.layer.{L}.attention.self.key.weight",
    "encoder.layer.{L}.attention.self.key.bias",
    "encoder.layer.{L}.attention.self.value.weight",
    "encoder.layer.{L}.attention.self.value.bias",
    "encoder.layer.{L}.attention.output.dense.weight",
    "encoder.layer.{L}.attention.output.dense.bias",
    "encoder.layer.{L}.attention.output.LayerNorm.weight",
    "encoder.layer.{L}.attention.output.LayerNorm.bias",
    "encoder.layer.{L}.intermediate.dense.weight",
    "encoder.layer.{L}.intermediate.dense.bias",
    "encoder.layer.{L}.output.dense.weight",
    "encoder.layer.{L}.output.dense.bias",
    "encoder.layer.{L}.output.LayerNorm.weight",
    "encoder.layer.{L}.output.LayerNorm.bias",
}};

// MPNetModel's names (transformers' modeling_mpnet.py): BERT's layout without
// token types, Q/K/V/O under attention.attn, and the relative position bias.
const EncoderNameTable kMpnetNames{{
    "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight",
    nullptr,
    "embeddings.LayerNorm.weight",
    "embeddings.LayerNorm.bias",
    "encoder.layer.{L}.attention.attn.q.weight",
    "encoder.layer.{L}.attention.attn.q.bias",
    "encoder.layer.{L}.attention.attn.k.weight",
    "encoder.layer.{L}.attention.attn.k.bias",
    "encoder.layer.{L}.attention.attn.v.weight",
    "encoder.layer.{L}.attention.attn.v.bias",
    "encoder.layer.{L}.attention.attn.o.weight",
    "encoder.layer.{L}.attention.attn.o.bias",
    "encoder.layer.{L}.attention.LayerNorm.weight",
    "encoder.layer.{L}.attention.LayerNorm.bias",
    "encoder.layer.{L}.intermediate.dense.weight",
    "encoder.layer.{L}.intermediate.dense.bias",
    "encoder.layer.{L}.output.dense.weight",
    "encoder.layer.{L}.output.dense.bias",
    "encoder.layer.{L}.output.LayerNorm.weight",
    "encoder.layer.{L}.output.LayerNorm.bias",
    "encoder.relative_attention_bias.weight",
}};

// RoBERTa's rule (MPNet, XLM-R): position ids start past pad_token_id.
void positions_past_pad(const nlohmann::json& cfg, const std::filesystem::path& cfg_path, nn::StackSpec& s) {
  const int64_t pad = json_opt<int64_t>(cfg, "pad_token_id", 1, cfg_path);
  if (pad < 0 || pad >= s.embedding.vocab)
    throw Error(cfg_path.string() + ": pad_token_id " + std::to_string(pad) + " is outside the vocabulary");
  s.embedding.position_offset = pad + 1;
}

// MPNetConfig: BERT's keys without token types; positions offset past the
// pad id (RoBERTa's rule); the relative position bias (transformers buckets
// it with 32 buckets and distance 128 whatever relative_attention_num_buckets
// says, so the table must have at least 32 rows).
nn::StackSpec mpnet_config(const nlohmann::json& cfg, const std::filesystem::path& cfg_path) {
  nlohmann::json bert = cfg;
  bert["type_vocab_size"] = 0;
  nn::StackSpec s = bert_config(bert, cfg_path);
  positions_past_pad(cfg, cfg_path, s);
  s.attention.relative_buckets = json_opt<int64_t>(cfg, "relative_attention_num_buckets", 32, cfg_path);
  if (s.attention.relative_buckets < 32)
    throw Error(cfg_path.string() + ": relative_attention_num_buckets " + std::to_string(s.attention.relative_buckets) +
                " is below the 32 buckets MPNet's attention indexes");
  s.attention.relative_max_distance = 128;
  return s;
}

// XLMRobertaConfig: BERT's keys (XLMRobertaModel keeps BERT's tensor names),
// positions past the pad id (RoBERTa's rule), one token type.
nn::StackSpec xlm_roberta_config(const nlohmann::json& cfg, const std::filesystem::path& cfg_path) {
  nn::StackSpec s = bert_config(cfg, cfg_path);
  positions_past_pad(cfg, cfg_path, s);
  return s;
}

// ModernBertModel's names (transformers' modeling_modernbert.py); a task
// model (ModernBertForMaskedLM, ...) saves them under "model.".
const EncoderNameTable kModernBertNames{{
    "embeddings.tok_embeddings.weight", nullptr, nullptr, "embeddings.norm.weight", "embeddings.norm.bias",
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
    "layers.{L}.attn.Wo.weight", "layers.{L}.attn.Wo.bias",
    "layers.{L}.attn_norm.weight", "layers.{L}.attn_norm.bias",
    nullptr, nullptr,
    "layers.{L}.mlp.Wo.weight", "layers.{L}.mlp.Wo.bias",
    "layers.{L}.mlp_norm.weight", "layers.{L}.mlp_norm.bias",
    nullptr,
    "layers.{L}.attn.Wqkv.weight", "layers.{L}.attn.Wqkv.bias",
    "layers.{L}.mlp.Wi.weight", "layers.{L}.mlp.Wi.bias",
    "final_norm.weight", "final_norm.bias",
}};

// ModernBertConfig: pre-norm LayerNorm (without β unless norm_bias), the
// first layer's attention without its norm (the embedding's norm is just
// before it), rotary positions with global_rope_theta on the global layers
// (every global_attn_every_n_layers-th, from layer 0) and local_rope_theta
// (or the global one) on the others, which attend to the keys within
// local_attention / 2 positions; a gated FFN, GELU on the first half of Wi's
// rows; biases as attention_bias, mlp_bias and norm_bias say; a final norm.
// What transformers' ModernBertModel does not run in inference (dropout) is
// not read; what it runs and ffn does not (a rope_scaling) is refused.
nn::StackSpec modernbert_config(const nlohmann::json& cfg, const std::filesystem::path& cfg_path) {
  const std::string act = json_opt<std::string>(cfg, "hidden_activation", "gelu", cfg_path);
  nn::StackSpec s;
  if (act == "gelu") s.ffn.unit = Activation::gelu;  // erf
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") s.ffn.unit = Activation::gelu_tanh;
  else if (act == "silu" || act == "swish") s.ffn.unit = Activation::silu;
  else if (act == "relu") s.ffn.unit = Activation::relu;
  else
    throw Error(cfg_path.string() + ": hidden_activation '" + act +
                "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, silu, relu)");
  if (cfg.contains("rope_scaling") && !cfg.at("rope_scaling").is_null())
    throw Error(cfg_path.string() + ": rope_scaling is not supported for ModernBERT (only plain rotary positions)");
  s.kind = nn::StackKind::encoder;
  s.d_model = json_opt<int64_t>(cfg, "hidden_size", 768, cfg_path);
  s.attention.heads = json_opt<int64_t>(cfg, "num_attention_heads", 12, cfg_path);
  s.ffn.d_ff = json_opt<int64_t>(cfg, "intermediate_size", 1152, cfg_path);
  s.ffn.gated = true;
  s.layers = json_opt<int64_t>(cfg, "num_hidden_layers", 22, cfg_path);
  const bool norm_bias = json_opt<bool>(cfg, "norm_bias", false, cfg_path);
  s.norm = {norm_bias ? nn::NormKind::layernorm : nn::NormKind::layernorm_no_bias, nn::NormSites::pre,
            float(json_opt<double>(cfg, "norm_eps", 1e-5, cfg_path))};
  if (!(s.norm.eps > 0.0f)) throw Error(cfg_path.string() + ": norm_eps must be positive");
  s.norm.first_attention_norm = false;
  s.final_norm = true;
  s.attention.qkv_bias = s.attention.out_bias = json_opt<bool>(cfg, "attention_bias", false, cfg_path);
  s.ffn.bias = json_opt<bool>(cfg, "mlp_bias", false, cfg_path);
  const int64_t every = json_opt<int64_t>(cfg, "global_attn_every_n_layers", 3, cfg_path);
  const int64_t local = json_opt<int64_t>(cfg, "local_attention", 128, cfg_path);
  if (every < 1) throw Error(cfg_path.string() + ": global_attn_every_n_layers must be at least 1");
  const double global_theta = json_opt<double>(cfg, "global_rope_theta", 160000.0, cfg_path);
  double local_theta = global_theta;
  if (cfg.contains("local_rope_theta") && !cfg.at("local_rope_theta").is_null())
    local_theta = json_get<double>(cfg, "local_rope_theta", cfg_path);
  if (!(global_theta > 0) || !(local_theta > 0))
    throw Error(cfg_path.string() + ": global_rope_theta and local_rope_theta must be positive");
  s.attention.rope.enabled = true;
  s.attention.rope.theta = global_theta;
  s.attention.local.assign(size_t(std::max<int64_t>(s.layers, 0)), 0);
  s.attention.rope.layer_theta.assign(s.attention.local.size(), global_theta);
  for (int64_t l = 0; l < s.layers; ++l)
    if (l % every != 0) {  // a local layer: keys within local_attention / 2 (transformers' window mask)
      if (local < 2)
        throw Error(cfg_path.string() + ": local_attention " + std::to_string(local) +
                    " leaves a local layer no key but its own; expected at least 2");
      s.attention.local[size_t(l)] = std::max<int64_t>(local / 2, 0);
      s.attention.rope.layer_theta[size_t(l)] = local_theta;
    }
  s.embedding.positions = nn::Positions::rotary;
  s.embedding.max_positions = json_opt<int64_t>(cfg, "max_position_embeddings", 8192, cfg_path);
  s.embedding.vocab = json_opt<int64_t>(cfg, "vocab_size", 50368, cfg_path);
  s.embedding.norm = true;
  return s;
}

std::vector<EncoderFamily>& registry() {
  static std::vector<EncoderFamily> r{{"bert", &kBertNames, "bert.", bert_config},
                                      {"mpnet", &kMpnetNames, "mpnet.", mpnet_config},
                                      {"xlm-roberta", &kBertNames, "roberta.", xlm_roberta_config,
                                       EncoderFamily::Tokenizer::xlmr_sentencepiece},
                                      {"modernbert", &kModernBertNames, "model.", modernbert_config,
                                       EncoderFamily::Tokenizer::bpe_json}};
  return r;
}

}  // namespace

nn::StackSpec bert_config(const nlohmann::json& cfg, const std::filesystem::path& cfg_path) {
  const std::string act = json_get<std::string>(cfg, "hidden_act", cfg_path);
  Activation activation;
  if (act == "gelu") activation = Activation::gelu;  // erf
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") activation = Activation::gelu_tanh;
  else if (act == "relu") activation = Activation::relu;
  else throw Error(cfg_path.string() + ": hidden_act '" + act + "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)");
  const std::string pos_type = json_opt<std::string>(cfg, "position_embedding_type", "absolute", cfg_path);
  if (pos_type != "absolute")
    throw Error(cfg_path.string() + ": position_embedding_type '" + pos_type + "' is not supported (absolute)");
  nn::StackSpec s;
  s.kind = nn::StackKind::encoder;
  s.d_model = json_get<int64_t>(cfg, "hidden_size", cfg_path);
  s.attention.heads = json_get<int64_t>(cfg, "num_attention_heads", cfg_path);
  s.ffn.d_ff = json_get<int64_t>(cfg, "intermediate_size", cfg_path);
  s.layers = json_get<int64_t>(cfg, "num_hidden_layers", cfg_path);
  s.ffn.unit = activation;
  s.norm = {nn::NormKind::layernorm, nn::NormSites::post, float(json_opt<double>(cfg, "layer_norm_eps", 1e-12, cfg_path))};
  if (!(s.norm.eps > 0.0f)) throw Error(cfg_path.string() + ": layer_norm_eps must be positive");
  s.attention.qkv_bias = s.attention.out_bias = s.ffn.bias = true;
  s.embedding.positions = nn::Positions::learned;
  s.embedding.max_positions = json_get<int64_t>(cfg, "max_position_embeddings", cfg_path);
  s.embedding.vocab = json_get<int64_t>(cfg, "vocab_size", cfg_path);
  s.embedding.token_types = json_opt<int64_t>(cfg, "type_vocab_size", 2, cfg_path);
  s.embedding.norm = true;
  return s;
}

const std::vector<EncoderFamily>& encoder_families() { return registry(); }

void register_encoder_family(EncoderFamily f) {
  if (!f.names || !f.config)
    throw Error("register_encoder_family: \"" + f.model_type + "\" has no " + (f.names ? "config reader" : "name table"));
  for (const EncoderFamily& g : registry())
    if (g.model_type == f.model_type) throw Error("register_encoder_family: \"" + f.model_type + "\" is registered already");
  registry().push_back(std::move(f));
}

const EncoderFamily* find_encoder_family(const std::string& model_type) {
  for (const EncoderFamily& f : registry())
    if (f.model_type == model_type) return &f;
  return nullptr;
}

std::string encoder_family_names() {
  std::string out;
  for (const EncoderFamily& f : registry()) out += (out.empty() ? "" : ", ") + f.model_type;
  return out;
}

}  // namespace ffn::models
