// How fast this core retires the AVX2 prompt kernel's inner instruction mix
// (src/backends/cpu/kernels/avx2/q_gemm_avx2.cpp, tile<kType, 4>), with
// every operand in L1 and nothing else in the loop: no scales, no float
// epilogue, no weight stream. It bounds what a prompt can reach with 16-bit
// activations on this CPU (bench/results/2026-11-28-k-quants-zen3-avx2.md).
//
//   gcc -O2 bench/avx2_mix_ceiling.c -o /tmp/avx2_mix_ceiling && /tmp/avx2_mix_ceiling
//
// Per iteration, one weight vector (32 bytes of nibbles: 8 rows x 4 k) is
// unpacked (shift, and) and used by 4 tokens x 2 activation planes:
//   full:      8 x (vpbroadcastd from L1, vpmaddubsw, vpaddw)   the kernel's mix
//   rows16:    two weight vectors (16 rows) x 2 tokens: 4 broadcasts, each
//              used by both vectors (the other shape that fits 16 ymm, but
//              for the nibble mask)
//   no-bcast:  full with the activations already in registers
//   products:  the weight vector's load, shift and and, and the 8 vpmaddubsw
// Left out, as in "nothing else": the kernel shifts only the vectors of high
// nibbles (half of them), widens the int16 sums into int32 (vpmaddwd, vpaddd)
// once per block, and scales and adds the block's sums in float.
// The loop is aligned to 64 bytes: unaligned, "full" varied 7.7-9.5 cycles
// with where the linker put it.
// Each vpmaddubsw is 32 byte products; two planes make a 16-bit activation,
// so an iteration is 4 x 32 = 128 multiply-adds. Cycles come from the clock
// measured by a chain of dependent adds (1 a cycle), since a KVM guest may
// not expose cycle counters.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static _Alignas(64) uint8_t w[64];
static _Alignas(64) int8_t x[64];

#define PROLOGUE                                                                                   \
  "vpxor %%ymm8,%%ymm8,%%ymm8\n vpxor %%ymm9,%%ymm9,%%ymm9\n vpxor %%ymm10,%%ymm10,%%ymm10\n"     \
  "vpxor %%ymm11,%%ymm11,%%ymm11\n vpxor %%ymm12,%%ymm12,%%ymm12\n vpxor %%ymm13,%%ymm13,%%ymm13\n" \
  "vpxor %%ymm14,%%ymm14,%%ymm14\n vpxor %%ymm15,%%ymm15,%%ymm15\n"                                 \
  "vpcmpeqb %%ymm7,%%ymm7,%%ymm7\n vpsrlw $12,%%ymm7,%%ymm7\n"                                     \
  "vpcmpeqb %%ymm5,%%ymm5,%%ymm5\n vpabsb %%ymm5,%%ymm6\n"                                          \
  ".p2align 6\n 1:\n vmovdqu (%1),%%ymm0\n vpsrlw $4,%%ymm0,%%ymm0\n vpand %%ymm7,%%ymm0,%%ymm0\n"
#define EPILOGUE "dec %0\n jnz 1b\n vzeroupper\n"
#define CLOBBERS                                                                                   \
  "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9", "ymm10", "ymm11", \
      "ymm12", "ymm13", "ymm14", "ymm15", "cc", "memory"
#define FULL(off, t, acc) \
  "vpbroadcastd " #off "(%2),%%ymm" #t "\n vpmaddubsw %%ymm" #t ",%%ymm0,%%ymm" #t "\n vpaddw %%ymm" #t ",%%ymm" #acc ",%%ymm" #acc "\n"
#define NOBC(src, t, acc) "vpmaddubsw %%ymm" #src ",%%ymm0,%%ymm" #t "\n vpaddw %%ymm" #t ",%%ymm" #acc ",%%ymm" #acc "\n"
#define PROD(src, t) "vpmaddubsw %%ymm" #src ",%%ymm0,%%ymm" #t "\n"

