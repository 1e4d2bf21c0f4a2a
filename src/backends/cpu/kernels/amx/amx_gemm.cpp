// AMX kernels (compiled with the AVX-512 flags and -mamx-tile -mamx-bf16
// -mamx-int8): the bf16 × bf16 → fp32 product of src/backends/cpu/gemm.hpp
// (Bf16GemmArgs) on TDPBF16PS and the u8 × s8 → int32 product (U8GemmArgs)
// on TDPBUSD. Chosen only where CPUID shows AMX-TILE/BF16/INT8, XCR0 has the
// tile state and Linux granted this process the tile data
// (arch_prctl(ARCH_REQ_XCOMP_PERM), src/backends/cpu/kernel_config.cpp).
//
// Tiles: every tile is 16 rows × 64 bytes. tmm0–3 hold a 32 × 32 block of C
// (2 row tiles × 2 column panels, fp32 or int32), tmm4–5 the two A tiles
// (16 rows × 32 bf16 or 64 u8: one k step), tmm6–7 the two B tiles (16 rows
// of the packed panel: 16 pairs or quads of k × 16 columns, the layout the
// vdpbf16ps and vpdpbusd kernels read too). Per k step: 4 tile loads, 4 tile
// products of 16 × 16 × 32 (bf16) or × 64 (int8) multiply-adds.
//
// bf16 blocking: A comes packed in row tiles (Bf16Kernels::a_rows = 16: 16
// rows × 32 k contiguous per step, zero rows past m), k in blocks of 8 steps;
// a pair of row tiles stays in L1 while the B panel pairs stream past it.
// The fused forward's packed operands start on cache lines (core/aligned.hpp):
// tile rows that straddle two lines halved the speed. Measured on the Xeon of
// bench/results/2026-11-23-amx.md, one thread, 144 × 256 × 512 and
// 144 × 512 × 256 (accumulating), operands 16 bytes off a line: rows with
// their stride and no blocking 634 / 613 GFLOP/s; packed tiles + k blocks of
// 8 848 / 700; + a prefetch of the next B pair into L1 912 / 840. Aligned:
// 1 798 / 1 707 with that prefetch, 2 011 / 1 840 without it (removed; at
// T = 4096 on 2 threads it made no difference either).
//
// Edges. bf16: a tile of C with fewer than 16 valid rows or columns goes
// through a 16 × 16 scratch; each row's sums are the same whichever tile it
// falls in (the tile product's order is fixed per element). int8: the sums
// are exact integers, so any split gives the same bits: the rows past the
// last whole 16 run on tiles configured with that many rows (from 3 of
// them; 1 or 2 rows, and a k that is not a multiple of 64, are left to the
// AVX-512 VNNI kernel).
// The tile configuration is loaded at the start of each call and released
// at its end: a thread never holds tile state between calls.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "backends/cpu/gemm.hpp"

namespace ffn::nn::avx512 {
void to_bf16(const float* v, int64_t n, uint16_t* out);
}

namespace ffn::nn::amx {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};  // tmm0–7: 64 bytes per row
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};    // 16 rows
};
// A constant in memory: GCC 12 does not see ldtilecfg's read of a local
// object and dropped the stores that filled one (the tiles then stayed
// unconfigured, and the first tile instruction raised SIGILL).
constexpr TileConfig kTileConfig{};

// For a last row tile of r < 16 rows: the C and A tiles (tmm0–5) have r
// rows, the B tiles (tmm6–7) all 16; index r = 1..16.
struct PartialConfigs {
  TileConfig rows[17];
};
constexpr PartialConfigs make_partial_configs() {
  PartialConfigs p{};
  for (int r = 1; r <= 16; ++r)
    for (int t = 0; t < 6; ++t) p.rows[r].rows[t] = uint8_t(r);
  return p;
}
constexpr PartialConfigs kPartialConfigs = make_partial_configs();

