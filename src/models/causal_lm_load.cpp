// CausalLM::load as named steps (issue 63): open the checkpoint (a Hugging
// Face directory or a GGUF: the architecture's config reader, the tensor
// source, the tokenizer and the chat template), check the spec, read the
// weights through the architecture's name table and the storage policy of
// src/models/linear_factory.hpp, then the GGUF's tokenizer.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include "ffn/causal_lm.hpp"
#include "ffn/gguf.hpp"
#include "ffn/tokenizer.hpp"
#include "core/json_file.hpp"
#include "models/arch.hpp"
#include "models/causal_lm_weights.hpp"
#include "models/checkpoint.hpp"
#include "models/linear_factory.hpp"

namespace fs = std::filesystem;

namespace ffn {

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

}  // namespace

// The steps; nested in CausalLM for its private members.
struct CausalLM::Loader {
  // The checkpoint being read: its tensors, the file (a GGUF's, else null)
  // and the architecture, whose name table names the tensors.
  struct Checkpoint {
    std::optional<models::TensorSource> source;
    std::shared_ptr<const GgufFile> gguf;
    const models::Architecture* arch = nullptr;
    std::string untied_note;  // why a missing head is an error
    const models::NameTable& names() const {
      return source->format() == models::Format::gguf ? *arch->gguf_names : *arch->hf_names;
    }
  };

