// gemm.cpp — the oracle's ordered GEMM (gemm.hpp): cache-blocked, packed, and
// BITWISE the textbook loop. Blocking only decides which thread computes which
// output tile and when; the reduction is cut into consecutive p-panels whose
// partial sums are stored in S and reloaded (exact), never into independent
// partial sums. So the bits depend on neither OMP_NUM_THREADS nor the block sizes,
// and the block sizes may be tuned (or chosen per shape) freely. Loop order and
// packing follow the BLIS/GotoBLAS layering: panels of A and B are packed into
// contiguous micro-panels so that the MR x NR register tile (acc) streams
// through L1. Checked by validation/cpu/test_oracle_gemm.cpp (OracleGemm.*).
#include "reference_cpu/gemm.hpp"

#include <omp.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/steps.hpp"

namespace mc::ref {

namespace {

bool par(int64_t ops) { return ops >= parallel_min_work(); }

// Register tile (MR x NR accumulators) per scalar for the baseline x86-64
// ISA (SSE2): 8 vector registers of accumulators for double (4x4) and float
// (4x8); 4x4 for the Mca scalar.
template <class S>
struct GemmTile {
  static constexpr int MR = 4, NR = 4;
};
template <>
struct GemmTile<float> {
  static constexpr int MR = 4, NR = 8;
};

template <class S>
S at(const GemmOperand<S>& op, int64_t i, int64_t p) {
  return op.base[i * op.si + p * op.sp];
}

// acc[MR][NR] (loaded from c) += Σ_{p < kc, ascending} a[p][0..MR) ⊗ b[p][0..NR),
// then the mr x nr valid part is stored back to c (row stride ldc).
// ap: [kc][MR] packed A micro-panel; bp: [kc][NR] packed B micro-panel.
template <class S, int MR, int NR>
void gemm_micro_tile(int64_t kc, const S* __restrict ap, const S* __restrict bp, S* __restrict c,
                     int64_t ldc, int mr, int nr) {
  S acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = (i < mr && j < nr) ? c[i * ldc + j] : S(0);
  for (int64_t p = 0; p < kc; ++p) {
    const S* a = ap + p * MR;
    const S* b = bp + p * NR;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i] * b[j];
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = acc[i][j];
}

// The same tile for the Monte Carlo arithmetic scalar, with this thread's random
// stream and unit held in registers for the tile instead of read and written
// through thread-local storage at every operation: the same operations in the same
// order, so the same draws and the same values as gemm_micro_tile<Mca> (test:
// OracleGemm.McaFastTileIsTheGenericTile). The fallback where the AVX-512 tile below
// cannot run; it made a d_model 768 Monte Carlo run only about 10 % faster (the
// draws themselves, two per multiply-add, are the cost).
template <int MR, int NR>
void gemm_micro_tile_mca(int64_t kc, const Mca* __restrict ap, const Mca* __restrict bp,
                         Mca* __restrict c, int64_t ldc, int mr, int nr) {
  double acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = (i < mr && j < nr) ? c[i * ldc + j].v : 0.0;
  uint64_t st = Mca::state();
  const double u = Mca::unit();
  for (int64_t p = 0; p < kc; ++p) {
    const Mca* a = ap + p * MR;
    const Mca* b = bp + p * NR;
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        const double prod = (a[i].v * b[j].v) * (1 + Mca::uniform_from(st, u));  // a·b
        acc[i][j] = (acc[i][j] + prod) * (1 + Mca::uniform_from(st, u));         // acc + a·b
      }
  }
  Mca::state() = st;
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = Mca::raw(acc[i][j]);
}

// Packs rows [i0, i0+mc) x p in [p0, p0+kc) of op into [ceil(mc/R)][kc][R]
// micro-panels (rows past mc padded with 0; their results are never stored).
template <class S, int R>
void gemm_pack(const GemmOperand<S>& op, int64_t i0, int64_t mc, int64_t p0, int64_t kc, S* dst) {
  for (int64_t ir = 0; ir < mc; ir += R)
    for (int64_t p = 0; p < kc; ++p)
      for (int i = 0; i < R; ++i) *dst++ = (ir + i < mc) ? at(op, i0 + ir + i, p0 + p) : S(0);
}

template <class S>
using MicroTileFn = void (*)(int64_t, const S*, const S*, S*, int64_t, int, int);

// What ordered_gemm_tiles does with one output tile, per thread: begin() once, then
// micro() for every micro-panel pair of every p-panel (ascending), then finish().
// PlainTile: the micro tile alone (every exact path, and the per-operation Mca tiles).
template <class S>
struct PlainTile {
  MicroTileFn<S> fn;
  void begin(int64_t, int64_t) {}
  void micro(int64_t kc, const S* ap, const S* bp, S* c, int64_t ldc, int64_t /*ir*/,
             int64_t /*jr*/, int mr, int nr) {
    fn(kc, ap, bp, c, ldc, mr, nr);
  }
  void finish(S*, int64_t, int64_t, int64_t) {}
};

// Parallel over independent output tiles; each tile is seeded by its thread.
// make_tile() is called once per thread, inside the parallel region (a tile kernel
// may hold per-thread scratch).
template <class S, int MR, int NR, class MakeTile>
void ordered_gemm_tiles(int64_t I, int64_t J, int64_t P, const GemmOperand<S>& A,
                        const GemmOperand<S>& B, const S* seed, S* C, int64_t ldc,
                        MakeTile make_tile) {
  constexpr int64_t KC = 256;  // p-panel: MC x KC of A (512 KB double) stays in L2
  // Output tiles MC x NC; halved (bits unaffected) until there are enough
  // tiles to keep every thread busy on thin shapes.
  int64_t MC = 256, NC = 512;
  const int64_t want = 4 * int64_t(omp_get_max_threads());
  auto tiles = [&] { return ((I + MC - 1) / MC) * ((J + NC - 1) / NC); };
  while (tiles() < want && (MC > 4 * MR || NC > 4 * NR)) {
    if (NC > 4 * NR && (NC >= MC || MC <= 4 * MR)) NC /= 2; else MC /= 2;
  }
  const int64_t ni = (I + MC - 1) / MC, nj = (J + NC - 1) / NC;
#pragma omp parallel if (par(I * J * P))
  {
    std::vector<S> Ap(size_t(((MC + MR - 1) / MR) * MR * KC));
    std::vector<S> Bp(size_t(((NC + NR - 1) / NR) * NR * KC));
    auto tile_kernel = make_tile(MC, NC);
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < ni * nj; ++tile) {
      const int64_t i0 = (tile / nj) * MC, j0 = (tile % nj) * NC;
      const int64_t mc = std::min(MC, I - i0), nc = std::min(NC, J - j0);
      for (int64_t i = i0; i < i0 + mc; ++i)
        for (int64_t j = j0; j < j0 + nc; ++j) C[i * ldc + j] = seed ? seed[j] : S(0);
      tile_kernel.begin(mc, nc);
      for (int64_t p0 = 0; p0 < P; p0 += KC) {  // ascending p-panels: the order of the sum
        const int64_t kc = std::min(KC, P - p0);
        gemm_pack<S, MR>(A, i0, mc, p0, kc, Ap.data());
        gemm_pack<S, NR>(B, j0, nc, p0, kc, Bp.data());
        for (int64_t jr = 0; jr < nc; jr += NR)
          for (int64_t ir = 0; ir < mc; ir += MR)
            tile_kernel.micro(kc, Ap.data() + (ir / MR) * kc * MR, Bp.data() + (jr / NR) * kc * NR,
                              C + (i0 + ir) * ldc + j0 + jr, ldc, ir, jr,
                              int(std::min<int64_t>(MR, mc - ir)),
                              int(std::min<int64_t>(NR, nc - jr)));
      }
      tile_kernel.finish(C + i0 * ldc + j0, ldc, mc, nc);
    }
  }
}

