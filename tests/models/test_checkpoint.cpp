// Checkpoints as data (src/models/checkpoint.hpp, src/models/arch.hpp): the
// tensor sources' shapes and their one error message in each format, and
// the name tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "ffn/causal_lm.hpp"
#include "ffn/decoder.hpp"
#include "ffn/encoder.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "ffn/io.hpp"
#include "models/arch.hpp"
#include "models/checkpoint.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;
using models::Format;
using models::LMTensor;
using test::expect_error;

TEST(Checkpoint, NameTablesNameEveryTensorOfALayer) {
  const models::NameTable& hf = models::llama_names(Format::safetensors);
  const models::NameTable& gguf = models::llama_names(Format::gguf);
  EXPECT_EQ("model.layers.3.self_attn.k_proj.weight", hf.name(LMTensor::k, 3));
  EXPECT_EQ("blk.3.attn_k.weight", gguf.name(LMTensor::k, 3));
  EXPECT_EQ("blk.12.ffn_down.weight", gguf.name(LMTensor::down, 12));
  EXPECT_EQ("output_norm.weight", gguf.name(LMTensor::norm));
  EXPECT_FALSE(hf.qk_rows_interleaved);
  EXPECT_TRUE(gguf.qk_rows_interleaved);
  for (size_t t = 0; t < size_t(LMTensor::attn_post_norm); ++t) {  // every role LLaMA has named, names distinct
    ASSERT_NE(nullptr, hf.names[t]);
    ASSERT_NE(nullptr, gguf.names[t]);
    for (size_t u = 0; u < t; ++u) EXPECT_NE(hf.name(LMTensor(t), 0), hf.name(LMTensor(u), 0));
  }
}

