// Checkpoints as data (src/models/checkpoint.hpp, src/models/arch.hpp): the
// tensor sources' shapes and their one error message in each format, and
// the name tables.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

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
  for (size_t t = 0; t < size_t(LMTensor::count); ++t) {  // every role named, and names distinct
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

}  // namespace
}  // namespace ffn