template <class S, int MR, int NR>
void ordered_gemm_tiles(int64_t I, int64_t J, int64_t P, const GemmOperand<S>& A,
                        const GemmOperand<S>& B, const S* seed, S* C, int64_t ldc,
                        MicroTileFn<S> micro) {
  ordered_gemm_tiles<S, MR, NR>(I, J, P, A, B, seed, C, ldc,
                                [micro](int64_t, int64_t) { return PlainTile<S>{micro}; });
}

// ---- The Monte Carlo GEMM by its moments (McaGemm::Moments, mca_scalar.hpp) ----
//
// c[i][j] (loaded from c, the seed or the previous p-panels' sum) += Σ_p a[p][i]·b[p][j],
// and v[i][j] += Σ_p ((a[p][i]·b[p][j])² + s²) with s the running sum after the term:
// the per-operation draws' variance over (u²/3). ap: [kc][MR], bp: [kc][NR] packed
// micro-panels of the Mca values (one double each); v: the tile's variance scratch.
template <int MR, int NR>
inline void moments_micro_tile(int64_t kc, const double* __restrict ap,
                               const double* __restrict bp, double* __restrict c, int64_t ldc,
                               double* __restrict v, int64_t ldv, int mr, int nr) {
  double acc[MR][NR], var[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      const bool in = i < mr && j < nr;
      acc[i][j] = in ? c[i * ldc + j] : 0.0;
      var[i][j] = in ? v[i * ldv + j] : 0.0;
    }
  for (int64_t p = 0; p < kc; ++p) {
    const double* a = ap + p * MR;
    const double* b = bp + p * NR;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 16
      for (int j = 0; j < NR; ++j) {
        const double prod = a[i] * b[j];
        acc[i][j] += prod;
        var[i][j] += prod * prod + acc[i][j] * acc[i][j];
      }
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      c[i * ldc + j] = acc[i][j];
      v[i * ldv + j] = var[i][j];
    }
}

