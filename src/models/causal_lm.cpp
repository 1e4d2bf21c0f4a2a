// The LLaMA-architecture causal language model (include/ffn/causal_lm.hpp):
// the loader (one loop over the architecture's name table, for GGUF and
// Hugging Face checkpoints: src/models/arch.hpp, checkpoint.hpp), the forward
// pass over a key/value cache, and the generation loop. The sampler is in
// src/decoding/sampling.cpp, chat prompts in src/models/chat.cpp.
#include "ffn/causal_lm.hpp"

#include <algorithm>
#include <set>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <numeric>
#include <optional>
#include <tuple>

#include "backends/cpu/isa.hpp"
#include "backends/context.hpp"
#include "backends/cpu/kernel_config.hpp"
#include "core/json_file.hpp"
#include "core/positions.hpp"
#include "core/thread_pool.hpp"
#include "ffn/feed_forward.hpp"
#include "ffn/gguf.hpp"
#include "ffn/io.hpp"
#include "ops/attention.hpp"
#include "ops/linear.hpp"
#include "ops/qlinear.hpp"
#include "ops/norm.hpp"
#include "ops/rope.hpp"
#include "decoding/decoding.hpp"
#include "models/arch.hpp"
#include "models/checkpoint.hpp"
#include "modules/attention_block.hpp"
#include "modules/decoder_layer.hpp"
#include "modules/ffn_sublayer.hpp"
#include "modules/kv_cache.hpp"

namespace fs = std::filesystem;

namespace ffn {

// Every product is an nn::Linear: the file's quantized blocks (native
// compute, a native type of src/core/quant_types.hpp) or float32 panels.
struct CausalLM::Weights {
  struct Layer {
    std::vector<float> attn_norm;   // [d]
    std::vector<float> attn_post_norm;  // [d] or empty: the norm after the attention (Gemma 2)
    std::vector<float> q_norm, k_norm;  // [head_dim] or empty: per-head norms of Q and K (Qwen3)
    nn::PackedAttention attn;       // in: [qd + 2 kvd, d], W_Q, W_K, W_V stacked; out: W_O [d, qd]
    std::vector<nn::FfnSublayer> ffn;  // one: pre-norm RMSNorm SwiGLU, fused (fp32 compute) or on quantized products
  };
  nn::Linear embed;                 // [vocab, d] in the file's type (rows looked up), or empty: the head's rows (tied)
  std::vector<float> norm;          // [d]
  nn::Linear head;                  // [vocab, d]
  std::vector<Layer> layers;
  nn::StackSpec spec;               // the stack the architecture's config reader described
};

struct CausalLMState::Data {
  nn::KvCache cache;  // paged (src/modules/kv_cache.hpp)
  int64_t head_dim = 0;
  nn::RopeTable rope;
};

CausalLMState::CausalLMState() : data_(std::make_unique<Data>()) {}
CausalLMState::~CausalLMState() = default;
CausalLMState::CausalLMState(CausalLMState&&) noexcept = default;
CausalLMState& CausalLMState::operator=(CausalLMState&&) noexcept = default;
int64_t CausalLMState::live() const { return data_->cache.live(); }
int64_t CausalLMState::length(int64_t i) const {
  if (i < 0 || i >= live()) throw std::out_of_range("CausalLMState::length: no sequence " + std::to_string(i));
  return data_->cache.length(i);
}
int64_t CausalLMState::capacity() const { return data_->cache.capacity(); }
size_t CausalLMState::bytes() const { return data_->cache.bytes(); }
void CausalLMState::select(const std::vector<int64_t>& from) { data_->cache.select(from); }
int64_t CausalLMState::join() {
  if (data_->cache.layers() == 0) throw Error("join: the state was not started by a model (CausalLM::start)");
  return data_->cache.join();
}
void CausalLMState::truncate(int64_t i, int64_t length) {
  if (i < 0 || i >= live())
    throw Error("truncate: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  if (length < 0 || length > data_->cache.length(i))
    throw Error("truncate: sequence " + std::to_string(i) + " holds " + std::to_string(data_->cache.length(i)) +
                " positions, cannot keep " + std::to_string(length));
  data_->cache.resize(i, length);
}
int64_t CausalLMState::fork(int64_t i, int64_t length) {
  if (i < 0 || i >= live())
    throw Error("fork: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  return data_->cache.fork(i, length);
}
int64_t CausalLMState::page_positions() const { return data_->cache.page(); }
int64_t CausalLMState::pages_used() const { return data_->cache.pages_used(); }
int64_t CausalLMState::pages_for(int64_t positions) const { return data_->cache.pages_for(positions); }
size_t CausalLMState::page_bytes() const { return data_->cache.page_bytes(); }
void CausalLMState::set_page_limit(int64_t pages) { data_->cache.set_page_limit(pages); }
int64_t CausalLMState::page_limit() const { return data_->cache.page_limit(); }
void CausalLMState::leave(int64_t i) {
  if (i < 0 || i >= live())
    throw Error("leave: sequence " + std::to_string(i) + " does not exist (" + std::to_string(live()) + " live)");
  data_->cache.leave(i);
}

void CausalLMConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    if (v < 1) throw Error(std::string("causal LM: ") + name + " must be at least 1, got " + std::to_string(v));
  };
  positive(vocab, "vocab");
  positive(d_model, "d_model");
  positive(layers, "layers");
  positive(heads, "heads");
  positive(kv_heads, "kv_heads");
  positive(head_dim, "head_dim");
  positive(d_ff, "d_ff");
  // Bounds far above any real model, so that no product of sizes below overflows.
  auto at_most = [](int64_t v, int64_t limit, const char* name) {
    if (v > limit)
      throw Error(std::string("causal LM: ") + name + " is " + std::to_string(v) + ", more than " + std::to_string(limit));
  };
  at_most(vocab, int64_t(1) << 24, "vocab");
  at_most(d_model, int64_t(1) << 20, "d_model");
  at_most(d_ff, int64_t(1) << 22, "d_ff");
  at_most(layers, 4096, "layers");
  at_most(heads, 4096, "heads");
  at_most(kv_heads, 4096, "kv_heads");
  at_most(head_dim, 4096, "head_dim");
  at_most(context, int64_t(1) << 24, "context");
  if (heads % kv_heads != 0)
    throw Error("causal LM: " + std::to_string(heads) + " query heads cannot share " + std::to_string(kv_heads) +
                " key/value heads evenly");
  if (head_dim % 2 != 0) throw Error("causal LM: head_dim must be even for rotary positions, got " + std::to_string(head_dim));
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) throw Error("causal LM: rope_theta must be positive");
  if (!(eps > 0)) throw Error("causal LM: eps must be positive");
  if (bos >= vocab || eos >= vocab) throw Error("causal LM: BOS/EOS id outside the vocabulary");
}

