// ffn run / grad / bench --tensor-parallel and ffn train under mpirun (src/dist): built with MPI only.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ffn/mpi.hpp"
#include "ffn/random.hpp"

namespace ffn::cli {

namespace {

// Runs a command's body on every rank. Its errors are agreed (every rank
// throws at the same step), so each rank prints its line and then waits for
// the others before exiting: mpirun ends the job at the first non-zero exit,
// and a rank still printing would lose its line.
// An error that is not agreed (a bug, or one no step caught) may leave the
// other ranks inside a collective: it ends the job instead (MPI_Abort).
template <class F>
int on_every_rank(F&& body) {
  const dist::Comm& comm = dist::Comm::world();
  try {
    return body(comm);
  } catch (const dist::AgreedError& e) {
    std::fprintf(stderr, "ffn: error: %s\n", e.what());
    std::fflush(stderr);
    comm.barrier();
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ffn: error: rank %d: %s\n", comm.rank(), e.what());
    std::fflush(stderr);
    comm.abort(2);
  }
}

// What run and grad begin with: every rank's shards (rank 0 noting the
// settings taken from defaults, as ffn run does) and the input, whose shape
// must agree across ranks. check: more of the input to read and check.
struct Prologue {
  std::optional<dist::ParallelFeedForward> tp;
  std::optional<Input> in;
};
template <class F>
Prologue begin_parallel(const dist::Comm& comm, const ParallelArgs& a, F&& check) {
  Prologue p;
  comm.agreed([&] {
    if (comm.rank() == 0 && a.check_outputs) a.check_outputs();
  });
  p.tp.emplace(dist::ParallelFeedForward::load(comm, a.weights, a.load));
  comm.agreed([&] { refuse_guessed_settings(a.weights, p.tp->local().assumed_settings()); });
  if (comm.rank() == 0) note_assumed(a.weights, p.tp->local().assumed_settings());
  comm.agreed([&] {
    check(p.tp->local());
    p.in.emplace(read_input(a.input, a.lengths, a.layout, p.tp->local().config().d_model, a.weights));
  });
  std::vector<int64_t> what = p.in->x.shape;
  what.insert(what.end(), p.in->shape.lengths.begin(), p.in->shape.lengths.end());
  comm.check_same(what, "the input's shape (and lengths)");
  return p;
}

// --threads 0 under mpirun: the cores shared among the ranks.
int rank_threads(int threads, const dist::Comm& comm) {
  return threads > 0 ? threads : std::max(1, omp_get_num_procs() / comm.size());
}

}  // namespace

int train_data_parallel(const std::function<int(const Team&, const Agree&)>& body) {
  return on_every_rank([&](const dist::Comm& comm) {
    const dist::MpiTeam team(comm);
    return body(team, [&](const std::string& error) { comm.agree(error); });
  });
}

int run_tensor_parallel(const ParallelRunArgs& a) { return on_every_rank([&](const dist::Comm& comm) {
  Prologue p = begin_parallel(comm, a, [&](const FeedForward& local) {
    if (a.compute == Compute::bf16 && local.weight_dtype() == WeightDtype::int8)
      throw Error("--compute bf16: needs fp32, bf16 or fp16 weights (" + a.weights + " holds int8 weights)");
  });
  const auto& tp = p.tp;
  const auto& in = p.in;
  Array y;
  comm.agreed([&] {
    y.shape = in->x.shape;
    y.data.resize(in->x.data.size());
  });
  RunOptions ro;
  ro.threads = rank_threads(a.threads, comm);
  ro.compute = a.compute;
  tp->forward(in->x.data.data(), y.data.data(), in->shape, ro);  // its steps agreed inside
  comm.agreed([&] {
    if (comm.rank() == 0) write_npy(a.output, y);  // rank 0 alone writes, atomically
  });
  return 0;
}); }

int grad_tensor_parallel(const ParallelGradArgs& a) { return on_every_rank([&](const dist::Comm& comm) {
  Prologue p = begin_parallel(comm, a, [](const FeedForward&) {});
  const auto& tp = p.tp;
  const auto& in = p.in;
  Array dy;
  comm.agreed([&] {
    dy = read_npy(a.grad_output);
    if (dy.shape != in->x.shape)
      throw Error(a.grad_output + ": grad-output has shape " + shape_str(dy.shape) + ", expected the input's shape " +
                  shape_str(in->x.shape));
  });
  RunOptions ro;
  ro.threads = rank_threads(a.threads, comm);
  ro.training = a.training;
  ro.seed = a.seed;
  Array dx;
  std::vector<float> y;
  ForwardCache cache;
  comm.agreed([&] {
    y.resize(in->x.data.size());
    dx.shape = in->x.shape;
    dx.data.resize(in->x.data.size());
  });
  tp->forward(in->x.data.data(), y.data(), in->shape, ro, nullptr, &cache);  // steps agreed inside
  Weights grads;
  tp->backward(in->x.data.data(), dy.data.data(), in->shape, cache, dx.data.data(), grads, ro);
  // Rank 0 stages both files (write_gradient_pair); inside, every rank writes
  // its parts of grads.safetensors, whose staging path rank 0 broadcasts
  // ("P" + path), or the error that stopped it before ("E" + message).
  if (comm.rank() == 0) {
    bool shared = false;
    std::string error;
    try {
      write_gradient_pair(a.targets, dx, [&](const std::string& path) {
        shared = true;
        comm.broadcast("P" + path);
        dist::write_sharded_gradients(comm, path, tp->local(), grads);
      });
    } catch (const dist::AgreedError&) {
      throw;  // every rank stopped at the same step
    } catch (const std::exception& e) {
      if (!shared) {
        comm.broadcast("E" + std::string(e.what()));
        throw dist::AgreedError("rank 0: " + std::string(e.what()));
      }
      error = e.what();  // the renames, after every rank's part
    }
    comm.agree(error);
  } else {
    const std::string got = comm.broadcast("");
    if (got.empty() || got[0] != 'P')
      throw dist::AgreedError("rank " + std::to_string(comm.rank()) + ": stopped, rank 0 failed: " + got.substr(1));
    dist::write_sharded_gradients(comm, got.substr(1), tp->local(), grads);
    comm.agree("");
  }
  return 0;
}); }

int bench_tensor_parallel(const FeedForward& whole, int64_t tokens, RunOptions ro, int repeats, int warmup, bool json,
                          uint64_t seed) { return on_every_rank([&](const dist::Comm& comm) {
  ro.threads = rank_threads(ro.threads, comm);
  std::optional<dist::ParallelFeedForward> tp;
  comm.agreed([&] { tp.emplace(comm, whole); });
  const int64_t d = whole.config().d_model;
  std::vector<float> x, y;
  comm.agreed([&] {
    x.resize(size_t(tokens * d));
    y.resize(x.size());
  });
  fill_uniform(x.data(), x.size(), 1.0f, seed, /*tensor_id=*/100);
  const Shape shape = Shape::tokens(tokens);
  std::vector<double> wall, compute, sum, bytes;
  for (int i = 0; i < warmup + repeats; ++i) {
    dist::ParallelTiming t;
    comm.barrier();
    const double t0 = omp_get_wtime();
    tp->forward(x.data(), y.data(), shape, ro, &t);
    const double w = omp_get_wtime() - t0;
    if (i < warmup) continue;
    wall.push_back(w), compute.push_back(t.compute_s), sum.push_back(t.comm.seconds), bytes.push_back(t.comm.bytes_sent);
  }
  const std::vector<double> mine = {median(wall), median(compute), median(sum), median(bytes),
                                    double(tp->local().config().d_ff)};
  const std::vector<double> all = comm.gather(mine);
  if (comm.rank() != 0) return 0;
  const int P = comm.size();
  const double flops = whole.forward_flops(tokens);
  double slowest = 0;
  for (int r = 0; r < P; ++r) slowest = std::max(slowest, all[size_t(r) * 5]);
  if (json) {
    std::printf("{\"ranks\": %d, \"threads\": %d, \"tokens\": %lld, \"d_model\": %lld, \"d_ff\": %lld, "
                "\"median_s\": %.9g, \"gflops\": %.6g, \"per_rank\": [",
                P, ro.threads, (long long)tokens, (long long)d, (long long)whole.config().d_ff, slowest,
                flops / slowest * 1e-9);
    for (int r = 0; r < P; ++r) {
      const double* v = all.data() + r * 5;
      std::printf("%s{\"rank\": %d, \"d_ff_local\": %.0f, \"wall_s\": %.9g, \"compute_s\": %.9g, \"sum_s\": %.9g, "
                  "\"bytes_sent\": %.0f}",
                  r ? ", " : "", r, v[4], v[0], v[1], v[2], v[3]);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("ffn bench --tensor-parallel: %d rank(s) x %d thread(s), %lld -> %lld, %lld tokens, median of %d calls\n",
              P, ro.threads, (long long)d, (long long)whole.config().d_ff, (long long)tokens, repeats);
  std::printf("  %-5s %-10s %-12s %-13s %-12s %s\n", "rank", "d_ff held", "call (ms)", "compute (ms)", "sum (ms)",
              "MB sent per call");
  for (int r = 0; r < P; ++r) {
    const double* v = all.data() + r * 5;
    std::printf("  %-5d %-10.0f %-12.3f %-13.3f %-12.3f %.3f\n", r, v[4], v[0] * 1e3, v[1] * 1e3, v[2] * 1e3,
                v[3] / 1e6);
  }
  std::printf("  the slowest rank: %.3f ms per call, %.1f GFLOP/s over the job\n", slowest * 1e3, flops / slowest * 1e-9);
  return 0;
}); }

}  // namespace ffn::cli