using MomentsMicroFn = void (*)(int64_t, const double*, const double*, double*, int64_t, double*,
                                int64_t, int, int);

void moments_micro_baseline(int64_t kc, const double* ap, const double* bp, double* c,
                            int64_t ldc, double* v, int64_t ldv, int mr, int nr) {
  moments_micro_tile<4, 4>(kc, ap, bp, c, ldc, v, ldv, mr, nr);
}

// The per-thread tile kernel: the variance scratch of one output tile, and after the
// tile's last p-panel one Gaussian draw per output from this thread's stream (row by
// row, the two draws of a Box–Muller pair to consecutive outputs), scaled by
// u·sqrt(v/3).
struct MomentsTile {
  MomentsMicroFn fn;
  int64_t ldv;
  std::vector<double> var;  // [MC][NC]
  void begin(int64_t mc, int64_t nc) {
    for (int64_t i = 0; i < mc; ++i) std::fill_n(var.data() + i * ldv, nc, 0.0);
  }
  void micro(int64_t kc, const Mca* ap, const Mca* bp, Mca* c, int64_t ldc, int64_t ir,
             int64_t jr, int mr, int nr) {
    static_assert(sizeof(Mca) == sizeof(double), "Mca is one double");
    fn(kc, reinterpret_cast<const double*>(ap), reinterpret_cast<const double*>(bp),
       reinterpret_cast<double*>(c), ldc, var.data() + ir * ldv + jr, ldv, mr, nr);
  }
  void finish(Mca* c, int64_t ldc, int64_t mc, int64_t nc) {
    const double scale = Mca::unit() / std::sqrt(3.0);
    uint64_t st = Mca::state();
    double g[2];
    int left = 0;  // draws of the current pair not yet used
    for (int64_t i = 0; i < mc; ++i)
      for (int64_t j = 0; j < nc; ++j) {
        if (left == 0) {
          Mca::gaussian_pair_from(st, g[0], g[1]);
          left = 2;
        }
        const double sd = scale * std::sqrt(var[size_t(i * ldv + j)]);
        c[i * ldc + j] = Mca::raw(c[i * ldc + j].v + sd * g[2 - left--]);
      }
    Mca::state() = st;
  }
};