CausalLM::CausalLM() : w_(std::make_unique<Weights>()) {}
CausalLM::~CausalLM() = default;
CausalLM::CausalLM(CausalLM&&) noexcept = default;
CausalLM& CausalLM::operator=(CausalLM&&) noexcept = default;

namespace {

// What the causal LM runs of a spec (the blocks' own limits: StackSpec::check_supported).
void check_causal_spec(const nn::StackSpec& s, const std::string& path) {
  try {
    s.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  s.check_supported(path);
  auto refuse = [&](const std::string& what) { throw Error(path + ": " + what); };
  if (s.kind != nn::StackKind::causal_lm)
    refuse("the architecture describes a " + std::string(nn::to_string(s.kind)) + ", not a causal LM");
  if (s.norm.kind != nn::NormKind::rmsnorm && s.norm.kind != nn::NormKind::rmsnorm_one_plus)
    refuse("the causal LM's norms are RMSNorm, not " + std::string(nn::to_string(s.norm.kind)));
  if (s.norm.sites == nn::NormSites::post) refuse("the causal LM's norms come before each sublayer");
  if (!s.final_norm) refuse("the causal LM has a final norm");
  if (s.embedding.positions != nn::Positions::rotary) refuse("the causal LM's positions are rotary");
  if (s.attention.rope.adjacent_pairs) refuse("rotary pairs must be put in halves order by the name table");
}

// GGUF keeps W_Q's and W_K's rows in llama.cpp's rotary order (each head's
// rows interleaved in pairs); transformers' order has the two halves of the
// head apart: new row h·2m + t·m + i = file row h·2m + 2i + t (m = head_dim / 2).
std::vector<float> unpermute_rows(const std::vector<float>& w, int64_t heads, int64_t cols) {
  const int64_t rows = int64_t(w.size()) / cols, m = rows / heads / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t i = 0; i < m; ++i)
        std::copy_n(w.begin() + (h * 2 * m + 2 * i + t) * cols, cols, out.begin() + (h * 2 * m + t * m + i) * cols);
  return out;
}


}  // namespace

