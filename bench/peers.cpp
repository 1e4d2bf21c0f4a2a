// Peer comparison for issue 3: the same FFN (Linear → ReLU → Linear, biases,
// no norm) through oneDNN and OpenBLAS, and a driver that runs every
// implementation — ours (`ffn bench --norm none`), oneDNN, OpenBLAS, PyTorch
// (bench/torch_ffn.py) — each case in its own process, alternating, and prints
// one table. Benchmark-only: the library never links oneDNN or OpenBLAS.
//
//   ffn_peers run --impl onednn|openblas|onednn_s8|onednn_bf16 --tokens T --threads N [--backward] --json
//   ffn_peers read [--mib 8] [--threads 2]   (the weight-streaming floor at small T)
//   ffn_peers compare [--rounds 3] [--tokens 1,8,64,512,4096] [--threads 1,2] [--impls ffn,ffn_int8,ffn_bf16c,onednn_s8,onednn_bf16,torch_bf16,...]
//
// FLOPs: 4·T·d·F forward, 12·T·d·F forward + backward (every implementation
// does the same products). Time per call: median over the calls of one
// process; the table shows the median over rounds of those medians.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ffn/diagnostics.hpp"

#ifdef FFN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef FFN_HAVE_OPENBLAS
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
#endif

namespace {

struct Case {
  int64_t T = 4096, d = 512, F = 2048;
  int threads = 2;
  bool backward = false;
  int repeats = 10, warmup = 2;
};

struct Tensors {
  std::vector<float> x, w1, b1, w2, b2, dy;
  explicit Tensors(const Case& c) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, size_t n, float s) {
      v.resize(n);
      for (float& e : v) e = u(rng) * s;
    };
    fill(x, size_t(c.T * c.d), 1.0f);
    fill(w1, size_t(c.F * c.d), 1.0f / std::sqrt(float(c.d)));
    fill(b1, size_t(c.F), 0.1f);
    fill(w2, size_t(c.d * c.F), 1.0f / std::sqrt(float(c.F)));
    fill(b2, size_t(c.d), 0.1f);
    fill(dy, size_t(c.T * c.d), 0.01f);
  }
};

// Times `call` (after warm-up calls) and returns the per-call seconds.
std::vector<double> time_calls(const Case& c, const std::function<void()>& call) {
  std::vector<double> t;
  for (int i = 0; i < c.warmup + c.repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= c.warmup) t.push_back(s);
  }
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// y[t, :] += b; with relu: y = max(y + b, 0). Rows split over threads.
void bias_act(float* y, const float* b, int64_t rows, int64_t cols, bool relu, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    float* r = y + t * cols;
    if (relu)
      for (int64_t j = 0; j < cols; ++j) r[j] = std::max(r[j] + b[j], 0.0f);
    else
      for (int64_t j = 0; j < cols; ++j) r[j] += b[j];
  }
}

// out[j] = Σ_t a[t, j]
void column_sum(const float* a, int64_t rows, int64_t cols, float* out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t j0 = 0; j0 < cols; j0 += 64) {
    const int64_t j1 = std::min(cols, j0 + 64);
    std::fill(out + j0, out + j1, 0.0f);
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = j0; j < j1; ++j) out[j] += a[t * cols + j];
  }
}

#ifdef FFN_HAVE_OPENBLAS
std::vector<double> run_openblas(const Case& c) {
  openblas_set_num_threads(c.threads);
  // The bias/activation loops run on one thread: OpenBLAS's own threads keep
  // spinning after a call, and OpenMP threads next to them oversubscribe the
  // two cores (measured at T=8, 2 threads: ~10 ms per call instead of ~1 ms).
  const int loop_threads = 1;
  Tensors w(c);
  const int64_t T = c.T, d = c.d, F = c.F;
  std::vector<float> h(size_t(T * F)), y(size_t(T * d)), dz(size_t(T * F)), dx(size_t(T * d));
  std::vector<float> dw1(size_t(F * d)), db1(static_cast<size_t>(F)), dw2(size_t(d * F)), db2(static_cast<size_t>(d));
  auto forward = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, F, d, 1.0f, w.x.data(), d, w.w1.data(), d, 0.0f,
                h.data(), F);
    bias_act(h.data(), w.b1.data(), T, F, true, loop_threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, d, F, 1.0f, h.data(), F, w.w2.data(), F, 0.0f,
                y.data(), d);
    bias_act(y.data(), w.b2.data(), T, d, false, loop_threads);
  };
  auto backward = [&] {
    column_sum(w.dy.data(), T, d, db2.data(), loop_threads);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, F, T, 1.0f, w.dy.data(), d, h.data(), F, 0.0f,
                dw2.data(), F);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, F, d, 1.0f, w.dy.data(), d, w.w2.data(), F, 0.0f,
                dz.data(), F);