template <int MR, int NR>
void ordered_gemm_mca_moments(int64_t I, int64_t J, int64_t P, const GemmOperand<Mca>& A,
                              const GemmOperand<Mca>& B, const Mca* seed, Mca* C, int64_t ldc,
                              MomentsMicroFn fn) {
  ordered_gemm_tiles<Mca, MR, NR>(I, J, P, A, B, seed, C, ldc, [fn](int64_t MC, int64_t NC) {
    return MomentsTile{fn, NC, std::vector<double>(size_t(MC * NC))};
  });
}

// The same micro tile compiled for AVX2 (twice the vector width, so a 4x8
// double / 4x16 float tile). AVX2 has no fused multiply-add (FMA is a separate
// ISA extension that is NOT enabled here), so the operations and their order,
// hence the bits, equal the baseline path's.
#if defined(__x86_64__) && defined(__GNUC__)
#define MC_ORACLE_GEMM_AVX2 1
__attribute__((target("avx2"))) void micro_tile_avx2(int64_t kc, const double* ap,
                                                     const double* bp, double* c, int64_t ldc,
                                                     int mr, int nr) {
  gemm_micro_tile<double, 4, 8>(kc, ap, bp, c, ldc, mr, nr);
}
__attribute__((target("avx2"))) void micro_tile_avx2(int64_t kc, const float* ap,
                                                     const float* bp, float* c, int64_t ldc,
                                                     int mr, int nr) {
  gemm_micro_tile<float, 4, 16>(kc, ap, bp, c, ldc, mr, nr);
}

// The exact tile on AVX-512F: 4 x 16 double (two zmm a row), 4 x 32 float. AVX-512F
// has fused multiply-adds, so contraction is switched off for these functions: each
// step is one rounded product and one rounded sum, the textbook loop's bits.
#define MC_EXACT_TILE_BODY(S, VEC, W, LOADU, STORE, LOAD, SET1, MUL, ADD)                   \
  constexpr int MR = 4, NR = 2 * W;                                                       \
  alignas(64) S cs[MR][NR];                                                               \
  for (int i = 0; i < MR; ++i)                                                            \
    for (int j = 0; j < NR; ++j) cs[i][j] = (i < mr && j < nr) ? c[i * ldc + j] : S(0);   \
  VEC acc[MR][2];                                                                         \
  _Pragma("GCC unroll 4") for (int i = 0; i < MR; ++i) {                                  \
    acc[i][0] = LOAD(&cs[i][0]);                                                          \
    acc[i][1] = LOAD(&cs[i][W]);                                                          \
  }                                                                                       \
  for (int64_t p = 0; p < kc; ++p) {                                                      \
    const VEC b0 = LOADU(bp + p * NR), b1 = LOADU(bp + p * NR + W);                       \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; ++i) {                                \
      const VEC a = SET1(ap[p * MR + i]);                                                 \
      acc[i][0] = ADD(acc[i][0], MUL(a, b0));                                             \
      acc[i][1] = ADD(acc[i][1], MUL(a, b1));                                             \
    }                                                                                     \
  }                                                                                       \
  _Pragma("GCC unroll 4") for (int i = 0; i < MR; ++i) {                                  \
    STORE(&cs[i][0], acc[i][0]);                                                          \
    STORE(&cs[i][W], acc[i][1]);                                                          \
  }                                                                                       \
  for (int i = 0; i < mr; ++i)                                                            \
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = cs[i][j];