CausalLM CausalLM::load(const std::string& path, const CausalLMLoadOptions& opts) {
  CausalLM lm;
  const bool native = opts.compute == LMCompute::native;
  lm.path_ = path;
  std::error_code ec;
  const bool hf = fs::is_directory(path, ec);
  if (opts.ffn_dtype != WeightDtype::fp32 && native && !hf)
    throw Error(path + ": dtype " + std::string(to_string(opts.ffn_dtype)) +
                " applies to float32 SwiGLU sublayers (Hugging Face checkpoints, or a GGUF with compute fp32); native "
                "compute keeps the file's own quantized blocks");
  // The format's config reader and tensor source; the architecture's name table.
  CausalLMConfig& c = lm.cfg_;
  std::optional<models::TensorSource> source;
  std::string untied_note;  // why a missing head is an error
  std::shared_ptr<const GgufFile> gguf;
  const models::Architecture* arch = nullptr;
  if (hf) {
    const fs::path dir(path), cfg_path = dir / "config.json", st_path = dir / "model.safetensors",
        tok_path = dir / "tokenizer.json";
    const fs::path index_path = dir / "model.safetensors.index.json";
    const bool sharded = !fs::exists(st_path, ec) && fs::exists(index_path, ec);
    for (const auto& p : {cfg_path, sharded ? index_path : st_path})
      if (!fs::exists(p, ec))
        throw Error(p.string() + ": missing (a Hugging Face directory holds config.json and model.safetensors, or "
                    "model.safetensors.index.json and its shards)");
    const nlohmann::json j = models::read_json(cfg_path);
    const std::string type = models::json_opt<std::string>(j, "model_type", "", cfg_path);
    arch = models::find_architecture(type, models::Format::safetensors);
    if (!arch)
      throw Error(cfg_path.string() + ": model_type is \"" + type + "\"; expected " +
                  models::architecture_names(models::Format::safetensors) + " (LlamaForCausalLM)");
    models::ArchConfig ac = arch->from_hf(j, cfg_path);
    c = ac.config;
    lm.w_->spec = std::move(ac.spec);
    source = sharded ? models::TensorSource::safetensors_index(index_path.string(), "config.json")
                     : models::TensorSource::safetensors(st_path.string(), "config.json");
    untied_note = "config.json: tie_word_embeddings is false";
    // The tokenizer: tokenizer.json's byte-level BPE, or else (a
    // SentencePiece model's tokenizer.json, Metaspace: Llama 2, Mistral,
    // Gemma, Phi-3) its tokenizer.model.
    const fs::path spm_path = dir / "tokenizer.model";
    if (fs::exists(tok_path, ec)) {
      try {
        auto bpe = std::make_shared<BpeTokenizer>(BpeTokenizer::from_json(tok_path.string()));
        c.add_bos = bpe->adds_bos();
        if (c.bos < 0) c.bos = bpe->template_bos();
        lm.tok_ = std::move(bpe);
      } catch (const Error&) {
        if (!fs::exists(spm_path, ec)) throw;
      }
    }
    if (!lm.tok_ && fs::exists(spm_path, ec)) {
      lm.tok_ = std::make_shared<SpmTokenizer>(SpmTokenizer::from_file(spm_path.string()));
      c.add_bos = lm.tok_->adds_bos();
    }
    const fs::path tc = dir / "tokenizer_config.json";
    if (fs::exists(tc, ec)) {
      const nlohmann::json t = models::read_json(tc);
      // A string, or (tokenizers with several) a list of {name, template}: the one named "default".
      if (t.contains("chat_template") && t["chat_template"].is_string()) lm.chat_template_ = t["chat_template"];
      if (t.contains("chat_template") && t["chat_template"].is_array())
        for (const auto& e : t["chat_template"])
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            lm.chat_template_ = e["template"];
      if (t.contains("add_bos_token") && t["add_bos_token"].is_boolean()) c.add_bos = t["add_bos_token"].get<bool>();
    }
    // The texts transformers gives the template as bos_token and eos_token:
    // the tokenizer's own (tokenizer_config.json, else special_tokens_map.json;
    // a string or an AddedToken's "content"), which can differ from the token
    // config.json's ids name (Mistral-Nemo-Instruct-2407).
    for (const fs::path& f : {dir / "tokenizer_config.json", dir / "special_tokens_map.json"}) {
      if (!fs::exists(f, ec)) continue;
      const nlohmann::json t = models::read_json(f);
      auto text_of = [&](const char* key) -> std::optional<std::string> {
        if (!t.contains(key)) return std::nullopt;
        const auto& v = t[key];
        if (v.is_string()) return v.get<std::string>();
        if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
        return std::nullopt;
      };
      if (!lm.bos_text_) lm.bos_text_ = text_of("bos_token");
      if (!lm.eos_text_) lm.eos_text_ = text_of("eos_token");
    }
    // Newer checkpoints keep the template in a file of its own, which transformers prefers.
    if (const fs::path jt = dir / "chat_template.jinja"; fs::exists(jt, ec)) {
      std::ifstream in(jt, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      if (!in) throw Error(jt.string() + ": cannot be read");
      lm.chat_template_ = ss.str();
    }
  } else {
    gguf = std::make_shared<const GgufFile>(path);
    const std::string& name = gguf->get_string("general.architecture");
    arch = models::find_architecture(name, models::Format::gguf);
    if (!arch)
      throw Error(path + ": general.architecture is \"" + name + "\"; only " +
                  models::architecture_names(models::Format::gguf) +
                  (models::architecture_names(models::Format::gguf).find(',') == std::string::npos ? " is" : " are") +
                  " supported");
    models::ArchConfig ac = arch->from_gguf(*gguf);
    c = ac.config;
    lm.w_->spec = std::move(ac.spec);
    source = models::TensorSource::gguf(gguf, name + ".* metadata");
  }
  const nn::StackSpec& spec = lm.w_->spec;
  check_causal_spec(spec, path);
  const models::TensorSource& src = *source;
  const models::NameTable& names = src.format() == models::Format::gguf ? *arch->gguf_names : *arch->hf_names;
  using T = models::LMTensor;
  const auto name = [&](T t, int64_t l = -1) { return names.name(t, l); };

  // A product from the file's tensors, stacked by rows: their blocks where
  // native compute can keep them (a GGUF whose parts are each of a native
  // type of src/core/quant_types.hpp; consecutive parts of one type share
  // panels), else float32. rope_heads > 0: W_Q's or W_K's rows, brought from
  // the file's rotary order to transformers'. A part is `rows` rows of a
  // tensor of `total` rows from row0 on (a share of a fused tensor).
  struct Part {
    std::string name;
    int64_t rows, rope_heads, row0 = 0, total = 0;
    int64_t all() const { return total > 0 ? total : rows; }
  };
  // Progress: the share of the file's tensor bytes read so far (GGUF; a
  // Hugging Face directory reports only its end).
  uint64_t total_bytes = 0, done_bytes = 0;
  if (gguf)
    for (const GgufTensor& ti : gguf->tensors()) total_bytes += ti.bytes;
  std::set<std::string> counted;  // a fused tensor's bytes count once
  const auto advance = [&](const std::string& n) {
    if (!opts.on_progress || !gguf || total_bytes == 0 || !counted.insert(n).second) return;
    done_bytes += gguf->tensor(n).bytes;
    opts.on_progress(std::min(0.999, double(done_bytes) / double(total_bytes)));
  };
  // A part's rows as float32, in transformers' order.
  auto part_rows = [&](const Part& p, int64_t k) {
    std::vector<float> v = src.read(p.name, {p.all(), k});
    if (gguf) gguf->release(gguf->tensor(p.name));
    if (p.all() != p.rows) v = std::vector<float>(v.begin() + p.row0 * k, v.begin() + (p.row0 + p.rows) * k);
    return p.rope_heads > 0 ? unpermute_rows(v, p.rope_heads, k) : v;
  };
  auto product = [&](const std::vector<Part>& parts, int64_t k, const std::vector<float>& bias = {}) -> nn::Linear {
    const float* b = bias.empty() ? nullptr : bias.data();
    // Progress after the product is made (on each return; an error on the way propagates as it is).
    const auto made = [&](nn::Linear l) {
      for (const Part& p : parts) advance(p.name);
      return l;
    };
    std::vector<const nn::QuantType*> types;
    bool blocks = native && src.format() == models::Format::gguf;
    for (const Part& p : parts) {
      src.expect(p.name, {p.all(), k});
      if (!gguf) continue;
      const nn::QuantType* ti = nn::find_quant_type(uint32_t(gguf->tensor(p.name).type));
      if (!ti || !ti->native() || k % ti->block != 0) blocks = false;
      types.push_back(ti);
    }
    // F16 or BF16 parts (all of one): 16-bit panels, the fp32 layer's bits in half its bytes.
    const bool f16 = !types.empty() && std::all_of(types.begin(), types.end(), [&](const nn::QuantType* q) {
      return q && q == types[0] && (q->id == GgmlType::f16 || q->id == GgmlType::bf16);
    });
    if (native && gguf && f16) {
      std::vector<uint16_t> bits;
      for (const Part& p : parts) {
        const uint8_t* base = gguf->data(gguf->tensor(p.name));
        for (int64_t r = 0; r < p.rows; ++r) {
          int64_t from = r;
          if (p.rope_heads > 0) {  // as below
            const int64_t m = p.rows / p.rope_heads / 2, h = r / (2 * m), t = (r % (2 * m)) / m, i = r % m;
            from = h * 2 * m + 2 * i + t;
          }
          const size_t at = bits.size();
          bits.resize(at + size_t(k));
          std::memcpy(bits.data() + at, base + (p.row0 + from) * k * 2, size_t(k) * 2);
        }
      }
      for (const Part& p : parts) gguf->release(gguf->tensor(p.name));
      const int64_t rows = int64_t(bits.size()) / k;
      return made(
          nn::Linear(bits.data(), k, rows, types[0]->id == GgmlType::f16 ? WeightDtype::fp16 : WeightDtype::bf16, b));
    }
    if (blocks) {
      std::vector<nn::QPanels> panels;
      std::vector<const uint8_t*> rows;
      for (size_t i = 0; i < parts.size(); ++i) {
        const Part& p = parts[i];
        const nn::QuantType* qt = types[i];
        const int64_t row_bytes = qt->row_bytes(k);
        const uint8_t* base = gguf->data(gguf->tensor(p.name));
        for (int64_t r = 0; r < p.rows; ++r) {
          int64_t from = r;
          if (p.rope_heads > 0) {  // new row h·2m + t·m + i is file row h·2m + 2i + t
            const int64_t m = p.rows / p.rope_heads / 2, h = r / (2 * m), t = (r % (2 * m)) / m, i = r % m;
            from = h * 2 * m + 2 * i + t;
          }
          rows.push_back(base + (p.row0 + from) * row_bytes);
        }
        if (i + 1 == parts.size() || types[i + 1] != qt) {
          panels.push_back(nn::repack_rows(qt->id, rows, k));
          rows.clear();
        }
      }
      for (const Part& p : parts) gguf->release(gguf->tensor(p.name));  // repacked: the file's pages go back
      return made(panels.size() == 1 ? nn::Linear(std::move(panels[0]), b) : nn::Linear(std::move(panels), b));
    }
    std::vector<float> all;
    for (const Part& p : parts) {
      std::vector<float> v = part_rows(p, k);
      all.insert(all.end(), v.begin(), v.end());
    }
    // The row count first: the arguments' order of evaluation is unspecified
    // (clang moved `all` away before its size was read: an empty product).
    const int64_t rows = int64_t(all.size()) / k;
    return made(nn::Linear(all.data(), k, rows, b));
  };
  // A float32 matrix (a tensor, or a part of one), its rows in transformers' order.
  auto matrix = [&](const Part& p, int64_t cols) {
    std::vector<float> v = part_rows(p, cols);
    advance(p.name);
    return v;
  };
  const int64_t d = c.d_model, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
  const int64_t q_rope = names.qk_rows_interleaved ? c.heads : 0, k_rope = names.qk_rows_interleaved ? c.kv_heads : 0;
  // The tensor that holds t's rows: its own, or its share of a fused one
  // where the table names that (Phi-3's qkv and gate_up; gate first).
  auto part = [&](T t, int64_t l) -> Part {
    const bool qkv = t == T::q || t == T::k || t == T::v, gu = t == T::gate || t == T::up;
    const int64_t rows = t == T::q ? qd : qkv ? kvd : gu ? c.d_ff : d;
    const int64_t rope = t == T::q ? q_rope : t == T::k ? k_rope : 0;
    if (qkv && names.names[size_t(T::qkv)])
      return {name(T::qkv, l), rows, rope, t == T::q ? 0 : t == T::k ? qd : qd + kvd, qd + 2 * kvd};
    if (gu && names.names[size_t(T::gate_up)]) return {name(T::gate_up, l), rows, 0, t == T::gate ? 0 : c.d_ff, 2 * c.d_ff};
    return {name(t, l), rows, rope};
  };
  // Blocks stay blocks only from a GGUF with native compute; else every
  // layer's FFN is the fused float sublayer (packed below, converted to
  // opts.ffn_dtype).
  const bool keep_blocks = native && src.format() == models::Format::gguf;

  // A norm's γ; Gemma's (1 + w) norms hold w: γ = 1 + w, in float32 as transformers adds it.
  const bool one_plus = spec.norm.kind == nn::NormKind::rmsnorm_one_plus;
  auto norm = [&](const std::string& n) {
    std::vector<float> g = src.read(n, {d});
    if (one_plus)
      for (float& v : g) v = 1.0f + v;
    return g;
  };
  // Q|K|V's bias (AttentionSpec::qkv_bias; Q's and K's rows in the file's order as their matrices');
  // W_O's (out_bias).
  auto qkv_bias = [&](int64_t l) {
    std::vector<float> b;
    if (!spec.attention.qkv_bias) return b;
    for (const auto& [t, rows, rope] : {std::tuple{T::q_bias, qd, q_rope}, std::tuple{T::k_bias, kvd, k_rope},
                                        std::tuple{T::v_bias, kvd, int64_t(0)}}) {
      std::vector<float> v = src.read(name(t, l), {rows});
      if (rope > 0) v = unpermute_rows(v, rope, 1);
      b.insert(b.end(), v.begin(), v.end());
    }
    return b;
  };
  auto out_bias = [&](int64_t l) {
    return spec.attention.out_bias ? src.read(name(T::o_bias, l), {d}) : std::vector<float>{};
  };

  const bool post_norms = spec.norm.sites == nn::NormSites::pre_and_post;
  if (post_norms && opts.ffn_dtype != WeightDtype::fp32)
    throw Error(path + ": dtype " + std::string(to_string(opts.ffn_dtype)) +
                " applies to fused FFN sublayers; this architecture's FFN has a norm after it (float32 products)");
  auto post_norm = [&](T t, int64_t l) { return post_norms ? norm(name(t, l)) : std::vector<float>{}; };

  Weights& w = *lm.w_;
  src.expect(name(T::embed), {c.vocab, d});
  w.norm = norm(name(T::norm));
  if (!c.tied && !src.has(name(T::head))) models::throw_missing_tensor(src.path(), name(T::head), untied_note);
  w.head = product({{name(c.tied ? T::embed : T::head), c.vocab, 0}}, d);
  if (!c.tied) w.embed = product({{name(T::embed), c.vocab, 0}}, d);  // tied: the head's rows
  const Config fc = nn::ffn_config(spec);
  for (int64_t l = 0; l < c.layers; ++l) {
    Weights::Layer L;
    L.attn_norm = norm(name(T::attn_norm, l));
    L.attn_post_norm = post_norm(T::attn_post_norm, l);
    if (spec.attention.qk_norm) {
      L.q_norm = src.read(name(T::q_norm, l), {c.head_dim});
      L.k_norm = src.read(name(T::k_norm, l), {c.head_dim});
    }
    const std::vector<float> in_bias = qkv_bias(l), o_bias = out_bias(l);
    if (keep_blocks) {
      L.attn.in = product({part(T::q, l), part(T::k, l), part(T::v, l)}, d, in_bias);
      L.attn.out = product({{name(T::o, l), d, 0}}, qd, o_bias);
      L.ffn.emplace_back(fc, norm(name(T::ffn_norm, l)), std::vector<float>{}, product({part(T::up, l), part(T::gate, l)}, d),
                         product({{name(T::down, l), d, 0}}, c.d_ff), post_norm(T::ffn_post_norm, l));
      w.layers.push_back(std::move(L));
      continue;
    }
    std::vector<float> wqkv = matrix(part(T::q, l), d);
    for (T t : {T::k, T::v}) {
      const std::vector<float> v = matrix(part(t, l), d);
      wqkv.insert(wqkv.end(), v.begin(), v.end());
    }
    L.attn.in = nn::Linear(wqkv.data(), d, qd + 2 * kvd, in_bias.empty() ? nullptr : in_bias.data());
    L.attn.out = nn::Linear(matrix({name(T::o, l), d, 0}, qd).data(), qd, d, o_bias.empty() ? nullptr : o_bias.data());
    if (post_norms) {  // the fused FeedForward has no second norm: the sublayer on fp32 products
      std::vector<float> ug = matrix(part(T::up, l), d), gate = matrix(part(T::gate, l), d);
      ug.insert(ug.end(), gate.begin(), gate.end());
      L.ffn.emplace_back(fc, norm(name(T::ffn_norm, l)), std::vector<float>{}, nn::Linear(ug.data(), d, 2 * c.d_ff),
                         nn::Linear(matrix({name(T::down, l), d, 0}, c.d_ff).data(), c.d_ff, d),
                         post_norm(T::ffn_post_norm, l));
      w.layers.push_back(std::move(L));
      continue;
    }
    ffn::Weights fw;
    fw.norm_weight = norm(name(T::ffn_norm, l));
    fw.wg = matrix(part(T::gate, l), d);
    fw.w1 = matrix(part(T::up, l), d);
    fw.w2 = matrix({name(T::down, l), d, 0}, c.d_ff);
    L.ffn.emplace_back(opts.ffn_dtype == WeightDtype::fp32 ? FeedForward(fc, std::move(fw))
                                                           : FeedForward(fc, std::move(fw)).converted(opts.ffn_dtype));
    w.layers.push_back(std::move(L));
  }
  if (gguf) {
    if (gguf->find("tokenizer.ggml.model")) {
      lm.tok_ = Tokenizer::from_gguf(*gguf);
      c.add_bos = lm.tok_->adds_bos();
    }
    if (gguf->find("tokenizer.chat_template")) lm.chat_template_ = gguf->get_string("tokenizer.chat_template");
  }
  if (lm.tok_ && lm.tok_->vocab_size() > c.vocab)
    throw Error(path + ": the tokenizer has " + std::to_string(lm.tok_->vocab_size()) + " tokens, the model " +
                std::to_string(c.vocab));
  if (opts.on_progress) opts.on_progress(1.0);
  lm.native_ = false;
  for (const auto& L : w.layers) lm.native_ = lm.native_ || L.attn.in.blocks() || L.ffn[0].blocks();
  lm.native_ = lm.native_ || w.head.blocks();
  return lm;
}

CausalLMState CausalLM::start(int64_t sequences, int64_t capacity) const {
  if (sequences < 0) throw Error("start: sequences must be at least 0, got " + std::to_string(sequences));
  if (capacity < 1) throw Error("start: capacity must be at least 1, got " + std::to_string(capacity));
  // The caches' floats per layer, K and V each; refused past 2^40 (4 TiB), which also keeps the products exact.
  const int64_t kvd = cfg_.kv_heads * cfg_.head_dim;
  if (capacity > (int64_t(1) << 40) / kvd || sequences > (int64_t(1) << 40) / (capacity * kvd))
    throw Error("start: " + std::to_string(sequences) + " sequences of " + std::to_string(capacity) +
                " positions need more cache than any machine has");
  CausalLMState st;
  auto& s = *st.data_;
  s.cache = nn::KvCache(cfg_.layers, kvd, capacity, sequences);
  for (int64_t i = 0; i < sequences; ++i) s.cache.join();
  s.head_dim = cfg_.head_dim;
  s.rope = nn::rope_table(w_->spec, capacity);
  return st;
}

void CausalLM::extend(CausalLMState& state, const int32_t* ids, const std::vector<int64_t>& counts, float* logits,
                      bool every_position, const RunOptions& opts) const {
  CausalLMState::Data& s = *state.data_;
  nn::KvCache& cache = s.cache;
  const CausalLMConfig& c = cfg_;
  if (cache.layers() != c.layers || cache.kvd() != c.kv_heads * c.head_dim || s.head_dim != c.head_dim)
    throw Error("extend: the state was started by a model with other settings");
  const int64_t B = state.live();
  if (int64_t(counts.size()) != B)
    throw Error("extend: " + std::to_string(counts.size()) + " counts for " + std::to_string(B) + " live sequences");
  std::vector<int64_t> off(size_t(B) + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = counts[size_t(b)];
    if (k < 0) throw Error("extend: sequence " + std::to_string(b) + " is given " + std::to_string(k) + " tokens");
    if (cache.length(b) + k > cache.capacity())
      throw Error("extend: sequence " + std::to_string(b) + " would hold " + std::to_string(cache.length(b) + k) +
                  " positions, more than the state's capacity " + std::to_string(cache.capacity()));
    off[size_t(b) + 1] = off[size_t(b)] + k;
  }
  const int64_t n = off.back();
  if (n == 0) return;
  if (!ids || !logits) throw Error("extend: ids and logits must not be null");
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      throw Error("token id " + std::to_string(ids[i]) + " is outside the vocabulary (0.." + std::to_string(c.vocab - 1) + ")");
  const nn::Context cx(opts);
  const int threads = cx.threads();
  const int64_t d = c.d_model;

  std::vector<float> x(size_t(n * d)), a(size_t(n * d));
  nn::QActs acts;
  std::vector<float> mean(static_cast<size_t>(n)), rstd(static_cast<size_t>(n));
  const nn::StackSpec& spec = w_->spec;
  for (int64_t i = 0; i < n; ++i) {
    (w_->embed.empty() ? w_->head : w_->embed).row(ids[i], x.data() + i * d);
  }
  if (spec.embedding.scale != 1.0f)  // Gemma: × √d_model, in float32
    for (float& v : x) v *= spec.embedding.scale;
  // Each new row's position and its row of the cache.
  nn::KeysValues kv;
  kv.kind = nn::KeysValues::Kind::cache;
  kv.cache = &cache;
  kv.positions.resize(size_t(n));
  kv.write.resize(size_t(n));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = off[size_t(b)]; r < off[size_t(b) + 1]; ++r)
      kv.positions[size_t(r)] = cache.length(b) + r - off[size_t(b)];
  // The new positions' pages (the cache's rows may move: the block takes K
  // and V per layer); an error before the end gives the old lengths back.
  nn::KvCache::Step step(cache, counts);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = off[size_t(b)]; r < off[size_t(b) + 1]; ++r)
      kv.write[size_t(r)] = cache.row(b, kv.positions[size_t(r)]);
    kv.kv_len.push_back(cache.length(b));
  }
  // The attention sublayer every decoder has (src/modules/attention_block.hpp):
  // pre-norm RMSNorm, Q|K|V, rotary positions, the cache, grouped-query
  // causal attention, W_O and the residual.
  nn::DecoderLayerStep ls;
  ls.off = &off;
  ls.S = cache.capacity();
  ls.self = &kv;
  ls.run.ctx = &cx;
  ls.run.acts = &acts;
  ls.ffn_opts = opts;
  ls.ffn_opts.threads = threads;
  ls.ffn_opts.training = false;
  nn::AttentionSaved scratch;
  static const std::vector<float> none;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Weights::Layer& L = w_->layers[size_t(l)];
    nn::AttentionBlockConfig bc = nn::attention_config(spec, l);
    bc.rope = &s.rope;
    const nn::DecoderLayerView view{
        {none, none, none, none, L.attn_norm, none, L.attn_post_norm.empty() ? nullptr : &L.attn_post_norm,
         L.q_norm.empty() ? nullptr : &L.q_norm, L.k_norm.empty() ? nullptr : &L.k_norm},
        L.attn, nullptr, nullptr, nullptr, &L.ffn[0], nullptr};
    nn::decoder_layer_step(bc, view, l, x.data(), a.data(), nullptr, n, ls, scratch);
  }
  // The rows that get logits: every position, or each sequence's last
  // (sequences given no tokens have none), packed to the front.
  int64_t m = n;
  std::vector<int64_t> to;  // with !every_position: the sequence of each packed row
  if (!every_position) {
    m = 0;
    for (int64_t b = 0; b < B; ++b)
      if (counts[size_t(b)] > 0) {
        std::copy_n(x.begin() + (off[size_t(b) + 1] - 1) * d, d, x.begin() + m * d);
        to.push_back(b);
        ++m;
      }
  }
  nn::norm_forward(cx, NormType::rmsnorm, c.eps, x.data(), m, d, w_->norm.data(), nullptr, a.data(), mean.data(),
                   rstd.data());
  const bool packed = !every_position && m < B;  // rows to spread out to their sequences afterwards
  std::vector<float> packed_logits(packed ? size_t(m * c.vocab) : 0);
  float* out = packed ? packed_logits.data() : logits;
  w_->head.forward(cx, a.data(), m, out, {.acts = &acts});
  if (const float cap = spec.embedding.final_softcap; cap > 0)  // Gemma 2: as transformers, ÷ cap, tanh, × cap
    for (int64_t i = 0; i < m * c.vocab; ++i) out[i] = std::tanh(out[i] / cap) * cap;
  if (packed)
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(out + r * c.vocab, c.vocab, logits + to[size_t(r)] * c.vocab);
  step.done();
}

