// What ffn tells about a run and its machine, for programs that report
// figures as `ffn bench` does: the CPU's name, the ISA a call runs, the
// machine's peak measured now, the kernels a run uses; how a result is
// compared with an expected one; and how numbers, shapes and durations are
// written in messages.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ffn/types.hpp"

namespace ffn {

// ---- the machine -------------------------------------------------------------

// The CPU's name as the OS reports it (/proc/cpuinfo "model name"), or
// "unknown CPU"; printed with benchmark figures so they name their machine.
std::string cpu_name();

// Every ISA with kernels in this build, worst first (scalar, avx2, avx512,
// amx): what the tests iterate. isa_supported says which this CPU runs.
const std::vector<Isa>& all_isas();

// The ISA a call runs: `requested` unless automatic, then FFN_ISA if set,
// else the best this CPU supports. Throws Error for an ISA the CPU lacks or
// that has no kernels in this build.
Isa resolve_isa(Isa requested);

// The machine's peak rate, measured: a loop of one instruction with operands
// in registers, run on `threads` threads at once, with the best ISA this CPU
// has (whatever FFN_ISA forces: "% of peak" is the machine's).
struct Peak {
  double gflops = 0;  // best of several short rounds
  Isa isa = Isa::scalar;
  const char* instr = "";  // what the loop ran, e.g. "AVX-512 vfmadd231ps zmm"
};
enum class PeakKind {
  fp32,   // FMA
  int8,   // the int8 product's instruction on that ISA (vpmaddwd + vpaddd on AVX2, vpdpbusd with VNNI)
  u8s8,   // vpmaddubsw + vpmaddwd + vpaddd: the other AVX2 int8 idiom, for comparison
  bf16,   // the bf16 compute mode's instruction (vdpbf16ps, AMX tdpbf16ps); 0 where none
};
// Ops counted as FLOPs are: 2 per multiply-add. int8 and u8s8 need AVX2 (else 0).
Peak measure_peak(int threads, PeakKind kind = PeakKind::fp32);

// Memory read bandwidth, measured: GB/s (1e9 bytes) of `threads` threads
// reading a fresh buffer of `bytes` bytes on huge pages where the OS gives
// them, as the weights are (each thread its contiguous share, 256-bit
// loads where the CPU has AVX2), the median of 7 passes after one that warms
// the caches. With the size of a model's weights it is the rate at which
// generation, which reads every weight once per token, could at best go.
double measure_read_bandwidth(int64_t bytes, int threads);

// The kernels the matrix products of a run on `isa` (resolved, not
// automatic) use, for reports.
struct KernelInfo {
  int mr = 0, nr = 0;           // the fp32 kernel's tile (rows × columns)
  std::string int8_instr;       // the int8 product's instruction
  std::string bf16_instr;       // the bf16 compute mode's instruction
};
KernelInfo kernel_info(Isa isa);

// The kernel report: the ISAs whose kernel sets this process's calls have
// been given so far, worst first. Every execution context records its set
// when it is made (src/backends/context.cpp), and every op reaches its
// kernels through a context, so a run with --isa scalar that reports only
// scalar ran nothing else. (ffn bench's peak loops measure the machine at its
// best ISA, not the run's, and are not counted.) FFN_KERNEL_REPORT=1 makes
// the ffn program print it on standard error as it exits:
// "ffn: kernels run: scalar".
std::vector<Isa> isas_run();

// ---- comparing results ----------------------------------------------------------
// How a result is compared with an expected one, everywhere in the project
// (tests against PyTorch and the reference, and `ffn bench`'s check).
//
// scaled error of element i = |got_i − want_i| / (|want_i| + rms(want))
//
// Elementwise relative error alone fails on values that cancel to near zero,
// whose absolute error is set by the size of the terms, not of the result;
// adding the tensor's RMS to the denominator measures such elements against
// the tensor's typical magnitude. A non-finite value counts as an infinite
// error unless the other side has the same one (NaN where NaN is expected); so does any difference where want is all zeros.


struct Comparison {
  double max_error = 0;   // largest scaled error
  size_t worst = 0;       // index of that element
  double got = 0, want = 0;
  bool ok(double tol) const { return max_error <= tol; }
  std::string describe() const {
    return "max scaled error " + std::to_string(max_error) + " at [" + std::to_string(worst) +
           "]: got " + std::to_string(got) + ", want " + std::to_string(want);
  }
};

template <typename A, typename B>
Comparison compare(const A* got, const B* want, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(want[i]) * double(want[i]);
  const double rms = n ? std::sqrt(ss / double(n)) : 0.0;
  Comparison c;
  for (size_t i = 0; i < n; ++i) {
    const double g = double(got[i]), w = double(want[i]);
    double e;
    if (!std::isfinite(g) || !std::isfinite(w)) e = (g == w || (std::isnan(g) && std::isnan(w))) ? 0.0 : INFINITY;
    else if (g == w) e = 0.0;
    else {
      const double den = std::fabs(w) + rms;
      e = den > 0 ? std::fabs(g - w) / den : INFINITY;
    }
    if (i == 0 || e > c.max_error) {
      c.max_error = e;
      c.worst = i;
      c.got = g;
      c.want = w;
    }
  }
  return c;
}

// How far a low-precision result is from the full-precision one, as a whole:
// ‖got − want‖ / ‖want‖ and the cosine of the angle between them.
struct Agreement {
  double rel_rms = 0, cosine = 0;
};
template <typename A, typename B>
Agreement agreement(const A* got, const B* want, size_t n) {
  double e = 0, w = 0, g = 0, gw = 0;
  for (size_t i = 0; i < n; ++i) {
    const double a = double(got[i]), b = double(want[i]);
    e += (a - b) * (a - b);
    w += b * b;
    g += a * a;
    gw += a * b;
  }
  return {std::sqrt(e / w), gw / std::sqrt(g * w)};
}

// Fraction of elements that are not zero: a check whose expected values are
// mostly zeros proves little (oneDNN's benchdnn refuses such checks).
template <typename T>
double nonzero_fraction(const T* v, size_t n) {
  size_t nz = 0;
  for (size_t i = 0; i < n; ++i) nz += v[i] != T(0);
  return n ? double(nz) / double(n) : 0.0;
}

// Text for messages (shape_str, num, duration_str): ffn/types.hpp.

}  // namespace ffn
