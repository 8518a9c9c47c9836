"""SBQ at scale: n = 10⁶ candidates, m = 100 prototypes, on this machine; and GreeDi against greedy.

    python -m benchmarks.prototypes.scale             # both cases below, ~10 min on 2 cores
    python -m benchmarks.prototypes.scale --n 200000  # smaller

Case "logistic": a logistic regression on n synthetic samples with p = 127 features (+ intercept), so the
Fisher kernel has rank 128 ≥ m; targets are 10,000 held-out samples; F is the empirical Fisher.
Case "mf": ALS-MF (k = 32, ALS sweeps only) on n synthetic interactions with Zipf degrees; targets are the top-10
lists of 1,000 users; F block-diagonal per user and item; Φ is sparse (2k entries per row).

Reported per case: seconds per greedy step; kernel evaluations per second (n per step); the step's
arithmetic rate against this machine's dense matmul (GEMM) rate and a streaming read of Φ, measured in
the same run; peak RSS; objective reduction of GreeDi (2, 4, 8 parts), stochastic greedy and matching
pursuit relative to greedy. Writes benchmarks/results/prototypes/scale.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.common import RESULTS, parser, peak_rss_gib
from dxplain.kernels import fisher as F
from dxplain.kernels.sbq import greedi, greedy, matching_pursuit, mean_embedding, stochastic_greedy
from dxplain.models.logistic import LogisticRegression


def gemm_gflops(n=2048, reps=5) -> float:
    a = np.random.default_rng(0).normal(size=(n, n))
    a @ a
    t = time.perf_counter()
    for _ in range(reps):
        a @ a
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9


def read_gbs(Phi) -> float:
    """Streaming-read rate of Φ (GB/s): a matrix-vector product can go no faster than reading Φ once."""
    data = Phi.data if sp.issparse(Phi) else Phi
    data.sum()
    t = time.perf_counter()
    for _ in range(3):
        data.sum()
    return 3 * data.nbytes / (time.perf_counter() - t) / 1e9


def logistic_case(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    p = 127
    A = rng.normal(size=(p, p)) / np.sqrt(p)
    X = (rng.normal(size=(n + 10_000, p)) @ A).astype(np.float64)
    w = rng.normal(size=p) * 2 / np.sqrt(p)
    y = (rng.random(n + 10_000) < 1 / (1 + np.exp(-(X @ w)))).astype(int)
    t = time.perf_counter()
    model = LogisticRegression(1e-4).fit(X[:n], y[:n])
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    Phi, Phi_T = F.logistic_embedding(X[:n], y[:n], model.theta, X[n:], y[n:], "empirical")
    return Phi, Phi_T, {"fit_seconds": fit_s, "embed_seconds": time.perf_counter() - t, "p": p + 1}


def mf_case(n: int, seed: int = 0):
    import tempfile

    from dxplain.datasets.synthetic import generate
    from dxplain.explain.prototypes import mf_fisher_embedding
    from dxplain.explain.targets import recommend
    from dxplain.io.dataset_folders import read_dataset
    from dxplain.models.als.trainer import ALSMF

    folder = Path(tempfile.mkdtemp()) / "synthetic"
    generate(folder, n, seed=seed)
    data = read_dataset(folder).interactions
    t = time.perf_counter()
    model = ALSMF(k=32, seed=seed, newton_steps=0).fit(data)  # a Fisher kernel needs no stationary point
    fit_s = time.perf_counter() - t
    users = np.random.default_rng(seed).choice(data.n_users, 1000, replace=False)
    T = recommend(model.U, model.V, data, users, 10)
    t = time.perf_counter()
    Phi, Phi_T = mf_fisher_embedding(model, data, T)
    return (
        Phi,
        Phi_T,
        {
            "fit_seconds": fit_s,
            "embed_seconds": time.perf_counter() - t,
            "users": data.n_users,
            "items": data.n_items,
            "p": Phi.shape[1],
            "targets": len(T),
        },
    )


def run(case: str, n: int, m: int, gemm: float) -> dict:
    Phi, Phi_T, info = (logistic_case if case == "logistic" else mf_case)(n)
    mu = mean_embedding(Phi_T)
    out = {"case": case, "n": Phi.shape[0], "m": m, **info}
    t = time.perf_counter()
    sel = greedy(Phi, mu, m)
    secs = time.perf_counter() - t
    steps = len(sel.index)
    nnz = Phi.nnz if sp.issparse(Phi) else Phi.size
    # Per step: one kernel column (2·nnz(Φ) flops when dense; a sparse MF column touches only the rows
    # sharing the user or item, negligible) plus the new row of L⁻¹k_S· (2·n·t flops, t = 0…m−1).
    flops = (0 if sp.issparse(Phi) else steps * 2 * nnz) + 2 * Phi.shape[0] * steps * (steps - 1) / 2
    out.update(
        {
            "greedy_seconds": secs,
            "steps": steps,
            "seconds_per_step": secs / max(steps, 1),
            "kernel_evals_per_second": Phi.shape[0] * steps / secs,
            "step_gflops": flops / secs / 1e9,
            "gemm_gflops": gemm,
            "share_of_gemm": flops / secs / 1e9 / gemm,
            "phi_read_gbs": read_gbs(Phi),
            "phi_gb": (Phi.data.nbytes if sp.issparse(Phi) else Phi.nbytes) / 1e9,
            "state_gb": m * Phi.shape[0] * 8 / 1e9,
            "reduction_greedy": sel.reduction,
            "objective_share_left": float(sel.objective[-1] / sel.objective[0]),
        }
    )
    # Bytes a step must read at least: the t rows of L⁻¹k_S· written so far, and Φ once when dense
    # (a sparse MF column reads only the few columns where φ_s is nonzero: negligible).
    nbytes = 0 if sp.issparse(Phi) else Phi.nbytes
    moved = steps * nbytes + 8 * Phi.shape[0] * steps * (steps - 1) / 2
    out["share_of_read_bound"] = moved / secs / 1e9 / out["phi_read_gbs"]
    # GreeDi against greedy with the same budget (greedy's first m choices are its size-m solution).
    for mm in sorted({10, 25, m}):
        base = sel.objective[0] - sel.objective[min(mm, steps)]
        for parts in (2, 4, 8):
            t = time.perf_counter()
            g = greedi(Phi, mu, mm, parts, seed=0)
            out[f"greedi_m{mm}_p{parts}"] = {"seconds": time.perf_counter() - t, "reduction_ratio": g.reduction / base}
    t = time.perf_counter()
    s = stochastic_greedy(Phi, mu, m, eps=0.1, seed=0)
    out["stochastic_eps0.1"] = {"seconds": time.perf_counter() - t, "reduction_ratio": s.reduction / sel.reduction}
    t = time.perf_counter()
    mp = matching_pursuit(Phi, mu, m)
    out["matching_pursuit"] = {"seconds": time.perf_counter() - t, "reduction_ratio": mp.reduction / sel.reduction}
    out["peak_rss_gib"] = peak_rss_gib()
    print(json.dumps(out, indent=1), flush=True)
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--cases", default="logistic,mf")
    args = ap.parse_args()
    gemm = gemm_gflops()
    (RESULTS / "prototypes").mkdir(parents=True, exist_ok=True)
    path = RESULTS / "prototypes" / ("scale.json" if args.n == 1_000_000 else f"scale_{args.n}.json")
    res = json.loads(path.read_text()) if path.exists() else {"cases": []}
    for c in args.cases.split(","):  # a case run again replaces its earlier result
        out = run(c, args.n, args.m, gemm)
        res["cases"] = [r for r in res["cases"] if r["case"] != c] + [out]
        path.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