__attribute__((target("avx512f"), optimize("fp-contract=off"))) void micro_tile_avx512(
    int64_t kc, const double* ap, const double* bp, double* c, int64_t ldc, int mr, int nr) {
  MC_EXACT_TILE_BODY(double, __m512d, 8, _mm512_loadu_pd, _mm512_store_pd, _mm512_load_pd,
                     _mm512_set1_pd, _mm512_mul_pd, _mm512_add_pd)
}
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void micro_tile_avx512(
    int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int mr, int nr) {
  MC_EXACT_TILE_BODY(float, __m512, 16, _mm512_loadu_ps, _mm512_store_ps, _mm512_load_ps,
                     _mm512_set1_ps, _mm512_mul_ps, _mm512_add_ps)
}
#undef MC_EXACT_TILE_BODY

// The moments tile (no bitwise contract: its values are a draw) with fused
// multiply-adds: 4 x 8 on AVX2 (two ymm a row), 4 x 16 on AVX-512 (two zmm a row).
// The valid mr x nr part goes through an aligned staging copy; the packed panels
// are padded to the full tile, so every lane computes (the padding's lanes are
// discarded).
#define MC_MOMENTS_TILE_BODY(VEC, W, LOADU, STORE, LOAD, SET1, MUL, ADD, FMA)              \
  constexpr int MR = 4, NR = 2 * W;                                                       \
  alignas(64) double cs[MR][NR], vs[MR][NR];                                              \
  for (int i = 0; i < MR; ++i)                                                            \
    for (int j = 0; j < NR; ++j) {                                                        \
      const bool in = i < mr && j < nr;                                                   \
      cs[i][j] = in ? c[i * ldc + j] : 0.0;                                               \
      vs[i][j] = in ? v[i * ldv + j] : 0.0;                                               \
    }                                                                                     \
  VEC acc[MR][2], var[MR][2];                                                             \
  _Pragma("GCC unroll 4") for (int i = 0; i < MR; ++i)                                    \
    for (int h = 0; h < 2; ++h) {                                                         \
      acc[i][h] = LOAD(&cs[i][h * W]);                                                    \
      var[i][h] = LOAD(&vs[i][h * W]);                                                    \
    }                                                                                     \
  for (int64_t p = 0; p < kc; ++p) {                                                      \
    const VEC b0 = LOADU(bp + p * NR), b1 = LOADU(bp + p * NR + W);                       \
    _Pragma("GCC unroll 4") for (int i = 0; i < MR; ++i) {                                \
      const VEC a = SET1(ap[p * MR + i]);                                                 \
      const VEC q0 = MUL(a, b0), q1 = MUL(a, b1);                                         \
      acc[i][0] = ADD(acc[i][0], q0);                                                     \
      acc[i][1] = ADD(acc[i][1], q1);                                                     \
      var[i][0] = FMA(acc[i][0], acc[i][0], FMA(q0, q0, var[i][0]));                      \
      var[i][1] = FMA(acc[i][1], acc[i][1], FMA(q1, q1, var[i][1]));                      \
    }                                                                                     \
  }                                                                                       \
  _Pragma("GCC unroll 4") for (int i = 0; i < MR; ++i)                                    \
    for (int h = 0; h < 2; ++h) {                                                         \
      STORE(&cs[i][h * W], acc[i][h]);                                                    \
      STORE(&vs[i][h * W], var[i][h]);                                                    \
    }                                                                                     \
  for (int i = 0; i < mr; ++i)                                                            \
    for (int j = 0; j < nr; ++j) {                                                        \
      c[i * ldc + j] = cs[i][j];                                                          \
      v[i * ldv + j] = vs[i][j];                                                          \
    }

__attribute__((target("avx2,fma"))) void moments_micro_avx2(int64_t kc, const double* ap,
                                                            const double* bp, double* c,
                                                            int64_t ldc, double* v, int64_t ldv,
                                                            int mr, int nr) {
  MC_MOMENTS_TILE_BODY(__m256d, 4, _mm256_loadu_pd, _mm256_store_pd, _mm256_load_pd,
                       _mm256_set1_pd, _mm256_mul_pd, _mm256_add_pd, _mm256_fmadd_pd)
}
__attribute__((target("avx512f,fma"))) void moments_micro_avx512(int64_t kc, const double* ap,
                                                                 const double* bp, double* c,
                                                                 int64_t ldc, double* v,
                                                                 int64_t ldv, int mr, int nr) {
  MC_MOMENTS_TILE_BODY(__m512d, 8, _mm512_loadu_pd, _mm512_store_pd, _mm512_load_pd,
                       _mm512_set1_pd, _mm512_mul_pd, _mm512_add_pd, _mm512_fmadd_pd)
}
#undef MC_MOMENTS_TILE_BODY
#endif