#pragma omp parallel for num_threads(loop_threads) schedule(static)
    for (int64_t i = 0; i < T * F; ++i) dz[size_t(i)] = h[size_t(i)] > 0.0f ? dz[size_t(i)] : 0.0f;
    column_sum(dz.data(), T, F, db1.data(), loop_threads);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, F, d, T, 1.0f, dz.data(), F, w.x.data(), d, 0.0f,
                dw1.data(), d);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d, F, 1.0f, dz.data(), F, w.w1.data(), d, 0.0f,
                dx.data(), d);
  };
  return time_calls(c, [&] {
    forward();
    if (c.backward) backward();
  });
}
#endif

#ifdef FFN_HAVE_DNNL
// Forward: two matmul primitives, weights reordered once into the layout the
// primitive asks for ("any"), bias + ReLU as bias and eltwise post-op.
// Forward + backward: inner-product primitives (forward_training with the
// ReLU post-op; backward_data and backward_weights with the bias gradient),
// ReLU backward as a loop on the saved output, weights reordered once for
// each primitive that wants another layout.
std::vector<double> run_onednn(const Case& c) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  omp_set_num_threads(c.threads);
  Tensors w(c);
  const int64_t T = c.T, d = c.d, F = c.F;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  auto md = [](memory::dims dims, tag t) { return memory::desc(dims, dt::f32, t); };
  auto wrap = [&](const memory::desc& m, void* p) { return memory(m, eng, p); };
  auto packed = [&](const memory& user, const memory::desc& want) {
    if (user.get_desc() == want) return user;
    memory m(want, eng);
    reorder(user, m).execute(s, const_cast<memory&>(user), m);
    s.wait();
    return m;
  };
  post_ops relu;
  relu.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
  primitive_attr relu_attr;
  relu_attr.set_post_ops(relu);
  std::vector<float> h(size_t(T * F)), y(size_t(T * d)), dz(size_t(T * F)), dx(size_t(T * d));
  memory x_m = wrap(md({T, d}, tag::ab), w.x.data()), h_m = wrap(md({T, F}, tag::ab), h.data());
  memory y_m = wrap(md({T, d}, tag::ab), y.data());

  if (!c.backward) {
    // matmul: B = Wᵀ, so W [out, in] row-major is B [in, out] with tag ba.
    matmul::primitive_desc p1(matmul::desc(md({T, d}, tag::ab), md({d, F}, tag::any), md({1, F}, tag::ab),
                                           md({T, F}, tag::ab)),
                              relu_attr, eng);
    matmul::primitive_desc p2(
        matmul::desc(md({T, F}, tag::ab), md({F, d}, tag::any), md({1, d}, tag::ab), md({T, d}, tag::ab)), eng);
    memory w1 = packed(wrap(md({d, F}, tag::ba), w.w1.data()), p1.weights_desc());
    memory w2 = packed(wrap(md({F, d}, tag::ba), w.w2.data()), p2.weights_desc());
    memory b1 = wrap(md({1, F}, tag::ab), w.b1.data()), b2 = wrap(md({1, d}, tag::ab), w.b2.data());
    matmul m1(p1), m2(p2);
    return time_calls(c, [&] {
      m1.execute(s, {{DNNL_ARG_SRC, x_m}, {DNNL_ARG_WEIGHTS, w1}, {DNNL_ARG_BIAS, b1}, {DNNL_ARG_DST, h_m}});
      m2.execute(s, {{DNNL_ARG_SRC, h_m}, {DNNL_ARG_WEIGHTS, w2}, {DNNL_ARG_BIAS, b2}, {DNNL_ARG_DST, y_m}});
      s.wait();
    });
  }
  using ipf = inner_product_forward;
  ipf::primitive_desc f1(ipf::desc(prop_kind::forward_training, md({T, d}, tag::ab), md({F, d}, tag::any),
                                   md({F}, tag::a), md({T, F}, tag::ab)),
                         relu_attr, eng);
  ipf::primitive_desc f2(ipf::desc(prop_kind::forward_training, md({T, F}, tag::ab), md({d, F}, tag::any),
                                   md({d}, tag::a), md({T, d}, tag::ab)),
                         eng);
  using ipd = inner_product_backward_data;
  using ipw = inner_product_backward_weights;
  ipd::primitive_desc d1(ipd::desc(md({T, d}, tag::ab), md({F, d}, tag::any), md({T, F}, tag::ab)), eng, f1);
  ipd::primitive_desc d2(ipd::desc(md({T, F}, tag::ab), md({d, F}, tag::any), md({T, d}, tag::ab)), eng, f2);
  ipw::primitive_desc g1(
      ipw::desc(md({T, d}, tag::ab), md({F, d}, tag::any), md({F}, tag::a), md({T, F}, tag::ab)), eng, f1);
  ipw::primitive_desc g2(
      ipw::desc(md({T, F}, tag::ab), md({d, F}, tag::any), md({d}, tag::a), md({T, d}, tag::ab)), eng, f2);
  const memory w1_user = wrap(md({F, d}, tag::ab), w.w1.data()), w2_user = wrap(md({d, F}, tag::ab), w.w2.data());
  memory w1f = packed(w1_user, f1.weights_desc()), w2f = packed(w2_user, f2.weights_desc());
  memory w1d = packed(w1_user, d1.weights_desc()), w2d = packed(w2_user, d2.weights_desc());
  memory b1 = wrap(md({F}, tag::a), w.b1.data()), b2 = wrap(md({d}, tag::a), w.b2.data());
  memory dw1(g1.diff_weights_desc(), eng), dw2(g2.diff_weights_desc(), eng);
  memory db1(g1.diff_bias_desc(), eng), db2(g2.diff_bias_desc(), eng);
  memory dy_m = wrap(md({T, d}, tag::ab), w.dy.data()), dz_m = wrap(md({T, F}, tag::ab), dz.data());
  memory dx_m = wrap(md({T, d}, tag::ab), dx.data());
  ipf fw1(f1), fw2(f2);
  ipd bd1(d1), bd2(d2);
  ipw bw1(g1), bw2(g2);
  return time_calls(c, [&] {
    fw1.execute(s, {{DNNL_ARG_SRC, x_m}, {DNNL_ARG_WEIGHTS, w1f}, {DNNL_ARG_BIAS, b1}, {DNNL_ARG_DST, h_m}});
    fw2.execute(s, {{DNNL_ARG_SRC, h_m}, {DNNL_ARG_WEIGHTS, w2f}, {DNNL_ARG_BIAS, b2}, {DNNL_ARG_DST, y_m}});
    bw2.execute(s, {{DNNL_ARG_SRC, h_m}, {DNNL_ARG_DIFF_DST, dy_m}, {DNNL_ARG_DIFF_WEIGHTS, dw2},
                    {DNNL_ARG_DIFF_BIAS, db2}});
    bd2.execute(s, {{DNNL_ARG_DIFF_DST, dy_m}, {DNNL_ARG_WEIGHTS, w2d}, {DNNL_ARG_DIFF_SRC, dz_m}});
    s.wait();
#pragma omp parallel for num_threads(c.threads) schedule(static)
    for (int64_t i = 0; i < T * F; ++i) dz[size_t(i)] = h[size_t(i)] > 0.0f ? dz[size_t(i)] : 0.0f;
    bw1.execute(s, {{DNNL_ARG_SRC, x_m}, {DNNL_ARG_DIFF_DST, dz_m}, {DNNL_ARG_DIFF_WEIGHTS, dw1},
                    {DNNL_ARG_DIFF_BIAS, db1}});
    bd1.execute(s, {{DNNL_ARG_DIFF_DST, dz_m}, {DNNL_ARG_WEIGHTS, w1d}, {DNNL_ARG_DIFF_SRC, dx_m}});
    s.wait();
  });
}