std::vector<float> CausalLM::logits(const std::vector<int32_t>& ids, const RunOptions& opts) const {
  CausalLMState st = start(1, std::max<int64_t>(1, int64_t(ids.size())));
  std::vector<float> out(ids.size() * size_t(cfg_.vocab));
  extend(st, ids.data(), {int64_t(ids.size())}, out.data(), true, opts);
  return out;
}

std::vector<int32_t> CausalLM::generate(const std::vector<int32_t>& prompt, const SamplingOptions& s,
                                        const std::function<bool(int32_t)>& on_token, const RunOptions& opts) const {
  s.validate();
  if (prompt.empty()) throw Error("generate: the prompt must hold at least one token");
  if (cfg_.context > 0 && s.max_new_tokens > cfg_.context - int64_t(prompt.size()))
    throw Error("generate: " + std::to_string(prompt.size()) + " prompt tokens + " + std::to_string(s.max_new_tokens) +
                " new tokens is past the model's context of " + std::to_string(cfg_.context) + " positions, by " +
                std::to_string(s.max_new_tokens - (cfg_.context - int64_t(prompt.size()))));
  const int64_t V = cfg_.vocab;
  if (s.beams > V / 2)
    throw Error("--beams: " + std::to_string(s.beams) + " is more than half the vocabulary (" + std::to_string(V) + ")");
  // (start refuses a capacity no machine could hold; the clamp keeps the sum from overflowing.)
  CausalLMState st = start(1, int64_t(prompt.size()) + std::clamp<int64_t>(s.max_new_tokens, 1, int64_t(1) << 41));
  if (s.max_new_tokens == 0) return {};
  return decode_in(st, prompt, 0, s, on_token, opts);
}