#ifdef MC_ORACLE_GEMM_AVX2
// (GCC 12 reports its own AVX-512 shift intrinsics' undefined pass-through operand as
// maybe-uninitialized here; the unmasked shifts never read it.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The Monte Carlo tile with its random draws computed 8 at a time (AVX-512F/DQ:
// 64-bit lanes, multiplies and conversions). Draw k of a step is the stream's
// state + (k+1)·γ through the same splitmix64 finaliser, and step p's 32 draws
// for the 4 x 4 tile are, in order, (product, sum) for (i, j) row by row: row i
// owns draws 8i .. 8i+7. Every floating-point operation is the scalar tile's, in
// the same order, and nothing is contracted (fp-contract=off), so the values are
// bitwise gemm_micro_tile<Mca>'s (OracleGemm.McaFastTileIsTheGenericTile).
__attribute__((target("avx512f,avx512dq,avx2"), optimize("fp-contract=off"))) void
micro_tile_mca_avx512(int64_t kc, const Mca* __restrict ap, const Mca* __restrict bp,
                      Mca* __restrict c, int64_t ldc, int mr, int nr) {
  static_assert(sizeof(Mca) == sizeof(double), "Mca is one double");
  constexpr uint64_t kGamma = Mca::kGamma;
  const double* a = reinterpret_cast<const double*>(ap);
  const double* b = reinterpret_cast<const double*>(bp);
  alignas(32) double init[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) init[i][j] = (i < mr && j < nr) ? c[i * ldc + j].v : 0.0;
  __m256d acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = _mm256_load_pd(init[i]);
  __m512i step_of[4];  // (8i + k + 1)·γ, the offsets of row i's draws from the state
  for (int i = 0; i < 4; ++i) {
    alignas(64) uint64_t o[8];
    for (int k = 0; k < 8; ++k) o[k] = uint64_t(8 * i + k + 1) * kGamma;
    step_of[i] = _mm512_load_si512(o);
  }
  const __m512i c1 = _mm512_set1_epi64(int64_t(Mca::kMix1));
  const __m512i c2 = _mm512_set1_epi64(int64_t(Mca::kMix2));
  const __m512d two53 = _mm512_set1_pd(0x1p-53), two = _mm512_set1_pd(2.0),
                one = _mm512_set1_pd(1.0), half = _mm512_set1_pd(Mca::unit());
  const __m512i split = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);  // products low, sums high
  uint64_t st = Mca::state();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512i base = _mm512_set1_epi64(int64_t(st));
    const __m256d bv = _mm256_loadu_pd(b + p * 4);
    for (int i = 0; i < 4; ++i) {
      __m512i z = _mm512_add_epi64(base, step_of[i]);
      z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), c1);
      z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), c2);
      z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
      const __m512d r = _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(z, 11)), two53);
      const __m512d f = _mm512_add_pd(one, _mm512_mul_pd(half, _mm512_sub_pd(_mm512_mul_pd(two, r), one)));
      const __m512d fs = _mm512_permutexvar_pd(split, f);
      const __m256d pf = _mm512_castpd512_pd256(fs), sf = _mm512_extractf64x4_pd(fs, 1);
      const __m256d prod = _mm256_mul_pd(_mm256_mul_pd(_mm256_set1_pd(a[p * 4 + i]), bv), pf);
      acc[i] = _mm256_mul_pd(_mm256_add_pd(acc[i], prod), sf);
    }
    st += 32 * kGamma;
  }
  Mca::state() = st;
  for (int i = 0; i < 4; ++i) _mm256_store_pd(init[i], acc[i]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = Mca::raw(init[i][j]);
}
#pragma GCC diagnostic pop