// Low precision through oneDNN's matmul (forward only), the idiomatic static
// way: s8: x as s8 [T, d] (quantized once, outside the timing) × W1 s8 →
// bias, ReLU and output scale fused → hidden u8 [T, F] → × W2 s8 → f32 out;
// bf16: x, W1, W2 bf16, hidden bf16, out f32. Returns {} if this oneDNN has no
// implementation for the CPU (its error is printed).
std::vector<double> run_onednn_lowp(const Case& c, bool s8) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  omp_set_num_threads(c.threads);
  const int64_t T = c.T, d = c.d, F = c.F;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  try {
    const dt src_t = s8 ? dt::s8 : dt::bf16, w_t = s8 ? dt::s8 : dt::bf16, hid_t = s8 ? dt::u8 : dt::bf16;
    post_ops relu;
    relu.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
    primitive_attr a1, a2;
    a1.set_post_ops(relu);
    if (s8) {
      a1.set_output_scales(0, {0.01f});
      a2.set_output_scales(0, {0.001f});
    }
    matmul::primitive_desc p1(matmul::desc(memory::desc({T, d}, src_t, tag::ab), memory::desc({d, F}, w_t, tag::any),
                                           memory::desc({1, F}, dt::f32, tag::ab), memory::desc({T, F}, hid_t, tag::ab)),
                              a1, eng);
    matmul::primitive_desc p2(matmul::desc(memory::desc({T, F}, hid_t, tag::ab), memory::desc({F, d}, w_t, tag::any),
                                           memory::desc({1, d}, dt::f32, tag::ab), memory::desc({T, d}, dt::f32, tag::ab)),
                              a2, eng);
    memory x(p1.src_desc(), eng), h(p1.dst_desc(), eng), y(p2.dst_desc(), eng);
    memory w1(p1.weights_desc(), eng), w2(p2.weights_desc(), eng), b1(p1.bias_desc(), eng), b2(p2.bias_desc(), eng);
    // Contents: small integers / bf16 ones are enough for timing (no data-dependent paths).
    auto fill = [](memory& m, uint8_t v) {
      std::memset(m.get_data_handle(), v, m.get_desc().get_size());
    };
    fill(x, 1), fill(w1, 1), fill(w2, 1), fill(b1, 0), fill(b2, 0);
    matmul m1(p1), m2(p2);
    std::printf("# oneDNN %s: %s / %s\n", s8 ? "s8" : "bf16", p1.impl_info_str(), p2.impl_info_str());
    return time_calls(c, [&] {
      m1.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w1}, {DNNL_ARG_BIAS, b1}, {DNNL_ARG_DST, h}});
      m2.execute(s, {{DNNL_ARG_SRC, h}, {DNNL_ARG_WEIGHTS, w2}, {DNNL_ARG_BIAS, b2}, {DNNL_ARG_DST, y}});
      s.wait();
    });
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "ffn_peers: oneDNN %s: %s\n", s8 ? "s8" : "bf16", e.what());
    return {};
  }
}
#endif

