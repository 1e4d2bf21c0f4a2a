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

// MPNetConfig: BERT's keys without token types; positions offset past the
// pad id (RoBERTa's rule); the relative position bias (transformers buckets
// it with 32 buckets and distance 128 whatever relative_attention_num_buckets
// says, so the table must have at least 32 rows).
nn::StackSpec mpnet_config(const nlohmann::json& cfg, const std::filesystem::path& cfg_path) {
  nlohmann::json bert = cfg;
  bert["type_vocab_size"] = 0;
  nn::StackSpec s = bert_config(bert, cfg_path);
  const int64_t pad = json_opt<int64_t>(cfg, "pad_token_id", 1, cfg_path);
  if (pad < 0 || pad >= s.embedding.vocab)
    throw Error(cfg_path.string() + ": pad_token_id " + std::to_string(pad) + " is outside the vocabulary");
  s.embedding.position_offset = pad + 1;
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
  const int64_t pad = json_opt<int64_t>(cfg, "pad_token_id", 1, cfg_path);
  if (pad < 0 || pad >= s.embedding.vocab)
    throw Error(cfg_path.string() + ": pad_token_id " + std::to_string(pad) + " is outside the vocabulary");
  s.embedding.position_offset = pad + 1;
  return s;
}

std::vector<EncoderFamily>& registry() {
  static std::vector<EncoderFamily> r{{"bert", &kBertNames, "bert.", bert_config},
                                      {"mpnet", &kMpnetNames, "mpnet.", mpnet_config},
                                      {"xlm-roberta", &kBertNames, "roberta.", xlm_roberta_config,
                                       EncoderFamily::Tokenizer::xlmr_sentencepiece}};
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
