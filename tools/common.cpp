// Helpers the commands share (declared in tools/commands.hpp): reading
// --input, --check-finite, --threads, and the gradient files of grad,
// encode-grad and decode-grad.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "commands.hpp"
#include "ffn/diagnostics.hpp"
#include "ffn/ffn.hpp"
#include "ffn/random.hpp"

namespace ffn::cli {

namespace fs = std::filesystem;

Input read_input(const std::string& input, const std::string& lengths, Layout layout, int64_t d,
                 const std::string& weights) {
  Input in;
  in.x = read_npy(input);
  const auto& s = in.x.shape;
  const std::string expect = layout == Layout::tokens ? "[T, d_model] or [B, S, d_model]" : "[d_model, S] or [B, d_model, S]";
  if (s.size() != 2 && s.size() != 3)
    throw Error(input + ": input has shape " + shape_str(s) + " (" + std::to_string(s.size()) + "-D), expected " + expect);
  const int64_t width = layout == Layout::tokens ? s.back() : s[s.size() - 2];
  if (width != d)
    throw Error(input + ": input has shape " + shape_str(s) + ", expected " + expect + " with d_model=" +
                std::to_string(d) + " (from " + weights + ")");
  in.shape.layout = layout;
  in.shape.batch = s.size() == 3 ? s[0] : 1;
  in.shape.seq = layout == Layout::tokens ? s[s.size() - 2] : s.back();
  if (!lengths.empty()) {
    std::vector<int64_t> lshape;
    in.shape.lengths = read_npy_int(lengths, &lshape);
    if (lshape.size() != 1 || lshape[0] != in.shape.batch)
      throw Error(lengths + ": lengths have shape " + shape_str(lshape) + ", expected [" +
                  std::to_string(in.shape.batch) + "] (one per sequence of " + input + ")");
    for (size_t b = 0; b < in.shape.lengths.size(); ++b) {
      const int64_t len = in.shape.lengths[b];
      if (len < 0 || len > in.shape.seq)
        throw Error(lengths + ": length " + std::to_string(len) + " of sequence " + std::to_string(b) +
                    " is outside 0.." + std::to_string(in.shape.seq) + " (S of " + input + ")");
    }
  }
  return in;
}

const char* kind_of(float v) { return std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf"; }

// The first NaN or Inf of an array in the input's shape and layout, at a
// position that is not padding, as "<what> is NaN at token t, feature j"
// (or "sequence b, position s, feature j" for [B, S, d] inputs).
void check_finite_tokens(const float* v, const Shape& shape, int64_t d, bool three_d, const std::string& what) {
  const int64_t S = shape.seq;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t len = shape.lengths.empty() ? S : shape.lengths[size_t(b)];
    for (int64_t s = 0; s < len; ++s) {
      for (int64_t j = 0; j < d; ++j) {
        const size_t i = size_t(shape.layout == Layout::tokens ? (b * S + s) * d + j : (b * d + j) * S + s);
        if (std::isfinite(v[i])) continue;
        const std::string where = three_d ? "sequence " + std::to_string(b) + ", position " + std::to_string(s)
                                          : "token " + std::to_string(b * S + s);
        throw Error(what + " is " + kind_of(v[i]) + " at " + where + ", feature " + std::to_string(j) +
                    " (--check-finite)");
      }
    }
  }
}

int threads_or_throw(int t) {
  if (t < 0 || t > kMaxThreads)
    throw Error("--threads: expected 0.." + std::to_string(kMaxThreads) + " (0 = all), got " + std::to_string(t));
  return t;
}

GradTargets grad_target_paths(const std::string& output_dir, bool memory) {
  GradTargets t;
  t.dir = output_dir;
  t.grad_input = (fs::path(output_dir) / "grad_input.npy").string();
  t.grads = (fs::path(output_dir) / "grads.safetensors").string();
  if (memory) t.grad_memory = (fs::path(output_dir) / "grad_memory.npy").string();
  return t;
}

GradTargets grad_targets(const std::string& output_dir, const Flags& inputs, bool memory) {
  try {
    io::check_writable_directory(output_dir);
  } catch (const Error& e) {
    throw Error(std::string("--output-dir ") + e.what());
  }
  const GradTargets t = grad_target_paths(output_dir, memory);
  // Files already there are replaced: they must be regular files.
  std::error_code ec;
  for (const std::string* f : {&t.grad_input, &t.grads, &t.grad_memory}) {
    if (f->empty()) continue;
    check_not_an_input(*f, "--output-dir", inputs);
    const fs::file_status st = fs::status(*f, ec);
    if (fs::exists(st) && !fs::is_regular_file(st)) throw Error(*f + ": cannot write: exists and is not a regular file");
  }
  return t;
}

void write_gradient_pair(const GradTargets& t, const Array& dx, const std::function<void(const std::string&)>& save_grads,
                         const Array* dmemory) {
  if (t.grad_memory.empty() != (dmemory == nullptr)) throw std::logic_error("write_gradient_pair: grad_memory");
  std::error_code ec;
  // Both files are written completely into a staging directory inside D,
  // then renamed into place: a failure leaves neither a new file nor a
  // mismatched pair (nor a directory this run created).
  // SIGINT/SIGTERM/SIGHUP wait until the directories made below are registered
  // for removal, so no signal can leave one behind.
  std::optional<io::SignalBlock> hold(std::in_place);
  const bool created = !fs::exists(t.dir, ec);
  if (created) {
    fs::create_directories(t.dir, ec);
    if (ec) throw Error("--output-dir " + t.dir + ": cannot create: " + ec.message());
  }
  std::string stage_tmpl = (fs::path(t.dir) / ".ffn-grad-XXXXXX").string();
  std::vector<char> buf(stage_tmpl.begin(), stage_tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    const std::string why = io::errno_text();
    if (created) fs::remove(t.dir, ec);
    throw Error("--output-dir " + t.dir + ": cannot write: " + why);
  }
  const fs::path stage(buf.data());
  // A signal from here on removes the staging directory (and D if this run made it).
  io::remove_on_signal({(stage / "grad_input.npy").string(), (stage / "grads.safetensors").string(),
                        (stage / "grad_memory.npy").string(), stage.string(), created ? t.dir : std::string()});
  struct Unregister {
    ~Unregister() { io::remove_on_signal({}); }
  } unregister;
  hold.reset();  // a signal that arrived meanwhile is handled now
  try {
    write_npy((stage / "grad_input.npy").string(), dx);
    save_grads((stage / "grads.safetensors").string());
    if (dmemory) write_npy((stage / "grad_memory.npy").string(), *dmemory);
    fs::rename(stage / "grad_input.npy", t.grad_input);
    if (dmemory) fs::rename(stage / "grad_memory.npy", t.grad_memory);
    fs::rename(stage / "grads.safetensors", t.grads);
  } catch (const std::exception& e) {
    fs::remove_all(stage, ec);
    if (created) fs::remove(t.dir, ec);
    if (dynamic_cast<const Error*>(&e)) throw;
    throw Error("--output-dir " + t.dir + ": cannot write: " + e.what());
  }
  fs::remove_all(stage, ec);
}

// The first NaN or Inf of any parameter (or gradient), with its index.
void check_finite_weights(const Config& cfg, const Weights& w, const TensorNames& names, const std::string& what) {
  for (size_t t = 0; t < 8; ++t) {
    const std::vector<float>* v = w.all()[t];
    const std::string* name = names.all()[t];
    for (size_t i = 0; i < v->size(); ++i) {
      if (std::isfinite((*v)[i])) continue;
      // 2-D tensors are the projections: [d_ff, d_model] or [d_model, d_ff].
      const bool matrix = v == &w.w1 || v == &w.wg || v == &w.w2;
      const int64_t cols = v == &w.w2 ? cfg.d_ff : cfg.d_model;
      const std::string at = matrix ? "[" + std::to_string(int64_t(i) / cols) + ", " + std::to_string(int64_t(i) % cols) + "]"
                                    : "[" + std::to_string(i) + "]";
      throw Error(what + ": tensor '" + *name + "' is " + kind_of((*v)[i]) + " at " + at + " (--check-finite)");
    }
  }
}

}  // namespace ffn::cli