// ---- compare: the driver ------------------------------------------------------

std::string run_process(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) std::fprintf(stderr, "ffn_peers: '%s' failed (status %d)\n", cmd.c_str(), rc);
  return out;
}

// The last line of the output that parses as a JSON object with median_s.
double median_of(const std::string& out) {
  double m = -1;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const auto j = nlohmann::json::parse(out.substr(start, end - start), nullptr, false);
    if (j.is_object() && j.contains("median_s")) m = j["median_s"].get<double>();
    start = end + 1;
  }
  return m;
}

int compare(const std::string& self, const std::string& ffn, const std::string& python, const std::string& torch,
            const std::vector<int64_t>& tokens, const std::vector<int>& thread_counts, int rounds,
            const std::vector<std::string>& impls) {
  struct Key {
    bool backward;
    int threads;
    int64_t T;
    auto operator<=>(const Key&) const = default;
  };
  std::map<Key, std::map<std::string, std::vector<double>>> results;
  std::map<int, double> peak;
  for (int t : thread_counts) peak[t] = ffn::measure_peak(t).gflops;
  for (int round = 0; round < rounds; ++round) {
    for (bool backward : {false, true})
      for (int threads : thread_counts)
        for (int64_t T : tokens) {
          const int repeats = T <= 64 ? 200 : T <= 512 ? 30 : 8;
          const int warmup = T <= 64 ? 20 : 2;
          const std::string args = " --tokens " + std::to_string(T) + " --threads " + std::to_string(threads) +
                                   " --repeats " + std::to_string(repeats) + " --warmup " +
                                   std::to_string(warmup) + (backward ? " --backward" : "") + " --json";
          for (const std::string& impl : impls) {
            const bool lowp = impl.find('_') != std::string::npos;
            if (backward && lowp) continue;  // low precision: inference only
            std::string cmd;
            if (impl == "ffn") cmd = ffn + " bench --norm none" + args;
            else if (impl == "ffn_bf16c") cmd = ffn + " bench --norm none --compute bf16" + args;
            else if (impl == "torch_bf16") cmd = python + " " + torch + " --autocast-bf16" + args;
            else if (impl.rfind("ffn_", 0) == 0) cmd = ffn + " bench --norm none --dtype " + impl.substr(4) + args;
            else if (impl == "torch") cmd = python + " " + torch + args;
            else cmd = self + " run --impl " + impl + args;
            const double m = median_of(run_process(cmd + " 2>/dev/null"));
            if (m > 0) results[{backward, threads, T}][impl].push_back(m);
          }
        }
    std::fprintf(stderr, "ffn_peers: round %d of %d done\n", round + 1, rounds);
  }
#ifdef FFN_HAVE_OPENBLAS
  std::printf("OpenBLAS core: %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_corename(),
              std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "unset");
#endif
  std::printf("Peak (FMA loop): ");
  for (auto [t, g] : peak) std::printf("%d thread(s) %.1f GFLOP/s  ", t, g);
  std::printf("\n512 -> 2048 ReLU, biases, fp32; median over %d rounds of per-process medians\n\n", rounds);
  std::printf("| pass | thr | T | impl | time | GFLOP/s | %% peak | ffn speed-up |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& [key, by_impl] : results) {
    const double flops = (key.backward ? 12.0 : 4.0) * double(key.T) * 512.0 * 2048.0;
    const auto it = by_impl.find("ffn");
    const double ours = it != by_impl.end() ? median(it->second) : 0;
    for (const std::string& impl : impls) {
      const auto r = by_impl.find(impl);
      if (r == by_impl.end()) continue;
      const double t = median(r->second);
      const double gf = flops / t * 1e-9;
      char time[32];
      if (t < 1e-3) std::snprintf(time, sizeof time, "%.1f us", t * 1e6);
      else std::snprintf(time, sizeof time, "%.2f ms", t * 1e3);
      std::printf("| %s | %d | %lld | %s | %s | %.1f | %.0f%% | %s |\n", key.backward ? "fwd+bwd" : "fwd",
                  key.threads, (long long)key.T, impl.c_str(), time, gf, 100.0 * gf / peak[key.threads],
                  impl == "ffn" || ours == 0 ? "" : (std::to_string(t / ours).substr(0, 4) + "x").c_str());
    }
  }
  return 0;
}