// Eight 64-byte-wide tiles (16 rows, or a configuration above), for the
// duration of a call.
struct TileScope {
  explicit TileScope(const TileConfig& config = kTileConfig) { _tile_loadconfig(&config); }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// A 16 × 16 tile of C in memory: in place, or a scratch copy of an edge tile.
template <typename T>
struct CTile {
  T* p;           // where the tile is loaded from and stored to
  int64_t ld;     // its row stride (elements)
};

// tmm0–3 (the C block's RT × CT tiles) from memory, or zero.
template <int RT, int CT, typename T>
inline void begin_c(const CTile<T> (&c)[2][2], bool accumulate) {
  if (accumulate) {
    _tile_loadd(0, c[0][0].p, c[0][0].ld * 4);
    if constexpr (CT == 2) _tile_loadd(1, c[0][1].p, c[0][1].ld * 4);
    if constexpr (RT == 2) _tile_loadd(2, c[1][0].p, c[1][0].ld * 4);
    if constexpr (RT == 2 && CT == 2) _tile_loadd(3, c[1][1].p, c[1][1].ld * 4);
  } else {
    _tile_zero(0);
    if constexpr (CT == 2) _tile_zero(1);
    if constexpr (RT == 2) _tile_zero(2);
    if constexpr (RT == 2 && CT == 2) _tile_zero(3);
  }
}
template <int RT, int CT, typename T>
inline void store_c(const CTile<T> (&c)[2][2]) {
  _tile_stored(0, c[0][0].p, c[0][0].ld * 4);
  if constexpr (CT == 2) _tile_stored(1, c[0][1].p, c[0][1].ld * 4);
  if constexpr (RT == 2) _tile_stored(2, c[1][0].p, c[1][0].ld * 4);
  if constexpr (RT == 2 && CT == 2) _tile_stored(3, c[1][1].p, c[1][1].ld * 4);
}
// Calls f(integral_constant RT, integral_constant CT) with the block shape
// (1 or 2 row tiles × 1 or 2 column panels) as template arguments.
template <typename F>
inline void with_block_shape(bool two_rows, bool two_cols, F&& f) {
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  if (two_rows && two_cols) f(Two{}, Two{});
  else if (two_rows) f(Two{}, One{});
  else if (two_cols) f(One{}, Two{});
  else f(One{}, One{});
}

// ---- bf16 -------------------------------------------------------------------

// RT row tiles × CT column panels of C over k steps [s0, s1). A row tile's
// tiles are contiguous (a_rows = 16: 16 rows × 32 k per step, 1 KiB each).
template <int RT, int CT>
inline void block_bf16(const uint16_t* a0, const uint16_t* a1, const uint16_t* b0, const uint16_t* b1, int64_t s0,
                       int64_t s1, const CTile<float> (&c)[2][2], bool accumulate) {
  begin_c<RT, CT>(c, accumulate);
  for (int64_t s = s0; s < s1; ++s) {
    _tile_loadd(4, a0 + s * 512, 64);
    _tile_loadd(6, b0 + s * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (CT == 2) {
      _tile_loadd(7, b1 + s * 512, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (RT == 2) {
      _tile_loadd(5, a1 + s * 512, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (CT == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  store_c<RT, CT>(c);
}

// k steps per block of C: a pair of row tiles (16 KiB of A) stays in L1
// while the B panel pairs stream past it; C is stored and reloaded between
// k blocks (fp32 both ways: the sums' bits do not depend on the blocking).
constexpr int64_t kStepsPerBlock = 8;

void gemm_bf16(const Bf16GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  const int64_t steps = g.kp / 16;  // kp is a multiple of 16 (gemm.hpp: k a multiple of kBf16K)
  const int64_t mt = (g.m + 15) / 16, np = panels(g.n);
  const int rows_last = int(g.m - (mt - 1) * 16), cols_last = int(g.n - (np - 1) * kPanel);
  alignas(64) float c_edge[2][2][16 * 16];
  const TileScope tiles;
  for (int64_t s0 = 0; s0 < steps; s0 += kStepsPerBlock) {
    const int64_t s1 = std::min(steps, s0 + kStepsPerBlock);
    const bool accumulate = g.accumulate || s0 > 0;
    for (int64_t t = 0; t < mt; t += 2) {
      const int rt = t + 1 < mt ? 2 : 1;
      const uint16_t* a0 = g.a + t * steps * 512;  // row tile t: steps tiles of 16 × 32
      const uint16_t* a1 = a0 + steps * 512;
      int valid_rows[2];
      for (int i = 0; i < rt; ++i) valid_rows[i] = t + i == mt - 1 ? rows_last : 16;
      for (int64_t q = 0; q < np; q += 2) {
        const int ct = q + 1 < np ? 2 : 1;
        int valid_cols[2];
        for (int j = 0; j < ct; ++j) valid_cols[j] = q + j == np - 1 ? cols_last : int(kPanel);
        CTile<float> c[2][2];
        for (int i = 0; i < rt; ++i)
          for (int j = 0; j < ct; ++j) {
            float* direct = g.c + (t + i) * 16 * g.ldc + (q + j) * kPanel;
            if (valid_rows[i] == 16 && valid_cols[j] == 16) {
              c[i][j] = {direct, g.ldc};
              continue;
            }
            float* e = c_edge[i][j];
            std::fill(e, e + 256, 0.0f);
            if (accumulate)
              for (int r = 0; r < valid_rows[i]; ++r)
                std::copy(direct + r * g.ldc, direct + r * g.ldc + valid_cols[j], e + r * 16);
            c[i][j] = {e, 16};
          }
        const uint16_t* b0 = g.b + q * g.psb;
        const uint16_t* b1 = ct == 2 ? g.b + (q + 1) * g.psb : nullptr;
        with_block_shape(rt == 2, ct == 2, [&](auto RT, auto CT) {
          block_bf16<RT, CT>(a0, a1, b0, b1, s0, s1, c, accumulate);
        });
        for (int i = 0; i < rt; ++i)
          for (int j = 0; j < ct; ++j) {
            if (c[i][j].p != c_edge[i][j]) continue;
            float* direct = g.c + (t + i) * 16 * g.ldc + (q + j) * kPanel;
            for (int r = 0; r < valid_rows[i]; ++r)
              std::copy(c_edge[i][j] + r * 16, c_edge[i][j] + r * 16 + valid_cols[j], direct + r * g.ldc);
          }
      }
    }
  }
}

// ---- int8 -------------------------------------------------------------------

// RT row tiles × CT column panels of C over k steps [s0, s1) (64 k each),
// A rows a row stride apart.
template <int RT, int CT>
inline void block_u8(const uint8_t* a0, int64_t lda, const int8_t* b0, const int8_t* b1, int64_t s0, int64_t s1,
                     int32_t* c, int64_t ldc, bool accumulate) {
  const CTile<int32_t> ct[2][2] = {{{c, ldc}, {c + kPanel, ldc}}, {{c + 16 * ldc, ldc}, {c + 16 * ldc + kPanel, ldc}}};
  begin_c<RT, CT>(ct, accumulate);
  for (int64_t s = s0; s < s1; ++s) {
    _tile_loadd(4, a0 + s * 64, lda);
    _tile_loadd(6, b0 + s * 1024, 64);
    _tile_dpbusd(0, 4, 6);
    if constexpr (CT == 2) {
      _tile_loadd(7, b1 + s * 1024, 64);
      _tile_dpbusd(1, 4, 7);
    }
    if constexpr (RT == 2) {
      _tile_loadd(5, a0 + 16 * lda + s * 64, lda);
      _tile_dpbusd(2, 5, 6);
      if constexpr (CT == 2) _tile_dpbusd(3, 5, 7);
    }
  }
  store_c<RT, CT>(ct);
}

// int8: 8 steps are 512 k (blocks of 4: slower, measured at T = 4096).
constexpr int64_t kStepsPerBlockU8 = 8;

// C rows [r0, r0 + rows) × panels [q, q + ct): subtract zp[i]·colsum[j].
inline void subtract_zero_point(const U8GemmArgs& g, int64_t r0, int rows, int64_t q, int ct) {
  for (int r = 0; r < rows; ++r) {
    const __m512i zp = _mm512_set1_epi32(g.zp[r0 + r]);
    for (int j = 0; j < ct; ++j) {
      int32_t* c = g.c + (r0 + r) * g.ldc + (q + j) * kPanel;
      const __m512i cs = _mm512_loadu_si512(g.colsum + (q + j) * kPanel);
      _mm512_storeu_si512(c, _mm512_sub_epi32(_mm512_loadu_si512(c), _mm512_mullo_epi32(zp, cs)));
    }
  }
}

}  // namespace

// int8 rows past the last whole 16 take a tile configuration of that many
// rows when there are at least this many of them (fewer: the VNNI kernel).
// ffn bench --dtype int8, 2 threads, 512 -> 2048, against VNNI for every
// partial tile: T = 1 and 2 3-6 % slower, T = 3 +35-50 %, T = 8 +35 %,
// T = 12 +45 %, T = 72 +8 %.
constexpr int kMinPartialRows = 3;

namespace {

// Row tiles [0, mt) starting at row r0, 16 rows apart, against every panel
// pair, as gemm_bf16: k blocks of kStepsPerBlockU8, a pair of row tiles at a
// time. The tiles have the rows `config` gives them (16, or fewer for a last
// partial tile, which is then alone: mt = 1).
void u8_row_tiles(const U8GemmArgs& g, int64_t r0, int64_t mt, const TileConfig& config) {
  const int64_t steps = g.kq / 16, np = panels(g.n);
  const TileScope tiles(config);
  for (int64_t s0 = 0; s0 < steps; s0 += kStepsPerBlockU8) {
    const int64_t s1 = std::min(steps, s0 + kStepsPerBlockU8);
    for (int64_t t = 0; t < mt; t += 2) {
      const uint8_t* a0 = g.a + (r0 + t * 16) * g.lda;
      for (int64_t q = 0; q < np; q += 2) {
        const bool two_rows = t + 1 < mt, two_cols = q + 1 < np;
        const int8_t* b0 = g.b + q * g.psb;
        const int8_t* b1 = two_cols ? b0 + g.psb : nullptr;
        int32_t* c = g.c + (r0 + t * 16) * g.ldc + q * kPanel;
        with_block_shape(two_rows, two_cols, [&](auto RT, auto CT) {
          block_u8<RT, CT>(a0, g.lda, b0, b1, s0, s1, c, g.ldc, s0 > 0);
        });
      }
    }
  }
}

}  // namespace

void igemm_u8(const U8GemmArgs& g) {
  const auto& vnni = avx512::int8_kernels_vnni;
  if (g.m <= 0 || g.n <= 0) return;
  const bool whole_k = g.kq % 16 == 0;  // AMX takes k in whole steps of 64
  const int64_t m16 = whole_k ? g.m / 16 * 16 : 0, np = panels(g.n);
  const int partial = whole_k && g.m - m16 >= kMinPartialRows ? int(g.m - m16) : 0;
  if (m16 > 0) u8_row_tiles(g, 0, m16 / 16, kTileConfig);
  // The partial row tile: C and A tiles of `partial` rows (no row past m is read or written).
  if (partial > 0) u8_row_tiles(g, m16, 1, kPartialConfigs.rows[partial]);
  const int64_t on_amx = m16 + partial;  // the zero-point term once the sums are whole
  for (int64_t q = 0; on_amx > 0 && q < np; q += 2) subtract_zero_point(g, 0, int(on_amx), q, q + 1 < np ? 2 : 1);
  if (on_amx < g.m) {
    U8GemmArgs rest = g;
    rest.m = g.m - on_amx;
    rest.a = g.a + on_amx * g.lda;
    rest.zp = g.zp + on_amx;
    rest.c = g.c + on_amx * g.ldc;
    vnni.igemm_u8(rest);
  }
}

const Bf16Kernels bf16_kernels{&gemm_bf16, &avx512::to_bf16, 16, "AMX tdpbf16ps"};

inline void zero_all_tiles() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
}

// Peak loops: four independent tile products per iteration (C in tmm0–3), on
// operands already in tiles; iters / 8 iterations (a tile product is 16–32×
// the work of one vector instruction). Return the operations done.
template <bool Int8>
double tile_product_loop(int64_t iters) {
  const TileScope tiles;
  zero_all_tiles();
  const int64_t n = iters / 8;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (Int8) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  return double(n) * 4 * 16 * 16 * (Int8 ? 64 : 32) * 2;  // 16 × 16 outputs, 64 or 32 products each
}

double tdpbf16_loop(int64_t iters, float) { return tile_product_loop<false>(iters); }
double tdpbusd_loop(int64_t iters, float) { return tile_product_loop<true>(iters); }

}  // namespace ffn::nn::amx