std::vector<int32_t> CausalLM::generate(CausalLMState& st, const std::vector<int32_t>& context, const SamplingOptions& s,
                                        const std::function<bool(int32_t)>& on_token, const RunOptions& opts) const {
  s.validate();
  if (s.beams > 1) throw Error("generate: beam search (--beams) starts from an empty state, not a kept one");
  if (context.empty()) throw Error("generate: the context must hold at least one token");
  if (st.live() != 1) throw Error("generate: the state must hold one sequence, not " + std::to_string(st.live()));
  if (st.data_->cache.layers() != cfg_.layers) throw Error("generate: the state was not started by this model");
  const int64_t n = int64_t(context.size());
  if (s.max_new_tokens > st.capacity() - n)
    throw Error("generate: " + std::to_string(n) + " context tokens + " + std::to_string(s.max_new_tokens) +
                " new tokens is past the state's capacity of " + std::to_string(st.capacity()) + " positions, by " +
                std::to_string(s.max_new_tokens - (st.capacity() - n)));
  // At least the last token is read again: its logits choose the first new one.
  if (st.length(0) >= n) st.truncate(0, n - 1);
  if (s.max_new_tokens == 0) return {};
  return decode_in(st, context, st.length(0), s, on_token, opts);
}

// The decoding engine on `st`, which holds context[0, from): step 0 reads
// context[from, end), each later step one token per live sequence.
std::vector<int32_t> CausalLM::decode_in(CausalLMState& st, const std::vector<int32_t>& prompt, int64_t from,
                                         const SamplingOptions& s, const std::function<bool(int32_t)>& on_token,
                                         const RunOptions& opts) const {
  const int64_t V = cfg_.vocab;
  struct Model final : decoding::Stepper {
    const CausalLM& m;
    CausalLMState& st;
    const std::vector<int32_t>& prompt;
    int64_t from;
    const RunOptions& opts;
    Model(const CausalLM& m, CausalLMState& st, const std::vector<int32_t>& prompt, int64_t from, const RunOptions& opts)
        : m(m), st(st), prompt(prompt), from(from), opts(opts) {}
    void step(const std::vector<int64_t>& last, int64_t t, float* logits) override {
      if (t == 0) {
        m.extend(st, prompt.data() + from, {int64_t(prompt.size()) - from}, logits, false, opts);
        return;
      }
      const std::vector<int32_t> ids(last.begin(), last.end());
      m.extend(st, ids.data(), std::vector<int64_t>(ids.size(), 1), logits, false, opts);
    }
    void select(const std::vector<int64_t>& from) override { st.select(from); }
  } model(*this, st, prompt, from, opts);
  const nn::Context cx(opts);
  decoding::Search search;
  search.vocab = V;
  search.max_new = s.max_new_tokens;
  if (s.stop_at_eos) search.end_ids = cfg_.end_ids;
  search.beams = s.beams;
  search.length_penalty = s.length_penalty;
  search.sampling = s;
  search.kernels = &cx.kernels();
  search.threads = cx.threads();
  search.process = [&](float* row, int64_t, int64_t t) { decoding::check_finite_logits(row, V, t); };
  if (s.beams == 1 && on_token) search.on_token = [&](int64_t, int64_t tok) { return on_token(int32_t(tok)); };
  const std::vector<std::vector<int64_t>> made = decoding::decode(model, {int64_t(prompt.back())}, {prompt}, search);
  std::vector<int32_t> out(made[0].begin(), made[0].end());
  if (s.beams > 1 && on_token)  // the best hypothesis, known only at the end
    for (int32_t tok : out)
      if (!on_token(tok)) break;
  return out;
}