#endif

// The instruction-set extensions the tiles use, read once.
struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512dq = false;
};
const CpuFeatures& cpu() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
#ifdef MC_ORACLE_GEMM_AVX2
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2") != 0;
    c.fma = __builtin_cpu_supports("fma") != 0;
    c.avx512f = __builtin_cpu_supports("avx512f") != 0;
    c.avx512dq = __builtin_cpu_supports("avx512dq") != 0;
#endif
    return c;
  }();
  return f;
}
bool cpu_has_avx2() { return cpu().avx2; }
bool cpu_has_avx512f() { return cpu().avx512f; }
bool cpu_has_avx512_dq() { return cpu().avx512f && cpu().avx512dq; }
bool cpu_has_avx2_fma() { return cpu().avx2 && cpu().fma; }
bool cpu_has_avx512_fma() { return cpu().avx512f && cpu().fma; }

// ordered_gemm<Mca> in McaGemm::Moments (path resolved from Auto by the caller):
// Baseline the 4 x 4 tile of the baseline ISA, Avx2 the 4 x 8 AVX2+FMA one, Avx512
// the 4 x 16 one.
void ordered_gemm_mca_by_moments(int64_t I, int64_t J, int64_t P, const GemmOperand<Mca>& A,
                                 const GemmOperand<Mca>& B, const Mca* seed, Mca* C,
                                 int64_t ldc, GemmPath path) {
  if ((path == GemmPath::Avx512 && !cpu_has_avx512_fma()) ||
      (path == GemmPath::Avx2 && !cpu_has_avx2_fma()))
    throw std::runtime_error(std::string("ordered_gemm: the ") + to_string(path) +
                             " path of the Monte Carlo moments tile needs " + to_string(path) +
                             " and FMA, which this CPU lacks");
#ifdef MC_ORACLE_GEMM_AVX2
  if (path == GemmPath::Avx512)
    return ordered_gemm_mca_moments<4, 16>(I, J, P, A, B, seed, C, ldc, moments_micro_avx512);
  if (path == GemmPath::Avx2)
    return ordered_gemm_mca_moments<4, 8>(I, J, P, A, B, seed, C, ldc, moments_micro_avx2);
#endif
  ordered_gemm_mca_moments<4, 4>(I, J, P, A, B, seed, C, ldc, moments_micro_baseline);
}

}  // namespace

McaGemm& mca_gemm_mode() {
  static McaGemm m = [] {
    const char* e = std::getenv("MC_ORACLE_MCA_GEMM");
    if (!e || !*e || std::string(e) == "per-operation") return McaGemm::PerOperation;
    if (std::string(e) == "moments") return McaGemm::Moments;
    throw std::runtime_error(std::string("MC_ORACLE_MCA_GEMM='") + e +
                             "': expected 'per-operation' or 'moments'");
  }();
  return m;
}

bool gemm_avx2_available() { return cpu_has_avx2(); }
bool gemm_avx512_available() { return cpu_has_avx512f(); }

GemmPath gemm_auto_path() {
  static const GemmPath p = [] {
    const char* e = std::getenv("MC_ORACLE_GEMM");
    const std::string want = e ? e : "";
    const GemmPath widest = cpu_has_avx512f() ? GemmPath::Avx512
                            : cpu_has_avx2()  ? GemmPath::Avx2
                                              : GemmPath::Baseline;
    if (want.empty() || want == "avx512") return widest;
    if (want == "avx2") return cpu_has_avx2() ? GemmPath::Avx2 : GemmPath::Baseline;
    if (want == "baseline") return GemmPath::Baseline;
    throw std::runtime_error("MC_ORACLE_GEMM='" + want +
                             "': expected 'baseline', 'avx2' or 'avx512' (or unset: the widest "
                             "this CPU has)");
  }();
  return p;
}