  // A Hugging Face directory: config.json through the architecture's
  // reader, model.safetensors (or its shards), the tokenizer, the chat template.
  static Checkpoint open_directory(CausalLM& lm, const std::string& path) {
    Checkpoint ck;
    std::error_code ec;
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
    ck.arch = models::find_architecture(type, models::Format::safetensors);
    if (!ck.arch)
      throw Error(cfg_path.string() + ": model_type is \"" + type + "\"; expected " +
                  models::architecture_names(models::Format::safetensors) + " (LlamaForCausalLM)");
    models::ArchConfig ac = ck.arch->from_hf(j, cfg_path);
    lm.cfg_ = ac.config;
    lm.w_->spec = std::move(ac.spec);
    ck.source = sharded ? models::TensorSource::safetensors_index(index_path.string(), "config.json")
                     : models::TensorSource::safetensors(st_path.string(), "config.json");
    ck.untied_note = "config.json: tie_word_embeddings is false";
    // The tokenizer: tokenizer.json's byte-level BPE, or else (a
    // SentencePiece model's tokenizer.json, Metaspace: Llama 2, Mistral,
    // Gemma, Phi-3) its tokenizer.model.
    const fs::path spm_path = dir / "tokenizer.model";
    if (fs::exists(tok_path, ec)) {
      try {
        auto bpe = std::make_shared<BpeTokenizer>(BpeTokenizer::from_json(tok_path.string()));
        lm.cfg_.add_bos = bpe->adds_bos();
        if (lm.cfg_.bos < 0) lm.cfg_.bos = bpe->template_bos();
        lm.tok_ = std::move(bpe);
      } catch (const Error&) {
        if (!fs::exists(spm_path, ec)) throw;
      }
    }
    if (!lm.tok_ && fs::exists(spm_path, ec)) {
      lm.tok_ = std::make_shared<SpmTokenizer>(SpmTokenizer::from_file(spm_path.string()));
      lm.cfg_.add_bos = lm.tok_->adds_bos();
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
      if (t.contains("add_bos_token") && t["add_bos_token"].is_boolean()) lm.cfg_.add_bos = t["add_bos_token"].get<bool>();
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
    return ck;
  }

  // A GGUF: its metadata through the architecture's reader; its tensors mapped.
  static Checkpoint open_gguf(CausalLM& lm, const std::string& path) {
    Checkpoint ck;
    ck.gguf = std::make_shared<const GgufFile>(path);
    const std::string& name = ck.gguf->get_string("general.architecture");
    ck.arch = models::find_architecture(name, models::Format::gguf);
    if (!ck.arch)
      throw Error(path + ": general.architecture is \"" + name + "\"; only " +
                  models::architecture_names(models::Format::gguf) +
                  (models::architecture_names(models::Format::gguf).find(',') == std::string::npos ? " is" : " are") +
                  " supported");
    models::ArchConfig ac = ck.arch->from_gguf(*ck.gguf);
    lm.cfg_ = ac.config;
    lm.w_->spec = std::move(ac.spec);
    ck.source = models::TensorSource::gguf(ck.gguf, name + ".* metadata");
    return ck;
  }

  // The weights: every tensor the spec asks for, by the architecture's name
  // table, made into products by the storage policy.
  static void read_weights(CausalLM& lm, const Checkpoint& ck, const std::string& path, const CausalLMLoadOptions& opts) {
    CausalLMConfig& c = lm.cfg_;
    const nn::StackSpec& spec = lm.w_->spec;
    const models::TensorSource& src = *ck.source;
    const models::NameTable& names = ck.names();
    const std::string& untied_note = ck.untied_note;
    using T = models::LMTensor;
    const auto name = [&](T t, int64_t l = -1) { return names.name(t, l); };
    models::LinearFactory f(src, ck.gguf, opts.compute == LMCompute::native, opts.on_progress);
    const int64_t d = c.d_model, qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
    const int64_t q_rope = names.qk_rows_interleaved ? c.heads : 0, k_rope = names.qk_rows_interleaved ? c.kv_heads : 0;
    // The tensor that holds t's rows: its own, or its share of a fused one
    // where the table names that (Phi-3's qkv and gate_up; gate first).
    auto part = [&](T t, int64_t l) -> models::Part {
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
    const bool keep_blocks = f.keep_blocks();

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
        if (rope > 0) v = models::unpermute_rows(v, rope, 1);
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
    w.head = f.product({{name(c.tied ? T::embed : T::head), c.vocab, 0}}, d);
    if (!c.tied) w.embed = f.product({{name(T::embed), c.vocab, 0}}, d);  // tied: the head's rows
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
        L.attn.in = f.product({part(T::q, l), part(T::k, l), part(T::v, l)}, d, in_bias);
        L.attn.out = f.product({{name(T::o, l), d, 0}}, qd, o_bias);
        L.ffn.emplace_back(fc, norm(name(T::ffn_norm, l)), std::vector<float>{}, f.product({part(T::up, l), part(T::gate, l)}, d),
                           f.product({{name(T::down, l), d, 0}}, c.d_ff), post_norm(T::ffn_post_norm, l));
        w.layers.push_back(std::move(L));
        continue;
      }
      std::vector<float> wqkv = f.matrix(part(T::q, l), d);
      for (T t : {T::k, T::v}) {
        const std::vector<float> v = f.matrix(part(t, l), d);
        wqkv.insert(wqkv.end(), v.begin(), v.end());
      }
      L.attn.in = nn::Linear(wqkv.data(), d, qd + 2 * kvd, in_bias.empty() ? nullptr : in_bias.data());
      L.attn.out = nn::Linear(f.matrix({name(T::o, l), d, 0}, qd).data(), qd, d, o_bias.empty() ? nullptr : o_bias.data());
      if (post_norms) {  // the fused FeedForward has no second norm: the sublayer on fp32 products
        std::vector<float> ug = f.matrix(part(T::up, l), d), gate = f.matrix(part(T::gate, l), d);
        ug.insert(ug.end(), gate.begin(), gate.end());
        L.ffn.emplace_back(fc, norm(name(T::ffn_norm, l)), std::vector<float>{}, nn::Linear(ug.data(), d, 2 * c.d_ff),
                           nn::Linear(f.matrix({name(T::down, l), d, 0}, c.d_ff).data(), c.d_ff, d),
                           post_norm(T::ffn_post_norm, l));
        w.layers.push_back(std::move(L));
        continue;
      }
      ffn::Weights fw;
      fw.norm_weight = norm(name(T::ffn_norm, l));
      fw.wg = f.matrix(part(T::gate, l), d);
      fw.w1 = f.matrix(part(T::up, l), d);
      fw.w2 = f.matrix({name(T::down, l), d, 0}, c.d_ff);
      L.ffn.emplace_back(opts.ffn_dtype == WeightDtype::fp32 ? FeedForward(fc, std::move(fw))
                                                             : FeedForward(fc, std::move(fw)).converted(opts.ffn_dtype));
      w.layers.push_back(std::move(L));
    }
  }

  // A GGUF's tokenizer and template; the tokenizer's size against the model's.
  static void finish(CausalLM& lm, const Checkpoint& ck, const std::string& path, const CausalLMLoadOptions& opts) {
    CausalLMConfig& c = lm.cfg_;
    Weights& w = *lm.w_;
    if (const GgufFile* gguf = ck.gguf.get()) {
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
  }
};

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
  const Loader::Checkpoint ck = hf ? Loader::open_directory(lm, path) : Loader::open_gguf(lm, path);
  check_causal_spec(lm.w_->spec, path);
  Loader::read_weights(lm, ck, path, opts);
  Loader::finish(lm, ck, path, opts);
  return lm;
}

}  // namespace ffn