static void full(long n) {
  __asm__ volatile(PROLOGUE FULL(0, 1, 8) FULL(4, 2, 9) FULL(8, 3, 10) FULL(12, 4, 11) FULL(16, 1, 12)
                       FULL(20, 2, 13) FULL(24, 3, 14) FULL(28, 4, 15) EPILOGUE
                   : "+r"(n) : "r"(w), "r"(x) : CLOBBERS);
}
// 16 rows x 2 tokens: two weight vectors (both halves of a group), each
// broadcast used by both.
#define ROWS16 \
  "vmovdqu 32(%1),%%ymm6\n vpsrlw $4,%%ymm6,%%ymm6\n vpand %%ymm7,%%ymm6,%%ymm6\n"
#define BOTH(off, t, u, acc0, acc1)                                                             \
  "vpbroadcastd " #off "(%2),%%ymm" #t "\n vpmaddubsw %%ymm" #t ",%%ymm6,%%ymm" #u "\n"        \
  "vpmaddubsw %%ymm" #t ",%%ymm0,%%ymm" #t "\n vpaddw %%ymm" #t ",%%ymm" #acc0 ",%%ymm" #acc0 "\n" \
  "vpaddw %%ymm" #u ",%%ymm" #acc1 ",%%ymm" #acc1 "\n"
static void rows16(long n) {
  __asm__ volatile(PROLOGUE ROWS16 BOTH(0, 1, 2, 8, 9) BOTH(4, 3, 4, 10, 11) BOTH(8, 1, 2, 12, 13)
                       BOTH(12, 3, 4, 14, 15) EPILOGUE
                   : "+r"(n) : "r"(w), "r"(x) : CLOBBERS);
}
static void no_bcast(long n) {
  __asm__ volatile(PROLOGUE NOBC(5, 1, 8) NOBC(6, 2, 9) NOBC(5, 3, 10) NOBC(6, 4, 11) NOBC(5, 1, 12)
                       NOBC(6, 2, 13) NOBC(5, 3, 14) NOBC(6, 4, 15) EPILOGUE
                   : "+r"(n) : "r"(w), "r"(x) : CLOBBERS);
}
static void products(long n) {
  __asm__ volatile(PROLOGUE PROD(5, 1) PROD(6, 2) PROD(5, 3) PROD(6, 4) PROD(5, 1) PROD(6, 2) PROD(5, 3)
                       PROD(6, 4) EPILOGUE
                   : "+r"(n) : "r"(w), "r"(x) : CLOBBERS);
}

static double ghz(void) {
  const unsigned long n = 400000000UL;
  unsigned long c = 0;
  const double t0 = now();
  for (unsigned long i = 0; i < n; i += 8)
    __asm__ volatile("add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0\n add $1,%0"
                     : "+r"(c));
  return n / (now() - t0) / 1e9;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(void) {
  enum { kRounds = 7 };
  const long n = 100000000;
  static void (*const loops[4])(long) = {full, rows16, no_bcast, products};
  static const char* const names[4] = {"full", "rows16", "no-bcast", "products"};
  double cycles[4][kRounds];
  printf("round  clock GHz  loop      cycles/iteration  multiply-adds/cycle\n");
  for (int round = 0; round < kRounds; ++round)
    for (int l = 0; l < 4; ++l) {
      const double f = ghz(), t0 = now();
      loops[l](n);
      cycles[l][round] = (now() - t0) * f * 1e9 / n;
      printf("%5d  %9.2f  %-8s  %16.2f  %19.1f\n", round, f, names[l], cycles[l][round], 128 / cycles[l][round]);
    }
  for (int l = 0; l < 4; ++l) {
    qsort(cycles[l], kRounds, sizeof(double), by_value);
    printf("median %-8s  %.2f cycles/iteration, %.1f multiply-adds/cycle\n", names[l], cycles[l][kRounds / 2],
           128 / cycles[l][kRounds / 2]);
  }
  return 0;
}
