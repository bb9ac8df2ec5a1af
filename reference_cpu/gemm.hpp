// gemm.hpp — the oracle's one GEMM kernel, ordered_gemm, behind the three Linear
// roles of steps.hpp (linear_fwd, linear_bwd_dx, linear_bwd_dw).
//
//   C[i, j] = seed[j] (0 without a seed) + Σ_{p = 0..P-1, ascending} A(i, p)·B(j, p)
//
// with A(i, p) = A[i·a.si + p·a.sp] and B(j, p) = B[j·b.si + p·b.sp] given as strided
// operands (the transposes of the backward roles need no copies). Each output
// element has ONE running accumulator that starts from its seed and adds the
// products in ascending p, exactly like the textbook loop
//     for i, j: c = seed ? seed[j] : 0; for p: c += A(i,p)·B(j,p); C[i·ldc + j] = c;
// so the result is bitwise that loop's, whatever the blocking, the thread count or
// the instruction set (test: validation/cpu/test_oracle_gemm.cpp, OracleGemm.*,
// which compares both paths against that loop on odd shapes, P past the p-panel).
//
// Paths: the cache-blocked, packed micro-kernel (BLIS/GotoBLAS layering) compiled
// for the baseline x86-64 ISA, the same micro-kernel compiled for AVX2 (no FMA: the
// operations and their order are unchanged), and a 4 x 16 double / 4 x 32 float
// AVX-512F tile with contraction switched off (again one rounded product and one
// rounded sum a step); the widest the CPU has is picked at run time.
// MC_ORACLE_GEMM=baseline|avx2|avx512 in the environment picks one for the whole
// process; GemmPath picks one for a single call (tests).
// The Monte Carlo arithmetic scalar (Mca) has tiles of its own, all with the same
// draws in the same order, so the same values: Baseline is the generic tile, Avx2
// a scalar tile that keeps the thread's random stream in a register, and Auto the
// tile that computes its draws 8 at a time with AVX-512F/DQ where the CPU has it
// (else the scalar register one; MC_ORACLE_GEMM=baseline: the generic tile).
// Test: OracleGemm.McaFastTileIsTheGenericTile (bitwise, every shape, both fast tiles).
// With ref::McaGemm::Moments (mca_scalar.hpp) and P >= kMcaMomentsMinTerms the Mca
// GEMM is instead computed in double with its per-operation variance and drawn once
// per output (tiles 4 x 4, AVX2+FMA 4 x 8, AVX-512 4 x 16; MC_ORACLE_GEMM=baseline
// forces the first). Test: OracleGemm.McaMomentsHaveThePerOperationLaw.
#pragma once

#include <cstdint>

namespace mc::ref {

enum class GemmPath {
  Auto,      // the widest the CPU has (Avx512, Avx2, Baseline), or MC_ORACLE_GEMM's choice
  Baseline,  // the baseline x86-64 (SSE2) micro-kernel
  Avx2,      // the AVX2 micro-kernel (throws std::runtime_error where the CPU lacks AVX2)
  Avx512,    // the AVX-512F micro-kernel, contraction off (throws where the CPU lacks it)
};

// Whether this build and CPU have the AVX2 / AVX-512 path.
bool gemm_avx2_available();
bool gemm_avx512_available();
// The path GemmPath::Auto takes in this process.
GemmPath gemm_auto_path();
const char* to_string(GemmPath p);

// A strided operand over (row, p): X(r, p) = base[r·si + p·sp].
template <class S>
struct GemmOperand {
  const S* base;
  int64_t si, sp;
};

// C [I, J] (row stride ldc) = seed[j] + Σ_p A(i, p)·B(j, p), p ascending (see above).
// Parallel (OpenMP) over independent output tiles. S: float, double, Mca.
template <class S>
void ordered_gemm(int64_t I, int64_t J, int64_t P, const GemmOperand<S>& A,
                  const GemmOperand<S>& B, const S* seed, S* C, int64_t ldc,
                  GemmPath path = GemmPath::Auto);

}  // namespace mc::ref