TEST(Checkpoint, SafetensorsSourceChecksShapesLazily) {
  const fs::path dir = fs::temp_directory_path() / ("ffn_test_checkpoint_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "w.safetensors").string();
  SafetensorsFile f;
  f.tensors["a.weight"] = NamedTensor{{3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  write_safetensors(path, f);
  const models::TensorSource src = models::TensorSource::safetensors(path, "config.json");
  EXPECT_EQ(Format::safetensors, src.format());
  EXPECT_TRUE(src.has("a.weight"));
  EXPECT_FALSE(src.has("b.weight"));
  EXPECT_EQ((std::vector<int64_t>{3, 4}), src.shape("a.weight"));
  EXPECT_EQ(f.tensors["a.weight"].data, src.read("a.weight", {3, 4}));
  expect_error([&] { src.read("a.weight", {4, 3}); },
               path + ": tensor a.weight has shape [3, 4], expected [4, 3] (config.json)");
  expect_error([&] { src.expect("b.weight", {1}); }, path + ": missing tensor b.weight");
  fs::remove_all(dir);
}

TEST(Checkpoint, GgufSourceSpeaksPyTorchOrderAndPrintsNeOrder) {
  const auto file = std::make_shared<const GgufFile>(std::string(FFN_GGUF_DIR) + "/llama_q.gguf");
  const models::TensorSource src = models::TensorSource::gguf(file, "llama.* metadata");
  EXPECT_EQ(Format::gguf, src.format());
  const std::string q = models::llama_names(Format::gguf).name(LMTensor::q, 0);
  const std::vector<int64_t>& ne = file->tensor(q).ne;
  ASSERT_EQ(2u, ne.size());
  EXPECT_EQ((std::vector<int64_t>{ne[1], ne[0]}), src.shape(q));
  EXPECT_EQ(file->read_f32(q), src.read(q, {ne[1], ne[0]}));
  expect_error([&] { src.expect(q, {ne[0] + 1, ne[1]}); },
               "tensor " + q + " has shape " + shape_str(ne) + ", expected " + shape_str({ne[1], ne[0] + 1}) +
                   " (ne[0] innermost, from the llama.* metadata)");
  EXPECT_THROW(src.shape("no.such.tensor"), Error);
}

// The recipe "an architecture" (CONTRIBUTING.md) kept honest: a toy
// architecture registered only in this binary — a config reader with its own
// keys and a name table with its own tensor names, no other code — loads a
// LLaMA checkpoint written under those names and gives the LLaMA model's
// logits bit for bit.
models::ArchConfig toy_config(const nlohmann::json& j, const fs::path&) {
  CausalLMConfig c;
  c.vocab = j.at("n_vocab").get<int64_t>();
  c.d_model = j.at("dim").get<int64_t>();
  c.layers = j.at("n_layers").get<int64_t>();
  c.heads = j.at("n_heads").get<int64_t>();
  c.kv_heads = j.at("n_kv_heads").get<int64_t>();
  c.head_dim = c.d_model / c.heads;
  c.d_ff = j.at("hidden_dim").get<int64_t>();
  c.rope_theta = j.at("rope_theta").get<double>();
  c.eps = j.at("norm_eps").get<float>();
  c.tied = true;
  c.context = 256;
  c.validate();
  return {c, models::llama_spec(c)};
}
constexpr models::NameTable kToyNames{{
    "tok_embeddings.weight", "norm.weight", "output.weight", "layers.{L}.attention_norm.weight",
    "layers.{L}.attention.wq.weight", "layers.{L}.attention.wk.weight", "layers.{L}.attention.wv.weight",
    "layers.{L}.attention.wo.weight", "layers.{L}.ffn_norm.weight", "layers.{L}.feed_forward.w1.weight",
    "layers.{L}.feed_forward.w3.weight", "layers.{L}.feed_forward.w2.weight",
}};

TEST(Checkpoint, ATestOnlyArchitectureIsAConfigReaderAndANameTable) {
  models::Architecture toy;
  toy.name = "toyllama";
  toy.from_hf = toy_config;
  toy.hf_names = &kToyNames;
  if (!models::find_architecture("toyllama", Format::safetensors)) models::register_architecture(toy);
  EXPECT_THROW(models::register_architecture(toy), Error);
  EXPECT_EQ(nullptr, models::find_architecture("toyllama", Format::gguf)) << "no GGUF reader given";
  // gqa3_tied's tensors under the toy names, its settings under the toy keys.
  const fs::path src = fs::path(FFN_LLAMA_DIR) / "gqa3_tied";
  const fs::path dir = fs::temp_directory_path() / ("ffn_test_toy_arch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const SafetensorsFile llama = read_safetensors((src / "model.safetensors").string());
  const models::NameTable& hf = models::llama_names(Format::safetensors);
  SafetensorsFile renamed;
  for (const auto& [name, t] : llama.tensors) {
    std::string to;
    for (size_t r = 0; r < size_t(LMTensor::count) && to.empty(); ++r)
      for (int64_t l = -1; l < 2 && to.empty(); ++l)
        if (hf.names[r] && hf.name(LMTensor(r), l) == name) to = kToyNames.name(LMTensor(r), l);
    ASSERT_FALSE(to.empty()) << name;
    renamed.tensors[to] = t;
  }
  write_safetensors((dir / "model.safetensors").string(), renamed);
  std::ifstream in(src / "config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json toy_json = {{"model_type", "toyllama"},
                                   {"n_vocab", j["vocab_size"]},
                                   {"dim", j["hidden_size"]},
                                   {"n_layers", j["num_hidden_layers"]},
                                   {"n_heads", j["num_attention_heads"]},
                                   {"n_kv_heads", j["num_key_value_heads"]},
                                   {"hidden_dim", j["intermediate_size"]},
                                   {"rope_theta", j["rope_theta"]},
                                   {"norm_eps", j["rms_norm_eps"]}};
  std::ofstream(dir / "config.json") << toy_json.dump();
  const CausalLM a = CausalLM::load(src.string()), b = CausalLM::load(dir.string());
  const std::vector<int32_t> ids{5, 17, 42, 7, 99, 3, 250};
  const std::vector<float> la = a.logits(ids), lb = b.logits(ids);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4)) << "the toy architecture's logits are LLaMA's";
  // An unknown model_type names the registered ones.
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2"})";
  expect_error([&] { CausalLM::load(dir.string()); }, "model_type is \"gpt2\"; expected \"llama\", \"qwen2\", \"qwen3\", \"mistral\", \"gemma2\", \"phi3\", \"toyllama\"");
  fs::remove_all(dir);
}

// The checkpoint-format recipe (CONTRIBUTING.md, "A checkpoint format"): a
// format is a TensorReader and its row in the format registry, one edit.
// This test-only format keeps tensors in JSON ({"metadata": {...},
// "tensors": {name: {"shape": [...], "data": [...]}}}); an encoder and a
// decoder saved in it load through Encoder::load / Decoder::load, which know
// nothing of it, to the same bits as from safetensors, and its shape errors
// are the one message, naming its file.
class ToyJsonTensors final : public models::TensorReader {
 public:
  explicit ToyJsonTensors(const std::string& path)
      : TensorReader(path), j_(nlohmann::json::parse(std::ifstream(path))) {
    for (const auto& [k, v] : j_.at("metadata").items()) meta_[k] = v.get<std::string>();
  }
  bool has(const std::string& name) const override { return j_.at("tensors").contains(name); }
  std::vector<int64_t> shape(const std::string& name) const override {
    if (!has(name)) models::throw_missing_tensor(path(), name);
    return j_.at("tensors").at(name).at("shape").get<std::vector<int64_t>>();
  }
  std::vector<float> read_f32(const std::string& name) const override {
    return j_.at("tensors").at(name).at("data").get<std::vector<float>>();
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> v;
    for (const auto& [k, t] : j_.at("tensors").items()) v.push_back(k);
    return v;  // a JSON object's keys are sorted
  }
  const std::map<std::string, std::string>& metadata() const override { return meta_; }

 private:
  nlohmann::json j_;
  std::map<std::string, std::string> meta_;
};

void write_toy_json(const SafetensorsFile& f, const fs::path& to) {
  nlohmann::json j;
  j["metadata"] = f.metadata;
  j["tensors"] = nlohmann::json::object();
  for (const auto& [name, t] : f.tensors) j["tensors"][name] = {{"shape", t.shape}, {"data", t.data}};
  std::ofstream(to) << j.dump();
}

TEST(Checkpoint, ATestOnlyFormatIsAReaderAndItsRow) {
  auto accepts = [](const std::string& p) { return fs::path(p).extension() == ".toyjson"; };
  auto open = [](const std::string& p) -> std::shared_ptr<const models::TensorReader> {
    return std::make_shared<const ToyJsonTensors>(p);
  };
  bool registered = false;
  for (const models::TensorFormat& f : models::tensor_formats()) registered |= f.name == "toyjson";
  if (!registered) models::register_tensor_format({"toyjson", accepts, open});
  expect_error([&] { models::register_tensor_format({"toyjson", accepts, open}); }, "registered already");

  const fs::path dir = test::scratch_dir("toy_format");
  fs::create_directories(dir);
  EncoderConfig cfg;
  cfg.d_model = 12, cfg.heads = 3, cfg.d_ff = 19, cfg.layers = 2, cfg.activation = Activation::gelu;
  cfg.final_norm = true;
  const Encoder enc(cfg, 11);
  enc.save((dir / "enc.safetensors").string());
  write_toy_json(enc.to_safetensors(), dir / "enc.toyjson");
  const Decoder dec(cfg, 12);
  dec.save((dir / "dec.safetensors").string());
  write_toy_json(dec.to_safetensors(), dir / "dec.toyjson");

  const int64_t B = 2, S = 5, d = cfg.d_model;
  std::vector<float> x(size_t(B * S * d)), m(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)), m[i] = std::cos(0.23f * float(i));
  const Shape shape{B, S, Layout::tokens, {5, 3}};
  auto run_encoder = [&](const Encoder& e) {
    std::vector<float> y(x.size());
    e.forward(x.data(), y.data(), shape);
    return y;
  };
  auto run_decoder = [&](const Decoder& e) {
    std::vector<float> y(x.size());
    e.forward(x.data(), shape, m.data(), shape, y.data());
    return y;
  };
  const std::vector<float> want_e = run_encoder(Encoder::load((dir / "enc.safetensors").string()));
  const std::vector<float> got_e = run_encoder(Encoder::load((dir / "enc.toyjson").string()));
  EXPECT_EQ(0, std::memcmp(want_e.data(), got_e.data(), want_e.size() * sizeof(float)));
  const std::vector<float> want_d = run_decoder(Decoder::load((dir / "dec.safetensors").string()));
  const std::vector<float> got_d = run_decoder(Decoder::load((dir / "dec.toyjson").string()));
  EXPECT_EQ(0, std::memcmp(want_d.data(), got_d.data(), want_d.size() * sizeof(float)));
  EXPECT_EQ(Encoder::load((dir / "enc.toyjson").string()).config(), cfg);  // the settings from its metadata

  // A wrong shape in the toy file: the one message, naming the toy file.
  SafetensorsFile bad = enc.to_safetensors();
  bad.tensors["layers.1.linear2.weight"].shape = {d, cfg.d_ff - 1};
  write_toy_json(bad, dir / "bad.toyjson");
  expect_error([&] { (void)Encoder::load((dir / "bad.toyjson").string()); },
               (dir / "bad.toyjson").string() + ": tensor layers.1.linear2.weight has shape [12, 18], expected [12, 19]");
}

}  // namespace
}  // namespace ffn
