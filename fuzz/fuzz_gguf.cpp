// libFuzzer target: the GGUF reader (src/io/gguf.hpp) on arbitrary bytes:
// header, metadata of every type, tensor infos, and every tensor
// dequantized; then the file as a language model (ffn/causal_lm.hpp: its
// llama.* settings, tensors and tokenizer.ggml.* vocabulary and merges, in
// both compute modes) and, when it loads, two positions of logits and the
// tokenizer on a text with a special token; a tokenizer alone (vocabulary-only
// files), byte-level BPE or SentencePiece. Every input must end in a result or an ffn::Error — never a
// crash, an out-of-bounds read of the mapping (ASan), undefined behaviour
// (UBSan) or an allocation sized by an unchecked count (-malloc_limit_mb).
#include <cstdint>

#include "ffn/ffn.hpp"
#include "fuzz_util.hpp"
#include "ffn/causal_lm.hpp"
#include "ffn/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ffn::fuzz::write_file("m.gguf", data, size);
  try {
    const ffn::GgufFile f(path);
    for (const ffn::GgufTensor& t : f.tensors())
      if (t.numel <= (int64_t(1) << 24)) (void)f.read_f32(t.name);  // the file holds its bytes: numel is bounded by size
  } catch (const ffn::Error&) {
    return 0;
  }
  try {  // the tokenizer alone (a vocabulary-only file): byte-level BPE or SentencePiece
    const ffn::GgufFile f(path);
    if (f.find("tokenizer.ggml.model")) {
      const auto t = ffn::Tokenizer::from_gguf(f);
      (void)t->decode(t->encode("Hello <s> world 123 \xc3\xa9 \xf0\x9f\xa6\x99"));
    }
  } catch (const ffn::Error&) {
  }
  for (ffn::LMCompute c : {ffn::LMCompute::native, ffn::LMCompute::fp32}) {
    try {
      const ffn::CausalLM m = ffn::CausalLM::load(path, {c});
      ffn::RunOptions o;
      o.threads = 1;
      (void)m.logits({0, int32_t(m.config().vocab - 1)}, o);
      if (m.tokenizer()) (void)m.tokenizer()->decode(m.tokenizer()->encode("Hello <|im_start|> world 123 \xc3\xa9"));
    } catch (const ffn::Error&) {
    }
  }
  return 0;
}
