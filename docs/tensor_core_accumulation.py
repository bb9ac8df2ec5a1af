#!/usr/bin/python3
"""tensor_core_accumulation.py — the numbers behind docs/DESIGN.md "GEMM tiers":
how far a tensor-core dot product with f32 accumulation can drift from the
round-to-nearest f32 accumulation that the same-precision baseline P does, at
the reduction lengths of the model-shape precision suite, compared with the
k-rule's slack (2 ulp of the dtype at max|O|) and with the error P itself has
from rounding the inputs to bf16/f16.

A model, not a measurement: the exact products of a k-block (4, 16 or 32) and
the accumulator are aligned to the block's largest exponent on a 24-bit grid
with no guard bits and truncated — toward zero ('rz', the sign-magnitude
alignment measured on V100/T4/A100 by Fasi, Higham, Mikaitis and Pranesh,
"Numerical behavior of NVIDIA tensor cores", 2021) or toward -inf ('rd', a
biased worst case) — summed exactly, and the sum truncated to 24 bits. Inputs:
N(0,1) x 0.01 N(0,1) ("random signs", e.g. in_proj dW = N^T dP) and positive
x same-signed columns ("coherent signs", the worst case for truncation bias).
Dot products of length K = 768 / 2048 (d_model: d_input, in_proj dX) and
16384 (B*T at the model shapes: every weight gradient), 256 per case.

Run: /usr/bin/python3 docs/tensor_core_accumulation.py   (numpy; ~15 s on one core)
"""

import numpy as np

rng = np.random.default_rng(1)


def bf16(x):
    """Round to nearest even to bf16 (through the f32 bit pattern)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def f16(x):
    return np.asarray(x, dtype=np.float16).astype(np.float64)


def exp2floor(a):
    with np.errstate(divide="ignore"):
        return np.where(a > 0, np.floor(np.log2(np.where(a > 0, a, 1.0))), -1000.0)


def rz24(x):
    g = np.exp2(exp2floor(np.abs(x)) - 23)
    return np.where(x == 0, 0.0, np.trunc(x / g) * g)


def tc_dot(X, Y, blk, mode):
    acc = np.zeros(X.shape[0])
    for k0 in range(0, X.shape[1], blk):
        T = np.concatenate([acc[:, None], X[:, k0:k0 + blk] * Y[:, k0:k0 + blk]], axis=1)
        g = np.exp2(exp2floor(np.max(np.abs(T), axis=1)) - 23)[:, None]
        q = np.trunc(T / g) if mode == "rz" else np.floor(T / g)
        acc = rz24(np.sum(q * g, axis=1))
    return acc


def rn_dot(X, Y):
    """Sequential f32 accumulation, one round-to-nearest per step (the baseline P)."""
    acc = np.zeros(X.shape[0], dtype=np.float32)
    for k in range(X.shape[1]):
        acc = (acc.astype(np.float64) + X[:, k] * Y[:, k]).astype(np.float32)
    return acc.astype(np.float64)


def case(q, name, K, coherent, n=256):
    Xu = rng.standard_normal((n, K))
    Yu = rng.standard_normal((n, K)) * 1e-2
    if coherent:
        Xu = np.abs(Xu) * 0.5 + 0.1
        Yu = (np.abs(Yu) + 2e-3) * np.sign(rng.standard_normal((n, 1)))
    X, Y = q(Xu), q(Yu)
    O = np.sum(Xu * Yu, axis=1)       # the oracle: unrounded inputs
    exact = np.sum(X * Y, axis=1)     # the rounded inputs, summed exactly
    P = rn_dot(X, Y)
    atol = 2 * np.exp2(exp2floor(np.max(np.abs(O))) - (7 if q is bf16 else 10))
    p_err = np.max(np.abs(P - O))
    tc = {m: max(np.max(np.abs(tc_dot(X, Y, b, m) - exact)) for b in (4, 16, 32))
          for m in ("rz", "rd")}
    for m in ("rz", "rd"):
        bound = p_err + tc[m]  # max|K-O| <= max|P-O| + accumulation difference (roughly)
        print(f"{name:4s} {'coherent' if coherent else 'random  '} K={K:5d} {m}:  max|P-O| {p_err:9.3g}"
              f"  TC-vs-exact {tc[m]:9.3g} = {tc[m] / atol:6.3f} atol   "
              f"rule slack 2max|P-O|+atol {2 * p_err + atol:9.3g}  used {bound / (2 * p_err + atol):5.2f}")


def split_k_in_output_type(q, name, K=1536, n=4096):
    """What CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION prevents: a typed-output GEMM
    (e.g. x_proj: xdbl = q(U W_x), K = d_inner) whose s split-K partial sums are each
    rounded to the output type and added up in it (cuBLASLt's INPLACE scheme) instead of
    one rounding of the f32 sum (what P models). Ratio of the max errors vs the exact sum."""
    X, Y = q(rng.standard_normal((n, K))), q(rng.standard_normal((n, K)) * 0.03)
    exact = np.sum(X * Y, axis=1)
    one = np.max(np.abs(q(exact) - exact))
    out = []
    for s in (2, 4, 8):
        parts = np.sum((X * Y).reshape(n, s, K // s), axis=2)
        acc = q(parts[:, 0])
        for j in range(1, s):
            acc = q(acc + q(parts[:, j]))
        out.append(f"s={s}: {np.max(np.abs(acc - exact)) / one:4.2f}x")
    print(f"{name:4s} split-K in the output type, K={K}: max error vs one rounding: " + ", ".join(out))


if __name__ == "__main__":
    for q, name in ((bf16, "bf16"), (f16, "f16")):
        split_k_in_output_type(q, name)
    for q, name in ((bf16, "bf16"), (f16, "f16")):
        for K in (768, 2048, 16384):
            for coherent in (False, True):
                case(q, name, K, coherent)
