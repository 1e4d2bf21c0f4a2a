// Training an encoder–decoder translation model (ffn::Seq2SeqTrainer)
// against transformers 4.46.3: the label-smoothed loss and every gradient of
// a MarianMT model on a ragged batch (tests/data/seq2seq, made by
// scripts/make_seq2seq_golden.py in float64), and what training saves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ffn/io.hpp"
#include "ffn/seq2seq.hpp"
#include "ffn/translation.hpp"
#include "test_util.hpp"

namespace ffn {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<std::vector<int64_t>>;
using test::expect_error;

const std::string kDir = std::string(FFN_SEQ2SEQ_DIR);

nlohmann::json cases() {
  std::ifstream f(kDir + "/cases.json");
  return nlohmann::json::parse(f);
}

Seq2SeqTrainOptions golden_options() {
  Seq2SeqTrainOptions o;
  o.label_smoothing = cases().at("label_smoothing").get<double>();
  o.threads = 2;
  return o;
}

// Tolerance: float32 arithmetic against float64 over a few layers; the
// encoder and decoder suites' 1e-4 of each tensor's largest magnitude.
constexpr double kGradTol = 1e-4, kLossTol = 1e-5;

TEST(Seq2Seq, LossAndEveryGradientMatchTransformers) {
  const nlohmann::json c = cases();
  const Ids src = c.at("sources").get<Ids>(), tgt = c.at("targets").get<Ids>();
  for (int threads : {1, 2}) {
    Seq2SeqTrainOptions o = golden_options();
    o.threads = threads;
    const Seq2SeqTrainer t = Seq2SeqTrainer::from_marian(kDir + "/model", o, 0);
    SafetensorsFile g;
    const Seq2SeqStep st = t.gradients(src, tgt, false, &g);
    EXPECT_NEAR(st.loss, c.at("loss").get<double>(), kLossTol * c.at("loss").get<double>());
    EXPECT_NEAR(st.nll, c.at("nll").get<double>(), kLossTol * c.at("nll").get<double>());
    EXPECT_EQ(st.tokens, int64_t(5 + 3 + 1 + 8));
    const SafetensorsFile ref = read_safetensors(kDir + "/grads.safetensors");
    ASSERT_EQ(g.tensors.size(), ref.tensors.size());
    double worst = 0;
    for (const auto& [name, r] : ref.tensors) {
      auto it = g.tensors.find(name);
      ASSERT_NE(it, g.tensors.end()) << "no gradient for " << name;
      ASSERT_EQ(it->second.shape, r.shape) << name;
      double scale = 0, err = 0;
      for (size_t i = 0; i < r.data.size(); ++i) {
        scale = std::max(scale, double(std::abs(r.data[i])));
        err = std::max(err, double(std::abs(it->second.data[i] - r.data[i])));
      }
      // A key projection's bias has a gradient of exactly zero (softmax is
      // unchanged by adding one value to every score of a query): both sides
      // hold rounding noise, measured against the key weight's gradient.
      if (name.ends_with("k_proj.bias")) {
        scale = 0;
        for (float v : ref.tensors.at(name.substr(0, name.size() - 4) + "weight").data)
          scale = std::max(scale, double(std::abs(v)));
      }
      ASSERT_GT(scale, 0.0) << name << ": the golden gradient is zero, so it tests nothing";
      EXPECT_LE(err / scale, kGradTol) << name;
      worst = std::max(worst, err / scale);
    }
    std::printf("threads %d: worst scaled gradient error %.3g (tolerance %.0e)\n", threads, worst, kGradTol);
  }
}

// The tolerance itself: a gradient with one wrong term is caught. Dropping
// the label smoothing (ε = 0 instead of 0.1) changes the loss and the
// output projection's gradient by more than the tolerance.
TEST(Seq2Seq, ToleranceCatchesAWrongLoss) {
  const nlohmann::json c = cases();
  Seq2SeqTrainOptions o = golden_options();
  o.label_smoothing = 0.0;
  const Seq2SeqTrainer t = Seq2SeqTrainer::from_marian(kDir + "/model", o, 0);
  SafetensorsFile g;
  const Seq2SeqStep st = t.gradients(c.at("sources").get<Ids>(), c.at("targets").get<Ids>(), false, &g);
  EXPECT_GT(std::abs(st.loss - c.at("loss").get<double>()), kLossTol * c.at("loss").get<double>());
  const SafetensorsFile golden = read_safetensors(kDir + "/grads.safetensors");
  const auto& ref = golden.tensors.at("model.shared.weight").data;
  const auto& got = g.tensors.at("model.shared.weight").data;
  double scale = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, double(std::abs(ref[i])));
    err = std::max(err, double(std::abs(got[i] - ref[i])));
  }
  EXPECT_GT(err / scale, kGradTol);
}

