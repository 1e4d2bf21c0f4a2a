// Reading and writing the layer's safetensors files, with the three naming
// schemes (this project's, PyTorch TransformerEncoderLayer's, Hugging Face
// LLaMA's) and the settings in __metadata__.
#include <cmath>
#include <cstring>
#include <set>

#include "models/metadata.hpp"
#include "ffn/ffn.hpp"
#include "ffn/diagnostics.hpp"
#include "io/safetensors.hpp"
#include "backends/cpu/quantize.hpp"
#include "models/checkpoint.hpp"

namespace ffn {

using namespace models;  // the __metadata__ keys (models/metadata.hpp)

namespace {

// Tensor-name suffixes of quantized files.
constexpr const char* kScaleSuffix = "_scale";  // int8: "<matrix name>_scale", F32 [rows] or [groups, rows]
// int8 with fp32 input channels (Int8Options): W1's and Wg's columns for them
// ("<matrix name>_fp32_columns", F32 [d_ff, k]) and the channels
// ("<matrix name>_fp32_index", I64 [k], ascending).
constexpr const char* kFp32ColumnsSuffix = "_fp32_columns";
constexpr const char* kFp32IndexSuffix = "_fp32_index";

// What ffn.quantization says for each dtype (see src/backends/cpu/quantize.hpp).
const char* method_of(WeightDtype t) {
  switch (t) {
    case WeightDtype::bf16: return "bf16 weight matrices (round to nearest even from float32); float32 arithmetic";
    case WeightDtype::fp16: return "fp16 weight matrices (IEEE binary16, round to nearest even from float32); float32 arithmetic";
    case WeightDtype::int8:
      return "int8 weight matrices, symmetric per output channel (W2: per output channel and 256-column group): "
             "scale = max|w|/127 (F32 tensor <name>_scale, [rows] or [groups, rows]), "
             "q = round_half_even(w/scale) in [-127, 127]; activations quantized at run time per token "
             "(asymmetric 8-bit; the hidden activation per 256 units), int32 accumulation; input channels listed "
             "in <name>_fp32_index (if any) kept in float32 (W1's columns in <name>_fp32_columns, F32 [d_ff, k])";
    case WeightDtype::fp32: break;
  }
  return "";
}

// The FFN's tensors in a file: W1 (up), its bias, W_gate (gated), its bias,
// W2 (down), its bias, the norm's γ and β.
enum class FfnTensor { up, up_bias, gate, gate_bias, down, down_bias, norm, norm_bias, count };
using F = FfnTensor;

// One naming scheme: a name table of the unprefixed names, the family it
// comes from (for messages) and the norm placement its files imply.
struct Scheme {
  const char* family;
  models::NameTableOf<FfnTensor> names;
  NormPlacement default_norm;
  const char* operator[](FfnTensor t) const { return names.names[size_t(t)]; }
};

const Scheme kNative{"ffn",
                     {{"linear1.weight", "linear1.bias", "gate.weight", "gate.bias", "linear2.weight", "linear2.bias",
                       "norm.weight", "norm.bias"}},
                     NormPlacement::post};
const Scheme kTorch{"PyTorch TransformerEncoderLayer",
                    {{"linear1.weight", "linear1.bias", "gate.weight", "gate.bias", "linear2.weight", "linear2.bias",
                      "norm2.weight", "norm2.bias"}},
                    NormPlacement::post};
const Scheme kLlama{"LLaMA",
                    {{"mlp.up_proj.weight", "mlp.up_proj.bias", "mlp.gate_proj.weight", "mlp.gate_proj.bias",
                      "mlp.down_proj.weight", "mlp.down_proj.bias", "post_attention_layernorm.weight",
                      "post_attention_layernorm.bias"}},
                    NormPlacement::pre};

std::string normalize_prefix(std::string p) {
  if (!p.empty() && p.back() != '.') p += '.';
  return p;
}

// Prefixes under which the file has an FFN, for the "not found" hint.
std::string prefix_hint(const io::SafetensorsReader& r) {
  std::set<std::string> found;
  for (const auto& [name, info] : r.tensors()) {
    for (const char* tail : {kNative[F::up], kLlama[F::up]}) {
      const std::string t(tail);
      if (name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0)
        found.insert(name.substr(0, name.size() - t.size()));
    }
  }
  if (found.empty()) return "";
  std::string s = " (the file has them under --prefix ";
  int k = 0;
  for (const auto& f : found) {
    if (k == 3) { s += ", ..."; break; }
    s += (k++ ? ", '" : "'") + f + "'";
  }
  return s + ")";
}

}  // namespace

namespace {

// Shards [first, last) of the file's d_ff (tensor parallelism): only their
// rows of W1, Wg, b1 and columns of W2 are read (one contiguous segment per
// row), b2 and the norm whole; fp32, bf16 and fp16 files.
struct ShardRead {
  Config cfg;  // d_ff: the shards' hidden units
  Weights w;
  TensorNames names;
  DffShards shards;
};
ShardRead read_shards(const io::SafetensorsReader& r, const Config& cfg, DffShards sh, WeightDtype stored,
                      const std::string& prefix, const Scheme& s, bool gated, const std::string& w1,
                      const std::string& w2) {
  const std::string& path = r.path();
  if (stored == WeightDtype::int8)
    throw Error(path + ": an int8 file is not read by shards yet; give the fp32 file (and --dtype int8 to quantize "
                "each shard on load)");
  sh.validate(path + ": shards: ");
  sh.d_ff = cfg.d_ff;
  const auto [b, e] = DffShards::units(cfg.d_ff, sh.count, sh.first, sh.last);
  if (b == e)
    throw Error(path + ": d_ff = " + std::to_string(cfg.d_ff) + " is too small for " +
                std::to_string(sh.count / (sh.last - sh.first)) + " ranks: tensor parallelism needs at least " +
                std::to_string(sh.count * 256) + " hidden units (" + std::to_string(sh.count) +
                " shards of 256; shards " + std::to_string(sh.first) + ".." + std::to_string(sh.last - 1) +
                " would hold none)");
  const int64_t d = cfg.d_model;
  Config local = cfg;
  local.d_ff = e - b;
  TensorNames names;
  Weights w;
  names.w1 = w1, w.w1 = r.read_f32_block(w1, b, e, 0, d);
  names.w2 = w2, w.w2 = r.read_f32_block(w2, 0, d, b, e);
  if (gated) names.wg = prefix + s[F::gate], w.wg = r.read_f32_block(names.wg, b, e, 0, d);
  if (cfg.bias) {
    names.b1 = prefix + s[F::up_bias], w.b1 = r.read_f32_block(names.b1, b, e, 0, 1);
    names.b2 = prefix + s[F::down_bias], w.b2 = r.read_f32(names.b2);
    if (gated) names.bg = prefix + s[F::gate_bias], w.bg = r.read_f32_block(names.bg, b, e, 0, 1);
  }
  if (cfg.norm != NormPlacement::none) {
    names.norm_weight = prefix + s[F::norm], w.norm_weight = r.read_f32(names.norm_weight);
    if (cfg.norm_type == NormType::layernorm) names.norm_bias = prefix + s[F::norm_bias], w.norm_bias = r.read_f32(names.norm_bias);
  }
  return {local, std::move(w), names, sh};
}

}  // namespace

FeedForward FeedForward::load(const std::string& path, const LoadOptions& opts) {
  io::SafetensorsReader r(path);
  const std::string prefix = normalize_prefix(opts.prefix);
  auto has = [&](const char* n) {
    if (!r.has(prefix + n)) return false;
    if (r.info(prefix + n).dtype != "I8") r.require_float(prefix + n);  // an unusable dtype is reported before any shape
    return true;
  };

  // 1. Which naming scheme.
  const Scheme* scheme = nullptr;
  if (has(kLlama[F::up])) scheme = &kLlama;
  else if (has(kNative[F::up])) scheme = (has(kNative[F::norm]) || !has(kTorch[F::norm])) ? &kNative : &kTorch;
  else {
    throw Error(path + ": tensor '" + prefix + kNative[F::up] + "' (or '" + prefix + kLlama[F::up] + "') not found" +
                prefix_hint(r));
  }
  const Scheme& s = *scheme;
  auto need = [&](const char* n) {
    if (!has(n)) throw Error(path + ": tensor '" + prefix + n + "' not found (needed with '" + prefix + s[F::up] + "')");
    return prefix + n;
  };

  // 2. Shapes give d_model, d_ff, gated and bias.
  const std::string w1 = prefix + s[F::up], w2 = need(s[F::down]);
  const auto& i1 = r.info(w1);
  if (i1.shape.size() != 2 || i1.shape[0] < 1 || i1.shape[1] < 1)
    models::throw_shape_error(path, w1, i1.shape, "[d_ff, d_model] with both >= 1");
  Config cfg;
  cfg.d_ff = i1.shape[0];
  cfg.d_model = i1.shape[1];
  const std::string dims = "d_ff=" + std::to_string(cfg.d_ff) + ", d_model=" + std::to_string(cfg.d_model) +
                           " from " + w1 + " " + shape_str(i1.shape);
  auto expect_shape = [&](const std::string& name, std::vector<int64_t> want) {
    const auto& info = r.info(name);
    if (info.shape != want)
      models::throw_shape_error(path, name, info.shape, shape_str(want), dims);
  };
  expect_shape(w2, {cfg.d_model, cfg.d_ff});
  const bool gated = has(s[F::gate]);
  if (gated) expect_shape(prefix + s[F::gate], {cfg.d_ff, cfg.d_model});
  const bool b1 = has(s[F::up_bias]), b2 = has(s[F::down_bias]);
  if (b1 != b2)
    throw Error(path + ": " + prefix + (b1 ? s[F::up_bias] : s[F::down_bias]) + " is present but " + prefix + (b1 ? s[F::down_bias] : s[F::up_bias]) +
                " is not (biases must be all present or all absent)");
  cfg.bias = b1;
  if (gated && has(s[F::gate_bias]) != cfg.bias)
    throw Error(path + ": " + prefix + s[F::gate_bias] + (cfg.bias ? " is missing" : " is present") + " but " + prefix + s[F::up_bias] +
                (cfg.bias ? " is present" : " is not") + " (biases must be all present or all absent)");
  if (cfg.bias) {
    expect_shape(prefix + s[F::up_bias], {cfg.d_ff});
    expect_shape(prefix + s[F::down_bias], {cfg.d_model});
    if (gated) expect_shape(prefix + s[F::gate_bias], {cfg.d_ff});
  }

  // 3. Settings: options, else __metadata__, else what the tensors imply.
  const auto& meta = r.metadata();
  auto meta_get = [&](const char* key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  const std::string meta_where = path + ": __metadata__ ";
  if (opts.activation) cfg.activation = *opts.activation;
  else if (auto v = meta_get(kMetaActivation)) cfg.activation = parse_activation(*v, meta_where + kMetaActivation);
  else cfg.activation = gated ? Activation::swiglu : Activation::relu;
  const std::string act_src = opts.activation ? "--activation " : (meta_get(kMetaActivation) ? "activation " : "");
  if (is_gated(cfg.activation) && !gated)
    throw Error(path + ": " + act_src + std::string(to_string(cfg.activation)) + " is gated but tensor '" + prefix +
                s[F::gate] + "' was not found");
  if (!is_gated(cfg.activation) && gated)
    throw Error(path + ": " + act_src + std::string(to_string(cfg.activation)) + " is not gated but the file has '" +
                prefix + s[F::gate] + "' (use swiglu, geglu or reglu)");

  const bool has_gamma = has(s[F::norm]), has_beta = has(s[F::norm_bias]);
  if (opts.norm) cfg.norm = *opts.norm;
  else if (auto v = meta_get(kMetaNorm)) cfg.norm = parse_norm_placement(*v, meta_where + kMetaNorm);
  else cfg.norm = has_gamma ? s.default_norm : NormPlacement::none;
  if (opts.norm_type) cfg.norm_type = *opts.norm_type;
  else if (auto v = meta_get(kMetaNormType)) cfg.norm_type = parse_norm_type(*v, meta_where + kMetaNormType);
  else cfg.norm_type = has_beta ? NormType::layernorm : NormType::rmsnorm;
  if (opts.eps) cfg.eps = *opts.eps;
  else if (auto v = meta_get(kMetaEps)) {
    try {
      size_t used = 0;
      cfg.eps = std::stof(*v, &used);
      if (used != v->size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw Error(meta_where + kMetaEps + ": '" + *v + "' is not a number");
    }
  }
  if (cfg.norm != NormPlacement::none) {
    const std::string why = " (needed by norm " + std::string(to_string(cfg.norm)) + " " +
                            std::string(to_string(cfg.norm_type)) + ")";
    if (!has_gamma) throw Error(path + ": tensor '" + prefix + s[F::norm] + "' not found" + why);
    expect_shape(prefix + s[F::norm], {cfg.d_model});
    if (cfg.norm_type == NormType::layernorm) {
      if (!has_beta) throw Error(path + ": tensor '" + prefix + s[F::norm_bias] + "' not found" + why);
      expect_shape(prefix + s[F::norm_bias], {cfg.d_model});
    }
  }
  std::vector<AssumedSetting> assumed;
  {
    auto& a = assumed;
    if (!opts.activation && !meta_get(kMetaActivation))
      a.push_back({"activation " + std::string(to_string(cfg.activation)), "--activation"});
    if (has_gamma && !opts.norm && !meta_get(kMetaNorm))
      a.push_back({"norm " + std::string(to_string(cfg.norm)), "--norm"});
    if (cfg.norm != NormPlacement::none) {
      if (!opts.norm_type && !meta_get(kMetaNormType))
        a.push_back({"norm type " + std::string(to_string(cfg.norm_type)), "--norm-type"});
      if (!opts.eps && !meta_get(kMetaEps)) a.push_back({"eps " + num(cfg.eps), "--eps"});
    }
  }
  cfg.dropout_hidden = opts.dropout_hidden;
  cfg.dropout_output = opts.dropout_output;
  try {
    cfg.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }

  // 4. The weight matrices' storage: the option, else the file's own.
  WeightDtype stored = WeightDtype::fp32;
  if (auto v = meta_get(kMetaDtype)) stored = parse_weight_dtype(*v, meta_where + kMetaDtype);
  else if (r.info(w1).dtype == "I8") stored = WeightDtype::int8;
  const WeightDtype dtype = opts.weight_dtype.value_or(stored);
  const char* want = stored == WeightDtype::int8 ? "I8" : stored == WeightDtype::bf16 ? "BF16"
                     : stored == WeightDtype::fp16 ? "F16" : nullptr;
  std::vector<std::string> matrices = {w1, w2};
  if (gated) matrices.push_back(prefix + s[F::gate]);
  for (const std::string& m : matrices) {
    const std::string& dt = r.info(m).dtype;
    if (want && dt != want)
      throw Error(path + ": " + m + " has dtype " + dt + " but __metadata__ " + kMetaDtype + " is " +
                  std::string(to_string(stored)) + " (expected " + want + ")");
    if (!want && dt == "I8")
      throw Error(path + ": " + m + " has dtype I8 but __metadata__ " + kMetaDtype + " is fp32");
  }

  // 5. Read the tensors under the names found: float32 (converted), and for
  // an int8 file the I8 matrices with their scales.
  TensorNames names;
  Weights w;
  if (opts.shards) {
    ShardRead sr = read_shards(r, cfg, *opts.shards, stored, prefix, s, gated, w1, w2);
    try {
      FeedForward layer(sr.cfg, std::move(sr.w), dtype);
      layer.names_ = sr.names;
      layer.set_shards(sr.shards);
      layer.assumed_ = std::move(assumed);
      return layer;
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
  }
  auto q = std::make_shared<nn::QuantizedWeights>();
  q->dtype = stored;
  auto take = [&](std::string& name_out, std::vector<float>& dst, const std::string& name) {
    name_out = name;
    dst = r.read_f32(name);
  };
  auto take_matrix = [&](std::string& name_out, std::vector<float>& dst, nn::QMatrix& qm, const std::string& name) {
    name_out = name;
    const auto& info = r.info(name);
    qm.rows = info.shape[0];
    qm.cols = info.shape[1];
    if (stored == WeightDtype::int8) {
      const std::string sname = name + kScaleSuffix;
      if (!r.has(sname)) throw Error(path + ": tensor '" + sname + "' not found (the scales of the I8 tensor " + name + ")");
      // W2 (cols = d_ff) may have a scale per 256-column group: [groups, rows]
      const bool w2_matrix = qm.rows == cfg.d_model && qm.cols == cfg.d_ff && name == w2;
      const int64_t groups = (qm.cols + nn::kQuantChunk - 1) / nn::kQuantChunk;
      if (w2_matrix && r.info(sname).shape.size() == 2) expect_shape(sname, {groups, qm.rows}), qm.group = nn::kQuantChunk;
      else expect_shape(sname, {qm.rows});
      const std::vector<uint8_t> raw = r.read_raw(name);
      qm.q.resize(raw.size());
      std::memcpy(qm.q.data(), raw.data(), raw.size());
      qm.scale = r.read_f32(sname);
      for (size_t i = 0; i < qm.scale.size(); ++i)
        if (!(qm.scale[i] >= 0.0f) || !std::isfinite(qm.scale[i]))
          throw Error(path + ": " + sname + "[" + std::to_string(i) + "] = " + num(qm.scale[i]) +
                      ", expected a finite scale >= 0");
      if (w2_matrix) nn::regroup_scales(qm, nn::kQuantChunk);  // a file with one scale per row: the same values
      dst = nn::dequantize(qm, stored);
    } else if (want) {
      const std::vector<uint8_t> raw = r.read_raw(name);
      qm.h.resize(raw.size() / 2);
      std::memcpy(qm.h.data(), raw.data(), raw.size());
      dst = nn::dequantize(qm, stored);
    } else {
      dst = r.read_f32(name);
    }
  };
  take_matrix(names.w1, w.w1, q->w1, w1);
  take_matrix(names.w2, w.w2, q->w2, w2);
  if (gated) take_matrix(names.wg, w.wg, q->wg, prefix + s[F::gate]);
  // int8: fp32 input channels, W1's (and Wg's) columns for them
  auto take_fp32_columns = [&](const std::string& name, std::vector<float>& cols) {
    const std::string iname = name + kFp32IndexSuffix, cname = name + kFp32ColumnsSuffix;
    if (!r.has(iname) && !r.has(cname)) return std::vector<int64_t>{};
    if (stored != WeightDtype::int8)
      throw Error(path + ": " + (r.has(iname) ? iname : cname) + " belongs to an int8 file, but " + name + " is " +
                  r.info(name).dtype);
    if (!r.has(iname) || !r.has(cname))
      throw Error(path + ": " + (r.has(iname) ? cname : iname) + " not found (it goes with " +
                  (r.has(iname) ? iname : cname) + ")");
    const auto& ii = r.info(iname);
    if (ii.dtype != "I64" || ii.shape.size() != 1)
      throw Error(path + ": " + iname + " has dtype " + ii.dtype + " and shape " + shape_str(ii.shape) +
                  ", expected I64 [k]");
    const int64_t k = ii.shape[0];
    expect_shape(cname, {cfg.d_ff, k});
    const std::vector<uint8_t> raw = r.read_raw(iname);
    std::vector<int64_t> index(static_cast<size_t>(k));
    std::memcpy(index.data(), raw.data(), raw.size());
    const std::vector<float> c = r.read_f32(cname);  // [d_ff, k] → [k, d_ff]
    cols.resize(c.size());
    for (int64_t f = 0; f < cfg.d_ff; ++f)
      for (int64_t j = 0; j < k; ++j) cols[size_t(j * cfg.d_ff + f)] = c[size_t(f * k + j)];
    return index;
  };
  {
    std::vector<int64_t> index = take_fp32_columns(w1, q->w1_fp32);
    if (gated && take_fp32_columns(prefix + s[F::gate], q->wg_fp32) != index)
      throw Error(path + ": " + prefix + s[F::gate] + kFp32IndexSuffix + " differs from " + w1 + kFp32IndexSuffix +
                  " (W1 and Wg keep the same input channels in float32)");
    nn::check_fp32_inputs(index, cfg.d_model, path + ": " + w1 + kFp32IndexSuffix);
    q->fp32_inputs = std::move(index);
    nn::merge_fp32_inputs(*q, w.w1, gated ? &w.wg : nullptr, cfg.d_model, cfg.d_ff);
  }
  if (cfg.bias) {
    take(names.b1, w.b1, prefix + s[F::up_bias]);
    take(names.b2, w.b2, prefix + s[F::down_bias]);
    if (gated) take(names.bg, w.bg, prefix + s[F::gate_bias]);
  }
  if (cfg.norm != NormPlacement::none) {
    take(names.norm_weight, w.norm_weight, prefix + s[F::norm]);
    if (cfg.norm_type == NormType::layernorm) take(names.norm_bias, w.norm_bias, prefix + s[F::norm_bias]);
  }
  try {
    FeedForward layer = stored != WeightDtype::fp32 && dtype == stored ? FeedForward(cfg, std::move(w), dtype, std::move(q))
                                                                 : FeedForward(cfg, std::move(w), dtype);
    layer.names_ = names;
    layer.assumed_ = std::move(assumed);
    return layer;
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

namespace {

// The layer's tensors; q (non-null for a low-precision layer) supplies the matrices.
SafetensorsFile to_file(const Config& cfg, const TensorNames& names, const Weights& w,
                        const nn::QuantizedWeights* q = nullptr) {
  SafetensorsFile f;
  const int64_t d = cfg.d_model, F = cfg.d_ff;
  auto put = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
    if (!name.empty() && !v.empty()) f.tensors[name] = NamedTensor{std::move(shape), v};
  };
  auto put_matrix = [&](const std::string& name, const std::vector<float>& v, const nn::QMatrix* m,
                        std::vector<int64_t> shape) {
    if (name.empty() || v.empty()) return;
    if (!q) return put(name, v, std::move(shape));
    NamedTensor t;
    t.shape = shape;
    if (q->dtype == WeightDtype::int8) {
      t.dtype = "I8";
      t.raw.resize(m->q.size());
      std::memcpy(t.raw.data(), m->q.data(), m->q.size());
      std::vector<int64_t> sshape = {shape[0]};
      if (m->groups() > 1) sshape = {m->groups(), shape[0]};
      f.tensors[name + kScaleSuffix] = NamedTensor{sshape, m->scale};
      const std::vector<float>* cols = m == &q->w1 ? &q->w1_fp32 : m == &q->wg ? &q->wg_fp32 : nullptr;
      if (cols && !q->fp32_inputs.empty()) {  // [k, d_ff] → [d_ff, k]
        const int64_t k = int64_t(q->fp32_inputs.size()), F = shape[0];
        NamedTensor c{{F, k}, std::vector<float>(cols->size())};
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = 0; i < F; ++i) c.data[size_t(i * k + j)] = (*cols)[size_t(j * F + i)];
        f.tensors[name + kFp32ColumnsSuffix] = std::move(c);
        NamedTensor index;
        index.shape = {k};
        index.dtype = "I64";
        index.raw.resize(size_t(k) * 8);
        std::memcpy(index.raw.data(), q->fp32_inputs.data(), index.raw.size());
        f.tensors[name + kFp32IndexSuffix] = std::move(index);
      }
    } else {
      t.dtype = q->dtype == WeightDtype::bf16 ? "BF16" : "F16";
      t.raw.resize(m->h.size() * 2);
      std::memcpy(t.raw.data(), m->h.data(), t.raw.size());
    }
    f.tensors[name] = std::move(t);
  };
  put_matrix(names.w1, w.w1, q ? &q->w1 : nullptr, {F, d});
  put(names.b1, w.b1, {F});
  put_matrix(names.wg, w.wg, q ? &q->wg : nullptr, {F, d});
  put(names.bg, w.bg, {F});
  put_matrix(names.w2, w.w2, q ? &q->w2 : nullptr, {d, F});
  put(names.b2, w.b2, {d});
  put(names.norm_weight, w.norm_weight, {d});
  put(names.norm_bias, w.norm_bias, {d});
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9g", double(cfg.eps));
  f.metadata = {{"format", "pt"},
                {kMetaActivation, std::string(to_string(cfg.activation))},
                {kMetaNorm, std::string(to_string(cfg.norm))},
                {kMetaNormType, std::string(to_string(cfg.norm_type))},
                {kMetaEps, eps}};
  if (q) {
    f.metadata[kMetaDtype] = std::string(to_string(q->dtype));
    f.metadata[kMetaQuantization] = method_of(q->dtype);
  }
  return f;
}

}  // namespace

SafetensorsFile FeedForward::to_safetensors() const { return to_safetensors(SafetensorsFile{}); }

SafetensorsFile FeedForward::to_safetensors(const SafetensorsFile& extra) const {
  SafetensorsFile f = to_file(cfg_, names_, w_, static_cast<const nn::QuantizedWeights*>(quant_.get()));
  for (const auto& [name, t] : extra.tensors) f.tensors.emplace(name, t);  // the layer's own win
  for (const auto& [key, value] : extra.metadata) f.metadata.emplace(key, value);
  return f;
}

SafetensorsFile FeedForward::unowned(const std::string& source) const {
  io::SafetensorsReader r(source);
  std::set<std::string> owned;
  for (const std::string* n : names_.all())
    if (!n->empty()) owned.insert(*n);
  for (const std::string* n : {&names_.w1, &names_.wg, &names_.w2})
    if (!n->empty())  // an int8 source's scales and fp32 columns
      for (const char* suffix : {kScaleSuffix, kFp32ColumnsSuffix, kFp32IndexSuffix}) owned.insert(*n + suffix);
  SafetensorsFile f;
  for (const auto& [name, info] : r.tensors()) {
    if (owned.count(name)) continue;
    NamedTensor t;
    t.shape = info.shape;
    t.dtype = info.dtype;
    std::vector<uint8_t> raw = r.read_raw(name);
    if (info.dtype == "F32") {
      t.data.resize(raw.size() / 4);
      std::memcpy(t.data.data(), raw.data(), t.data.size() * 4);
    } else {
      t.raw = std::move(raw);
    }
    f.tensors[name] = std::move(t);
  }
  for (const auto& [key, value] : r.metadata())
    if (key.rfind("ffn.", 0) != 0) f.metadata[key] = value;
  return f;
}

void FeedForward::save(const std::string& path) const { write_safetensors(path, to_safetensors()); }

void FeedForward::save_gradients(const std::string& path, const Weights& grads) const {
  write_safetensors(path, to_file(cfg_, names_, grads));
}

std::map<std::string, FeedForward::ShardedGradient> FeedForward::gradient_shards(const Weights& grads, bool replicated,
                                                                     std::map<std::string, std::string>& metadata) const {
  metadata = to_file(cfg_, names_, Weights{}).metadata;  // the settings, as save_gradients writes them
  const int64_t d = cfg_.d_model, n = cfg_.d_ff, F = shards_.d_ff > 0 ? shards_.d_ff : n;
  const int64_t b = DffShards::units(F, shards_.count, shards_.first, shards_.last).first;
  std::map<std::string, ShardedGradient> out;
  auto put = [&](const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape,
                 std::vector<GradientPiece> pieces) {
    if (name.empty() || v.empty()) return;
    out[name] = ShardedGradient{std::move(shape), std::move(pieces)};
  };
  auto rows = [&](const std::vector<float>& v, int64_t width) {
    return std::vector<GradientPiece>{{b * width, v.data(), n * width}};
  };
  put(names_.w1, grads.w1, {F, d}, rows(grads.w1, d));
  put(names_.b1, grads.b1, {F}, rows(grads.b1, 1));
  put(names_.wg, grads.wg, {F, d}, rows(grads.wg, d));
  put(names_.bg, grads.bg, {F}, rows(grads.bg, 1));
  std::vector<GradientPiece> w2;
  for (int64_t o = 0; o < d && !grads.w2.empty(); ++o) w2.push_back({o * F + b, grads.w2.data() + o * n, n});
  put(names_.w2, grads.w2, {d, F}, w2);
  auto whole = [&](const std::vector<float>& v) {
    return replicated ? std::vector<GradientPiece>{{0, v.data(), int64_t(v.size())}} : std::vector<GradientPiece>{};
  };
  put(names_.b2, grads.b2, {d}, whole(grads.b2));
  put(names_.norm_weight, grads.norm_weight, {d}, whole(grads.norm_weight));
  put(names_.norm_bias, grads.norm_bias, {d}, whole(grads.norm_bias));
  return out;
}

}  // namespace ffn