size_t CausalLM::weight_bytes() const {
  return w_->embed.bytes() + (step_bytes(0) - (w_->embed.empty() ? 0 : w_->embed.bytes() / size_t(cfg_.vocab)));
}

size_t CausalLM::step_bytes(int64_t positions) const {
  // One embedding row (tied: the head's, read with the head), the norms, every product, the head.
  size_t b = w_->norm.size() * sizeof(float) + w_->head.bytes();
  if (!w_->embed.empty()) b += w_->embed.bytes() / size_t(cfg_.vocab);
  for (const auto& L : w_->layers)
    b += (L.attn_norm.size() + L.attn_post_norm.size() + L.q_norm.size() + L.k_norm.size()) * sizeof(float) + L.attn.in.bytes() + L.attn.out.bytes() +
         L.ffn[0].bytes();
  // Each layer's cached keys and values (float32) at `positions`.
  return b + size_t(cfg_.layers) * size_t(std::max<int64_t>(positions, 0)) * size_t(2 * cfg_.kv_heads * cfg_.head_dim) *
                 sizeof(float);
}

double CausalLM::flops(int64_t t, int64_t p) const {
  const CausalLMConfig& c = cfg_;
  const double d = double(c.d_model), qd = double(c.heads * c.head_dim), kvd = double(c.kv_heads * c.head_dim);
  const double per_token = 2.0 * (d * (qd + 2 * kvd) + qd * d + 3.0 * d * double(c.d_ff));
  // Attention: each query against p + its own position keys, QKᵀ and PV.
  const double keys = double(t) * double(p) + double(t) * double(t + 1) / 2.0;
  return double(c.layers) * (double(t) * per_token + 4.0 * qd * keys) + 2.0 * double(t) * d * double(c.vocab);
}

}  // namespace ffn
