// The storage policy of a model's products (src/models/linear_factory.hpp).
#include "models/linear_factory.hpp"

#include <algorithm>
#include <cstring>

#include "backends/cpu/qgemm.hpp"
#include "core/quant_types.hpp"
#include "ffn/gguf.hpp"

namespace ffn::models {

std::vector<float> unpermute_rows(const std::vector<float>& w, int64_t heads, int64_t cols) {
  const int64_t rows = int64_t(w.size()) / cols, m = rows / heads / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t i = 0; i < m; ++i)
        std::copy_n(w.begin() + (h * 2 * m + 2 * i + t) * cols, cols, out.begin() + (h * 2 * m + t * m + i) * cols);
  return out;
}

LinearFactory::LinearFactory(const TensorSource& src, std::shared_ptr<const GgufFile> gguf, bool native,
                             std::function<void(double)> on_progress)
    : src_(src), gguf_(std::move(gguf)), native_(native), on_progress_(std::move(on_progress)) {
  // Progress: the share of the file's tensor bytes read so far (GGUF; a
  // Hugging Face directory reports only its end).
  if (gguf_)
    for (const GgufTensor& ti : gguf_->tensors()) total_bytes_ += ti.bytes;
}

bool LinearFactory::keep_blocks() const { return native_ && src_.format() == Format::gguf; }

void LinearFactory::advance(const std::string& n) {
  if (!on_progress_ || !gguf_ || total_bytes_ == 0 || !counted_.insert(n).second) return;
  done_bytes_ += gguf_->tensor(n).bytes;
  on_progress_(std::min(0.999, double(done_bytes_) / double(total_bytes_)));
}

// A part's rows as float32, in transformers' order.
std::vector<float> LinearFactory::part_rows(const Part& p, int64_t k) {
  std::vector<float> v = src_.read(p.name, {p.all(), k});
  if (gguf_) gguf_->release(gguf_->tensor(p.name));
  if (p.all() != p.rows) v = std::vector<float>(v.begin() + p.row0 * k, v.begin() + (p.row0 + p.rows) * k);
  return p.rope_heads > 0 ? unpermute_rows(v, p.rope_heads, k) : v;
}

nn::Linear LinearFactory::product(const std::vector<Part>& parts, int64_t k, const std::vector<float>& bias) {
  const float* b = bias.empty() ? nullptr : bias.data();
  // Progress after the product is made (on each return; an error on the way propagates as it is).
  const auto made = [&](nn::Linear l) {
    for (const Part& p : parts) advance(p.name);
    return l;
  };
  std::vector<const nn::QuantType*> types;
  bool blocks = native_ && src_.format() == Format::gguf;
  for (const Part& p : parts) {
    src_.expect(p.name, {p.all(), k});
    if (!gguf_) continue;
    const nn::QuantType* ti = nn::find_quant_type(uint32_t(gguf_->tensor(p.name).type));
    if (!ti || !ti->native() || k % ti->block != 0) blocks = false;
    types.push_back(ti);
  }
  // F16 or BF16 parts (all of one): 16-bit panels, the fp32 layer's bits in half its bytes.
  const bool f16 = !types.empty() && std::all_of(types.begin(), types.end(), [&](const nn::QuantType* q) {
    return q && q == types[0] && (q->id == GgmlType::f16 || q->id == GgmlType::bf16);
  });
  if (native_ && gguf_ && f16) {
    std::vector<uint16_t> bits;
    for (const Part& p : parts) {
      const uint8_t* base = gguf_->data(gguf_->tensor(p.name));
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
    for (const Part& p : parts) gguf_->release(gguf_->tensor(p.name));
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
      const uint8_t* base = gguf_->data(gguf_->tensor(p.name));
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
    for (const Part& p : parts) gguf_->release(gguf_->tensor(p.name));  // repacked: the file's pages go back
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
}

std::vector<float> LinearFactory::matrix(const Part& p, int64_t cols) {
  std::vector<float> v = part_rows(p, cols);
  advance(p.name);
  return v;
}

}  // namespace ffn::models