// With dropout on, the gradient is the derivative of the loss with the same
// masks (the embeddings' mask in forward and in the scatter, the layers'):
// central differences of the loss, on the golden model with dropout 0.3,
// at the entries of largest gradient of three tensors. Tolerance 3%: the
// loss is summed in double from float32 logits (noise ~1e-6 of 4.3) and
// h = 2e-3 leaves a curvature term of ~1e-3; a missing 1/(1-p) is 43%.
TEST(Seq2Seq, DropoutGradientIsTheLossesDerivative) {
  const nlohmann::json c = cases();
  const Ids src = c.at("sources").get<Ids>(), tgt = c.at("targets").get<Ids>();
  const std::string dir = testing::TempDir() + "/seq2seq_dropout";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(kDir + "/model/" + f, dir + "/" + f);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg["dropout"] = 0.3;
  std::ofstream(dir + "/config.json") << cfg.dump();
  const SafetensorsFile base = read_safetensors(dir + "/model.safetensors");
  auto loss_with = [&](const std::string& name, size_t i, float value) {
    SafetensorsFile f = base;
    f.tensors.at(name).data[i] = value;
    write_safetensors(dir + "/model.safetensors", f);
    return Seq2SeqTrainer::from_marian(dir, golden_options(), 3).gradients(src, tgt, true, nullptr).loss;
  };
  SafetensorsFile g;
  const Seq2SeqTrainer t = Seq2SeqTrainer::from_marian(dir, golden_options(), 3);
  const double with = t.gradients(src, tgt, true, &g).loss, without = t.gradients(src, tgt, false, nullptr).loss;
  EXPECT_GT(std::abs(with - without), 0.01 * without) << "dropout 0.3 should change the loss";
  for (const std::string name : {"model.shared.weight", "model.encoder.layers.0.self_attn.q_proj.weight",
                                 "model.decoder.layers.0.fc1.weight"}) {
    const auto& gv = g.tensors.at(name).data;
    const size_t i = size_t(std::max_element(gv.begin(), gv.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                            gv.begin());
    const float w = base.tensors.at(name).data[i], h = 2e-3f;
    const double fd = (loss_with(name, i, w + h) - loss_with(name, i, w - h)) / (double(w + h) - double(w - h));
    EXPECT_NEAR(gv[i], fd, 0.03 * std::abs(fd)) << name << "[" << i << "]";
    std::printf("%s[%zu]: gradient %.6f, central difference %.6f\n", name.c_str(), i, gv[i], fd);
  }
  fs::remove_all(dir);
}

// What save_marian writes is what it trained: TranslationModel reads it, and
// from_marian continues from the same values (the same gradients, bit for bit).
TEST(Seq2Seq, SavedCheckpointIsTheModel) {
  const nlohmann::json c = cases();
  const Ids src = c.at("sources").get<Ids>(), tgt = c.at("targets").get<Ids>();
  const Seq2SeqTrainer t = Seq2SeqTrainer::from_marian(kDir + "/model", golden_options(), 0);
  const std::string dir = testing::TempDir() + "/seq2seq_saved";
  fs::remove_all(dir);
  t.save_marian(dir);
  const Seq2SeqTrainer back = Seq2SeqTrainer::from_marian(dir, golden_options(), 0);
  SafetensorsFile g1, g2;
  const Seq2SeqStep a = t.gradients(src, tgt, false, &g1), b = back.gradients(src, tgt, false, &g2);
  EXPECT_EQ(a.loss, b.loss);
  for (const auto& [name, v] : g1.tensors) EXPECT_EQ(v.data, g2.tensors.at(name).data) << name;
  // Teacher-forced logits of the saved model give the trainer's cross-entropy.
  const TranslationModel m = TranslationModel::load(dir);
  double nll = 0;
  int64_t n = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    std::vector<int64_t> in = {m.config().decoder_start_id};
    in.insert(in.end(), tgt[i].begin(), tgt[i].end() - 1);
    const std::vector<float> z = m.logits(src[i], in);
    const int64_t V = m.config().decoder_vocab_size;
    for (size_t p = 0; p < tgt[i].size(); ++p) {
      const float* row = z.data() + p * size_t(V);
      const double mx = *std::max_element(row, row + V);
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - mx);
      nll += mx + std::log(s) - row[tgt[i][p]];
      ++n;
    }
  }
  EXPECT_NEAR(nll / double(n), a.nll, 1e-5 * a.nll);
  fs::remove_all(dir);
}

// Training lowers the loss on a fixed batch, with dropout, and the run is
// reproducible from its seed.
TEST(Seq2Seq, StepsLowerTheLossReproducibly) {
  const nlohmann::json c = cases();
  const Ids src = c.at("sources").get<Ids>(), tgt = c.at("targets").get<Ids>();
  Seq2SeqConfig cfg;
  cfg.vocab = 23;
  cfg.d_model = 16;
  cfg.heads = 2;
  cfg.d_ff = 24;
  cfg.encoder_layers = cfg.decoder_layers = 1;
  cfg.max_positions = 16;
  cfg.pad_id = 22;
  cfg.eos_id = 0;
  Seq2SeqTrainOptions o;
  o.warmup = 40;
  o.threads = 2;
  std::vector<double> losses[2];
  for (auto& l : losses) {
    Seq2SeqTrainer t(cfg, o, 7);
    for (int s = 0; s < 100; ++s) l.push_back(t.step(src, tgt).nll);
  }
  EXPECT_EQ(losses[0], losses[1]);
  std::printf("cross-entropy %.3f at the first step, %.3f at the 100th\n", losses[0].front(), losses[0].back());
  EXPECT_LT(losses[0].back(), 0.25 * losses[0].front());
}

TEST(Seq2Seq, BadInputIsNamed) {
  Seq2SeqTrainer t = Seq2SeqTrainer::from_marian(kDir + "/model", golden_options(), 0);
  expect_error([&] { t.step({{1, 2, 0}}, {{1, 23, 0}}); }, "target 0 holds id 23, outside the vocabulary of 23");
  expect_error([&] { t.step({{}}, {{1, 0}}); }, "source 0 is empty");
  expect_error([&] { t.step({{1, 0}}, {}); }, "expected as many targets as sources");
  expect_error([&] { t.step({std::vector<int64_t>(40, 1)}, {{1, 0}}); }, "more than max_positions 32");
  Seq2SeqConfig bad;
  bad.vocab = 10;
  bad.d_model = 10;
  bad.heads = 3;
  expect_error([&] { Seq2SeqTrainer(bad, {}, 0); }, "must be a positive multiple of heads");
}

}  // namespace
}  // namespace ffn