const char* to_string(GemmPath p) {
  switch (p) {
    case GemmPath::Auto: return "auto";
    case GemmPath::Baseline: return "baseline";
    case GemmPath::Avx2: return "avx2";
    case GemmPath::Avx512: return "avx512";
  }
  return "?";
}

template <class S>
void ordered_gemm(int64_t I, int64_t J, int64_t P, const GemmOperand<S>& A,
                  const GemmOperand<S>& B, const S* seed, S* C, int64_t ldc, GemmPath path) {
  if constexpr (std::is_same_v<S, Mca>) {
    if (mca_gemm_mode() == McaGemm::Moments && P >= kMcaMomentsMinTerms) {
      if (path == GemmPath::Auto) path = gemm_auto_path();  // the widest, or MC_ORACLE_GEMM's
      return ordered_gemm_mca_by_moments(I, J, P, A, B, seed, C, ldc, path);
    }
  }
  const bool automatic = path == GemmPath::Auto;
  if (path == GemmPath::Auto) path = gemm_auto_path();
  if (path == GemmPath::Avx512) {
    if (!cpu_has_avx512f())
      throw std::runtime_error(
          "ordered_gemm: the AVX-512 path was asked for on a CPU without AVX-512F");
#ifdef MC_ORACLE_GEMM_AVX2
    if constexpr (std::is_same_v<S, double>)
      return ordered_gemm_tiles<S, 4, 16>(I, J, P, A, B, seed, C, ldc, micro_tile_avx512);
    else if constexpr (std::is_same_v<S, float>)
      return ordered_gemm_tiles<S, 4, 32>(I, J, P, A, B, seed, C, ldc, micro_tile_avx512);
#endif
    // Mca: the per-operation tiles below (Avx512 counts as a fast path)
  }
  if (path == GemmPath::Avx2) {
    if (!cpu_has_avx2())
      throw std::runtime_error("ordered_gemm: the AVX2 path was asked for on a CPU without AVX2");
#ifdef MC_ORACLE_GEMM_AVX2
    if constexpr (std::is_same_v<S, double>)
      return ordered_gemm_tiles<S, 4, 8>(I, J, P, A, B, seed, C, ldc, micro_tile_avx2);
    else if constexpr (std::is_same_v<S, float>)
      return ordered_gemm_tiles<S, 4, 16>(I, J, P, A, B, seed, C, ldc, micro_tile_avx2);
#endif
    // other scalars (Mca) have no vector path: the baseline tile below
  }
  constexpr int MR = GemmTile<S>::MR, NR = GemmTile<S>::NR;
  if constexpr (std::is_same_v<S, Mca>) {  // the fast tiles (the same values)
    static_assert(MR == 4 && NR == 4, "the Mca tiles are 4 x 4");
#ifdef MC_ORACLE_GEMM_AVX2
    if (automatic && path != GemmPath::Baseline && cpu_has_avx512_dq())
      return ordered_gemm_tiles<S, MR, NR>(I, J, P, A, B, seed, C, ldc, micro_tile_mca_avx512);
#endif
    if (path != GemmPath::Baseline)
      return ordered_gemm_tiles<S, MR, NR>(I, J, P, A, B, seed, C, ldc,
                                           gemm_micro_tile_mca<MR, NR>);
  }
  ordered_gemm_tiles<S, MR, NR>(I, J, P, A, B, seed, C, ldc, gemm_micro_tile<S, MR, NR>);
}

template void ordered_gemm<float>(int64_t, int64_t, int64_t, const GemmOperand<float>&,
                                  const GemmOperand<float>&, const float*, float*, int64_t,
                                  GemmPath);
template void ordered_gemm<double>(int64_t, int64_t, int64_t, const GemmOperand<double>&,
                                   const GemmOperand<double>&, const double*, double*, int64_t,
                                   GemmPath);
template void ordered_gemm<Mca>(int64_t, int64_t, int64_t, const GemmOperand<Mca>&,
                                const GemmOperand<Mca>&, const Mca*, Mca*, int64_t, GemmPath);

}  // namespace mc::ref
