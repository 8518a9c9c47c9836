"""The Newton polish's passes over D, compiled against their numpy references, on the 5M scaling set.

    python -m benchmarks.als.newton_passes                 # the 5M scaling set, k = 34 (biased MF's k = 32 + 2)
    python -m benchmarks.als.newton_passes --size 1m

What a Newton step of the polish costs besides its Hessian products, and each product: the curvature blocks
(every row's (2/|D|) Σ F_j F_jᵀ, the preconditioner), the preconditioner's factorisation (λ added, every block
factored) and one application of it, and one Hessian-vector product; each side of each pass by
``als_fused`` (compiled, what the trainers run) and by its reference (``fused=False``: sparse products; numpy's
batched inverse on the stacked blocks). In this process, numba on every core and BLAS on one (as the trainers run,
``models.threads.numba_owns_the_cores``), at random factors (the passes' cost does not depend on the point); the
median of ``--repeats``. Results: ``benchmarks/results/als/newton_passes.json``.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from benchmarks.common import CACHE, RESULTS, parser
from benchmarks.scaling.common import SIZES, scaling_dataset
from dxplain.datasets import resolve_dataset
from dxplain.kernels import als
from dxplain.kernels.newton import block_jacobi
from dxplain.models.als.half_steps import csr_view
from dxplain.models.threads import numba_owns_the_cores


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 3)


def reference_preconditioner(A, B, lam):
    """The polish's preconditioner before ``block_jacobi`` factored blocks: stacked, shifted, inverted."""
    inv = np.linalg.inv(np.concatenate([A, B]) + lam * np.eye(A.shape[1]))
    return lambda r: np.einsum("nkl,nl->nk", inv, r.reshape(len(inv), -1)).ravel()


RUNS = (("compiled", True), ("reference", False))


def measured(views, U, V, dU, dV, n, lam, r, fused: bool, repeats: int) -> dict:
    """Seconds of each pass by the compiled kernels (``fused``) or their references."""
    als.hessian_rows(*views["user"], U, V, dU, dV, n, lam, fused=fused)

    def hessp():
        als.hessian_rows(*views["user"], U, V, dU, dV, n, lam, fused=fused)
        als.hessian_rows(*views["item"], V, U, dV, dU, n, lam, fused=fused)

    def curvature():
        return tuple(als.curvature_rows(*views[s][:2], F, n, fused=fused) for s, F in (("user", V), ("item", U)))

    A, B = curvature()

    def factor():
        return block_jacobi((A, B), lam)[0] if fused else reference_preconditioner(A, B, lam)

    apply = factor()
    return {
        "hessian_product_s": median_seconds(hessp, repeats),
        "curvature_blocks_s": median_seconds(curvature, repeats),
        "preconditioner_factor_s": median_seconds(factor, repeats),
        "preconditioner_apply_s": median_seconds(lambda: apply(r), repeats),
    }


def main():
    ap = parser(__doc__)
    ap.add_argument("--size", default="5m", choices=sorted(SIZES))
    ap.add_argument("--k", type=int, default=34)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    d = resolve_dataset(str(scaling_dataset(CACHE, SIZES[a.size]))).interactions
    rng = np.random.default_rng(0)
    U, V, dU, dV = (rng.normal(scale=0.3, size=(m, a.k)) for m in (d.n_users, d.n_items, d.n_users, d.n_items))
    y, n, lam = d.rating - d.rating.mean(), len(d), 30.0 / len(d)
    views = {side: csr_view(d, y, side) for side in ("user", "item")}
    r = rng.normal(size=(d.n_users + d.n_items) * a.k)
    with numba_owns_the_cores():
        # the compiled passes first: their first calls load numba's cache
        passes = {name: measured(views, U, V, dU, dV, n, lam, r, fused, a.repeats) for name, fused in RUNS}
    a_ref, a_new = passes["reference"], passes["compiled"]
    result = {
        "data": f"synthetic-{a.size}",
        "interactions": n,
        "users": d.n_users,
        "items": d.n_items,
        "k": a.k,
        "repeats": a.repeats,
        **passes,
        "speedup": {key: round(a_ref[key] / a_new[key], 1) for key in a_new},
        "step_fixed_s": {
            name: round(p["curvature_blocks_s"] + p["preconditioner_factor_s"], 2) for name, p in passes.items()
        },
    }
    out = RESULTS / "als" / "newton_passes.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
