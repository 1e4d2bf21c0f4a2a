// Phi-3 as data (Phi3ForCausalLM; GGUF general.architecture "phi3"): LLaMA's
// stack with W_Q|W_K|W_V in one tensor (self_attn.qkv_proj; GGUF attn_qkv)
// and W_gate|W_up in one (mlp.gate_up_proj, gate first; GGUF ffn_up), rows
// in transformers' order in both formats, and every layer's self-attention
// over config.json's sliding_window keys (Phi-3-mini-4k: 2047; null: none),
// as Mistral's; GGUF phi3.attention.sliding_window. An untied head.
// longrope scaling (the 128k and Phi-3.5 models): config.json's rope_scaling,
// or the GGUF's rope_factors_long/short tensors and keys.
#include <algorithm>
#include <cmath>

#include "core/json_file.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/gguf.hpp"
#include "models/arch.hpp"

namespace ffn::models {

namespace {
const NameTable& phi3_names(Format format) {
  static const NameTable hf = [] {
    NameTable n = llama_names(Format::safetensors);
    n.names[size_t(LMTensor::q)] = n.names[size_t(LMTensor::k)] = n.names[size_t(LMTensor::v)] = nullptr;
    n.names[size_t(LMTensor::gate)] = n.names[size_t(LMTensor::up)] = nullptr;
    n.names[size_t(LMTensor::qkv)] = "model.layers.{L}.self_attn.qkv_proj.weight";
    n.names[size_t(LMTensor::gate_up)] = "model.layers.{L}.mlp.gate_up_proj.weight";
    return n;
  }();
  static const NameTable gguf = [] {
    NameTable n = llama_names(Format::gguf);
    n.qk_rows_interleaved = false;
    n.names[size_t(LMTensor::q)] = n.names[size_t(LMTensor::k)] = n.names[size_t(LMTensor::v)] = nullptr;
    n.names[size_t(LMTensor::gate)] = n.names[size_t(LMTensor::up)] = nullptr;
    n.names[size_t(LMTensor::qkv)] = "blk.{L}.attn_qkv.weight";
    n.names[size_t(LMTensor::gate_up)] = "blk.{L}.ffn_up.weight";
    return n;
  }();
  return format == Format::gguf ? gguf : hf;
}
}  // namespace

Architecture phi3_architecture() {
  Architecture a;
  a.name = "phi3";
  a.from_hf = [](const nlohmann::json& j, const std::filesystem::path& p) {
    ArchConfig a = llama_arch_config(j, p);
    a.spec.attention.rope.fraction = json_opt<double>(j, "partial_rotary_factor", 1.0, p);  // Phi-4-mini: refused
    if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
      const int64_t w = json_get<int64_t>(j, "sliding_window", p);
      if (w < 1) throw Error(p.string() + ": sliding_window must be at least 1, got " + std::to_string(w));
      a.spec.attention.window.assign(size_t(a.config.layers), w);
    }
    return a;
  };
  a.hf_names = &phi3_names(Format::safetensors);
  a.from_gguf = [](const GgufFile& f) {
    // A head is d_model / heads wide (the converter writes no key_length);
    // a rope.dimension_count below it is partial rotation (Phi-4-mini),
    // which read_gguf_rope records and the spec refuses.
    const CausalLMConfig c = llama_config(f, "phi3");
    nn::StackSpec s = llama_spec(c);
    read_gguf_rope(f, "phi3", s);
    // The converter writes longrope's factors as tensors (128k, Phi-3.5), the
    // original context and the attention factor as keys.
    if (f.has("rope_factors_long.weight")) {
      nn::RopeSpec& r = s.attention.rope;
      r.scaling = nn::RopeScaling::longrope;
      r.long_factors = f.read_f32("rope_factors_long.weight");
      r.short_factors = f.read_f32("rope_factors_short.weight");
      const char* orig = "phi3.rope.scaling.original_context_length";
      if (!f.find(orig)) throw Error(f.path() + ": rope_factors_long.weight without " + orig);
      r.original_context = int64_t(f.get_uint(orig));
      const double scale = double(c.context) / double(std::max<int64_t>(r.original_context, 1));
      r.attention_factor = f.find("phi3.rope.scaling.attn_factor") ? f.get_float("phi3.rope.scaling.attn_factor")
                           : scale <= 1.0 ? 1.0
                                          : std::sqrt(1.0 + std::log(scale) / std::log(double(r.original_context)));
    }
    if (f.find("phi3.attention.sliding_window")) {
      const int64_t w = int64_t(f.get_uint("phi3.attention.sliding_window"));
      if (w > 0) s.attention.window.assign(size_t(c.layers), w);
    }
    return ArchConfig{c, s};
  };
  a.gguf_names = &phi3_names(Format::gguf);
  return a;
}

}  // namespace ffn::models
