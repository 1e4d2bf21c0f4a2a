// The encoder families (src/models/encoder_family.hpp): the registry and BERT's row.
#include "models/encoder_family.hpp"

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

std::vector<EncoderFamily>& registry() {
  static std::vector<EncoderFamily> r{{"bert", &kBertNames, "bert."}};
  return r;
}

}  // namespace

const std::vector<EncoderFamily>& encoder_families() { return registry(); }

void register_encoder_family(EncoderFamily f) {
  if (!f.names) throw Error("register_encoder_family: \"" + f.model_type + "\" has no name table");
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