// The floor under the small-T layer: reading `bytes` (the fp32 weights: 8 MiB
// for 512 -> 2048) once per call, split evenly over the threads, as the
// weights are; median microseconds per read over `repeats` reads, each one
// parallel region like a layer call.
int stream_read(double mib, int threads, int repeats) {
  const size_t n = size_t(mib * 1048576.0) / sizeof(float) / 64 * 64;
  std::vector<float> buf(n, 1.0f);
  std::vector<double> us;
  float sink = 0.0f;
  for (int rep = 0; rep < repeats; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const size_t t = size_t(omp_get_thread_num()), nt = size_t(omp_get_num_threads());
      const float* p = buf.data() + n * t / nt / 64 * 64;
      const size_t len = n * (t + 1) / nt / 64 * 64 - n * t / nt / 64 * 64;
      float acc[16] = {};
      for (size_t i = 0; i < len; i += 16)
        for (int l = 0; l < 16; ++l) acc[l] += p[i + l];
      for (float a : acc) sink += a;
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  const double med = us[us.size() / 2];
  std::printf("read %.1f MiB on %d thread(s): median %.1f us (%.1f GB/s), min %.1f us  [%g]\n", mib, threads, med,
              double(n * sizeof(float)) / med / 1e3, us[0], double(sink));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ffn_peers: the FFN through oneDNN, OpenBLAS and PyTorch next to ffn"};
  app.require_subcommand(1);
  Case c;
  std::string impl;
  bool json = false;
  auto* run = app.add_subcommand("run", "time one implementation in this process");
  run->add_option("--impl", impl, "onednn, openblas, onednn_s8 or onednn_bf16")
      ->required()
      ->check(CLI::IsMember({"onednn", "openblas", "onednn_s8", "onednn_bf16"}));
  run->add_option("--tokens", c.T)->check(CLI::PositiveNumber);
  run->add_option("--d-model", c.d)->check(CLI::PositiveNumber);
  run->add_option("--d-ff", c.F)->check(CLI::PositiveNumber);
  run->add_option("--threads", c.threads)->check(CLI::Range(1, 1024));
  run->add_option("--repeats", c.repeats)->check(CLI::PositiveNumber);
  run->add_option("--warmup", c.warmup)->check(CLI::NonNegativeNumber);
  run->add_flag("--backward", c.backward);
  run->add_flag("--json", json);

  std::string ffn = "build/bin/ffn", python = "/usr/bin/python3", torch = "bench/torch_ffn.py";
  std::vector<int64_t> tokens = {1, 8, 64, 512, 4096};
  std::vector<int> threads = {1, 2};
  // Also: ffn_int8, ffn_bf16, ffn_fp16 (ffn bench --dtype), ffn_bf16c (ffn bench --compute bf16),
  // onednn_s8, onednn_bf16, torch_bf16 (PyTorch's bf16 autocast on CPU).
  std::vector<std::string> impls = {"ffn", "onednn", "openblas", "torch"};
  int rounds = 3;
  auto* cmp = app.add_subcommand("compare", "run every implementation, alternating, and print the table");
  cmp->add_option("--ffn", ffn, "the ffn program");
  cmp->add_option("--python", python, "python with torch (empty: skip PyTorch)");
  cmp->add_option("--torch-script", torch);
  cmp->add_option("--tokens", tokens)->delimiter(',');
  cmp->add_option("--threads", threads)->delimiter(',');
  cmp->add_option("--impls", impls)->delimiter(',');
  cmp->add_option("--rounds", rounds)->check(CLI::PositiveNumber);
  double mib = 8.0;
  int read_threads = 2, read_repeats = 500;
  auto* rd = app.add_subcommand("read", "time reading a buffer (the weights' size) once per parallel region");
  rd->add_option("--mib", mib, "buffer size in MiB (default 8: the fp32 weights of 512 -> 2048)")
      ->check(CLI::Range(0.001, 65536.0));
  rd->add_option("--threads", read_threads)->check(CLI::Range(1, 1024));
  rd->add_option("--repeats", read_repeats)->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {  // --help: 0; a bad flag or value: its message, exit 2
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (rd->parsed()) return stream_read(mib, read_threads, read_repeats);
  if (cmp->parsed()) {
    std::vector<std::string> use;
    for (const auto& i : impls) {
#ifndef FFN_HAVE_DNNL
      if (i.rfind("onednn", 0) == 0) continue;
#endif
#ifndef FFN_HAVE_OPENBLAS
      if (i == "openblas") continue;
#endif
      if (i == "torch" && (python.empty() || run_process(python + " -c 'import torch' 2>/dev/null; echo $?") != "0\n"))
        continue;
      use.push_back(i);
    }
    return compare(argv[0], ffn, python, torch, tokens, threads, rounds, use);
  }
  std::vector<double> t;
  if (impl == "onednn" || impl == "onednn_s8" || impl == "onednn_bf16") {
#ifdef FFN_HAVE_DNNL
    t = impl == "onednn" ? run_onednn(c) : run_onednn_lowp(c, impl == "onednn_s8");
#endif
  } else {
#ifdef FFN_HAVE_OPENBLAS
    t = run_openblas(c);
#endif
  }
  if (t.empty()) {
    std::fprintf(stderr, "ffn_peers: --impl %s: not built in (library not found at configure time)\n", impl.c_str());
    return 2;
  }
  const double m = median(t);
  const double flops = (c.backward ? 12.0 : 4.0) * double(c.T) * double(c.d) * double(c.F);
  nlohmann::json j = {{"impl", impl}, {"tokens", c.T}, {"threads", c.threads}, {"backward", c.backward},
                      {"median_s", m}, {"min_s", *std::min_element(t.begin(), t.end())},
                      {"max_s", *std::max_element(t.begin(), t.end())}, {"gflops", flops / m * 1e-9}};
  std::cout << j.dump() << "\n";
  return 0;
}
