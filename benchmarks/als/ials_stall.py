"""iALS fits that stall at implicit's defaults, with and without the Newton polish that ends a stall, one run.

    python -m benchmarks.als.ials_stall          # ml-100k ratings ≥ 4, λ 0.01, α 1; ~8 min on one core

At λ = 0.01 the exact, Anderson-accelerated sweeps can sit on a plateau where ‖∇f‖ does not fall for thousands of
sweeps. These fits start from ``implicit``'s random start (``IALS(start="random")``): the trainer's default spectral
start is the optimum itself at these settings (every confidence 1 on 0/1 data). For each (k, seed) of ``--cases``
the fit to the identity bound ε ≤ 1e-6 runs twice, with the trainer's defaults (the polish after
``models.ials.STALL_SWEEPS`` sweeps without halving ‖∇f‖) and with sweeps only (``newton_steps=0``), both within
``--max-sweeps``. One thread (numba and BLAS). Writes benchmarks/results/als/ials_stall.json.
"""

from __future__ import annotations

import json

from threadpoolctl import threadpool_limits

from benchmarks.als import implicit_peers as pe
from benchmarks.als.common import ALS
from benchmarks.common import parser
from dxplain.datasets import resolve_dataset
from dxplain.models.ials import IALS

TOL = 1e-6


def main():
    ap = parser(__doc__)
    ap.add_argument("--cases", default="64:0,100:0,100:1", help="k:seed, comma-separated")
    ap.add_argument("--max-sweeps", type=int, default=2000)
    a = ap.parse_args()
    from numba import set_num_threads

    set_num_threads(1)
    P = pe.binarised(resolve_dataset("movielens-100k").interactions)
    rows = []
    with threadpool_limits(1):
        IALS(k=8, max_sweeps=2).fit(P)  # loads numba's compiled kernels
        for case in a.cases.split(","):
            k, seed = map(int, case.split(":"))
            for label, newton in (("with the polish", {}), ("sweeps only", {"newton_steps": 0})):
                m = IALS(
                    k=k,
                    lam=0.01,
                    alpha=1.0,
                    identity_tol=TOL,
                    seed=seed,
                    max_sweeps=a.max_sweeps,
                    start="random",
                    **newton,
                )
                m = m.fit(P)
                row = {
                    "k": k,
                    "seed": seed,
                    "fit": label,
                    "sweeps": m.info["sweeps"],
                    "newton_steps": m.info["newton_iters"],
                    "seconds": round(m.info["seconds"], 2),
                    "converged": bool(m.info["converged"]),
                    "identity_bound": max(m.info["identity_bound"].values()),
                    "grad_norm": m.grad_norm,
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = ALS / "ials_stall.json"
    out.write_text(json.dumps({"interactions": len(P), "tol": TOL, "max_sweeps": a.max_sweeps, "fits": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
