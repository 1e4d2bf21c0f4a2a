// libFuzzer target: a MarianMT directory's JSON files and a tokenizer's
// vocabulary on arbitrary bytes. The input is, in turn, config.json and
// generation_config.json of a copy of a small test model
// (tests/data/marian/swish_shared), and vocab.json of a copy of the test
// tokenizer (tests/data/marian_text, its SentencePiece models kept); a model
// or tokenizer that loads then translates or encodes a short input. Every
// input must end in a result or an ffn::Error — never a crash, an
// out-of-bounds access (ASan), undefined behaviour (UBSan) or a huge allocation.
#include <cstdint>
#include <filesystem>

#include "ffn/translation.hpp"
#include "fuzz_util.hpp"

namespace fs = std::filesystem;

namespace {

// A copy of a test directory in the scratch area, made once.
fs::path copy_of(const char* name, const std::string& src) {
  const fs::path dst = ffn::fuzz::scratch() / name;
  if (!fs::exists(dst)) fs::copy(src, dst, fs::copy_options::recursive);
  return dst;
}

void write(const fs::path& p, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path model = copy_of("model", std::string(FFN_TEST_DATA) + "/marian/swish_shared");
  static const fs::path tok = copy_of("tokenizer", std::string(FFN_TEST_DATA) + "/marian_text");
  static const std::string config = [] {
    std::FILE* f = std::fopen((model / "config.json").c_str(), "rb");
    std::string s(1 << 16, '\0');
    s.resize(std::fread(s.data(), 1, s.size(), f));
    std::fclose(f);
    return s;
  }();
  // 1. config.json (generation_config.json removed: config.json decides).
  write(model / "config.json", data, size);
  fs::remove(model / "generation_config.json");
  try {
    const ffn::TranslationModel m = ffn::TranslationModel::load(model.string());
    ffn::GenerateOptions g;
    g.max_new_tokens = 3;
    g.threads = 1;
    (void)m.generate({{5, 6, 0}}, g);
  } catch (const ffn::Error&) {
  }
  // 2. generation_config.json beside the real config.json.
  write(model / "config.json", reinterpret_cast<const uint8_t*>(config.data()), config.size());
  write(model / "generation_config.json", data, size);
  try {
    const ffn::TranslationModel m = ffn::TranslationModel::load(model.string());
    ffn::GenerateOptions g;
    g.max_new_tokens = 3;
    g.threads = 1;
    (void)m.generate({{5, 6, 0}}, g);
  } catch (const ffn::Error&) {
  }
  // 3. vocab.json of the tokenizer.
  write(tok / "vocab.json", data, size);
  try {
    const ffn::MarianTokenizer t = ffn::MarianTokenizer::load(tok.string());
    (void)t.decode(t.encode(">>fr<< The cat </s> 12 é 🙂"));
    (void)t.decode({0, 1, 2, 3, 1000000, -1});
  } catch (const ffn::Error&) {
  }
  return 0;
}
