#include "ffn/train.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/philox.hpp"

namespace ffn::train {

std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t round) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t idx = (round << 40) | uint64_t(i);
    const uint64_t bits = (uint64_t(nn::random_bits(seed, nn::Stream::shuffle, 2 * idx)) << 32) |
                          nn::random_bits(seed, nn::Stream::shuffle, 2 * idx + 1);
    const int64_t j = int64_t((unsigned __int128)bits * uint64_t(i + 1) >> 64);  // uniform in 0..i
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

void split(int64_t n, double fraction, uint64_t seed, std::vector<int64_t>& train, std::vector<int64_t>& held_out) {
  const std::vector<int64_t> p = permutation(n, seed, /*round=*/(uint64_t(1) << 23) - 1);
  int64_t h = std::llround(double(n) * fraction);
  h = std::min(h, n - 1);
  h = std::max<int64_t>(h, 0);
  train.assign(p.begin(), p.end() - h);
  held_out.assign(p.end() - h, p.end());
}

double cosine_lr(double lr, int64_t step, int64_t total) {
  if (total <= 0) return lr;
  return 0.5 * lr * (1.0 + std::cos(std::numbers::pi * double(step) / double(total)));
}

namespace {

// Copies the chosen rows into contiguous batch buffers.
Batch gather(const Dataset& data, const int64_t* rows, int64_t n, std::vector<float>& x, std::vector<float>& t,
             std::vector<int64_t>& l) {
  const int64_t d = data.d;
  x.resize(size_t(n * d));
  for (int64_t i = 0; i < n; ++i) std::copy_n(data.x.data() + rows[i] * d, d, x.data() + i * d);
  Batch b;
  b.x = x.data();
  b.n = n;
  if (!data.labels.empty()) {
    l.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) l[size_t(i)] = data.labels[size_t(rows[i])];
    b.labels = l.data();
  } else {
    t.resize(size_t(n * d));
    for (int64_t i = 0; i < n; ++i) std::copy_n(data.targets.data() + rows[i] * d, d, t.data() + i * d);
    b.targets = t.data();
  }
  return b;
}

}  // namespace

double evaluate(const Trainer& trainer, const Dataset& data, const std::vector<int64_t>& rows, int64_t batch) {
  if (rows.empty()) return std::numeric_limits<double>::quiet_NaN();
  // With a team, rank r evaluates batches r, r + P, …; every rank then adds
  // all batches' losses in batch order, as one process does.
  const Team* team = trainer.team();
  const int P = team ? team->size() : 1, rank = team ? team->rank() : 0;
  const int64_t batches = (int64_t(rows.size()) + batch - 1) / batch;
  std::vector<double> mine;
  std::vector<float> x, t;
  std::vector<int64_t> l;
  for (int64_t i = rank; i < batches; i += P) {
    const int64_t n = std::min<int64_t>(batch, int64_t(rows.size()) - i * batch);
    mine.push_back(trainer.evaluate(gather(data, rows.data() + i * batch, n, x, t, l)) * double(n));
  }
  const std::vector<double> all = team ? team->all_gather(mine) : mine;  // rank-major
  std::vector<int64_t> first(static_cast<size_t>(P + 1), 0);  // rank q's losses start at first[q]
  for (int q = 0; q < P; ++q) first[size_t(q) + 1] = first[size_t(q)] + (batches - q + P - 1) / P;
  double sum = 0.0;
  for (int64_t i = 0; i < batches; ++i) sum += all[size_t(first[size_t(i % P)] + i / P)];
  return sum / double(rows.size());
}

FitResult fit(Trainer& trainer, const Dataset& data, const std::vector<int64_t>& train_rows,
              const std::vector<int64_t>& val_rows, const FitOptions& opts, const FitCallbacks& cb) {
  using clock = std::chrono::steady_clock;
  FitResult r;
  const int64_t n = int64_t(train_rows.size());
  const int64_t per_epoch = (n + opts.batch - 1) / opts.batch;
  const int64_t total = per_epoch * opts.epochs;
  std::vector<float> x, t;
  std::vector<int64_t> l;
  int64_t global = 0;
  for (int64_t e = 0; e < opts.epochs; ++e) {
    const auto t0 = clock::now();
    const std::vector<int64_t> order = permutation(n, opts.seed, uint64_t(e));
    std::vector<int64_t> rows(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rows[size_t(i)] = train_rows[size_t(order[size_t(i)])];
    double sum = 0.0;
    int64_t seen = 0;
    for (int64_t s = 0; s < per_epoch; ++s, ++global) {
      // With a team, every rank stops at the same step: the one where any rank saw the flag.
      const bool stop = cb.stop && cb.stop->load();
      if (trainer.team() ? trainer.team()->any(stop) : stop) {
        r.interrupted = true;
        return r;
      }
      const int64_t b = std::min(opts.batch, n - s * opts.batch);
      if (opts.cosine) trainer.set_lr(cosine_lr(opts.lr, global, total));
      const double loss = trainer.step(gather(data, rows.data() + s * opts.batch, b, x, t, l),
                                       /*dropout_seed=*/opts.seed ^ (uint64_t(global) * 0x9E3779B97F4A7C15ull));
      r.step_losses.push_back(loss);
      if (!trainer.diverged().empty()) {
        r.diverged = trainer.diverged();
        r.diverged_epoch = e + 1;
        r.diverged_step = s + 1;
        return r;
      }
      sum += loss * double(b);
      seen += b;
      if (cb.on_step) {
        const double secs = std::chrono::duration<double>(clock::now() - t0).count();
        cb.on_step({e + 1, opts.epochs, s + 1, per_epoch, loss, secs > 0 ? double(seen) / secs : 0.0});
      }
    }
    const double secs = std::chrono::duration<double>(clock::now() - t0).count();
    EpochReport rep{e + 1, opts.epochs, sum / double(seen), evaluate(trainer, data, val_rows), secs,
                    secs > 0 ? double(seen) / secs : 0.0};
    r.epochs.push_back(rep);
    if (cb.on_epoch) cb.on_epoch(rep);
  }
  return r;
}

}  // namespace ffn::train
