"""iALS against the ``implicit`` library: quality, speed, explanations and the import routes, in one run.

    python -m benchmarks.als.ials_vs_implicit        # ~10 min on one core

Data: ml-100k with ratings ≥ 4 as positives (value 1), each user's positives split 80/10/10 in a seeded order
(``implicit_peers.split_per_user``); a synthetic ml-1m-shaped implicit set (~950k interactions,
``datasets.synthetic.generate(implicit=True)``) for speed. k = 32 (and 100 on ml-100k for speed).

1. Quality, LightGCN's protocol (recall@20 and NDCG@20 over each user's held-out positives, the fitted items never
   ranked). Each model's settings are chosen on validation (fitted on train, by recall@20), then it is refitted on
   train + validation and measured on test: implicit's ALS (its 15 iterations) and dxplain's iALS (implicit
   convention, trained to its identity bound; only converged fits are chosen) over one λ × α grid, implicit's
   BPR over learning rate × regularisation, dxplain's BCE MF as the refresh trains it (4 negatives per
   positive, weight 1) over its ridge λ|D| (only stationary fits are chosen). dxplain's implicit model is the
   better of its two by validation recall; acceptance: its test recall@20 ≥ 0.98× implicit ALS's.
2. Speed: dxplain's iALS to an identity bound ε ≤ 1e-6 at implicit's defaults (λ = 0.01, α = 1) against
   implicit's default 15-iteration fit of the same data (k = 32; its default k is 100), alternated, median of
   ``--repeats``; the trainer's own default bound (``IDENTITY_TOL``) too. Acceptance: ≤ 10×. On 0/1 data those
   defaults make every confidence 1, where dxplain's spectral start is the optimum itself (``IALS.start``), so the
   same is timed at the settings chosen on validation (α > 1: the start is only a start), and each row once from
   implicit's random start.
3. Explanation, on train + validation, at implicit's defaults and at the chosen settings: for ``--users`` test
   users (≥ 10 positives) and their top-1 item, implicit's ``explain`` (it re-solves the user's row:
   c_ui⟨W_u⁻¹V_j, V_i⟩) against dxplain's user-history side (α_ui⟨V_i, V_j⟩ and the unobserved aggregate):
   overlap of the top-10 items, Spearman over all the user's items; case deletion: the drop of the target's
   score when the user's row is re-solved exactly (``kernels.ials.half_step``, V fixed) without each method's
   top-5 items, or 5 random ones.
4. Import, on all of ml-100k binarised: implicit's default fit (a) polished to ε ≤ 1e-6 by ``IALS.fit(init=…)``
   or (b) its user side re-solved exactly against its V (what ``explain`` does); each route's cost, how far the
   scores moved, and the identity of both sides over every user's top-1 item.

One thread everywhere: implicit's ``num_threads=1``, numba's ``set_num_threads(1)``, BLAS at 1 (threadpoolctl).
The load average (``os.getloadavg``) is recorded around each part. Writes benchmarks/results/als/ials_vs_implicit.json.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
from scipy.stats import spearmanr
from threadpoolctl import threadpool_limits

from benchmarks.als import implicit_peers as pe
from benchmarks.als.common import ALS, ML1M_SHAPE
from benchmarks.als.tables import ials_vs_implicit_table
from benchmarks.common import CACHE, parser
from dxplain.datasets import resolve_dataset
from dxplain.datasets.synthetic import generate
from dxplain.explain.ials import IALSExplainer, fidelity_errors
from dxplain.interactions import Targets
from dxplain.kernels import ials
from dxplain.models.base import FactorModel
from dxplain.models.ials import IALS, IDENTITY_TOL
from dxplain.models.ials_half_steps import IALSHalfSteps
from dxplain.models.implicit_mf import DEFAULT_RIDGE

K, N = 32, 20
LAMS, ALPHAS = (0.1, 1.0, 3.0, 10.0, 20.0, 30.0, 50.0, 100.0), (1.0, 2.0, 5.0, 10.0, 20.0)
BPR_GRID = [{"lr": lr, "reg": reg} for lr in (0.005, 0.01, 0.02) for reg in (0.001, 0.01, 0.1)]
RIDGES = (1.0, DEFAULT_RIDGE, 10.0, 30.0)
DEFAULTS = {"lam": 0.01, "alpha": 1.0}  # implicit's own regularization and alpha
SPEED_TOL = 1e-6


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def ok(fit: pe.Fit, model: str) -> bool:
    """A fit dxplain can explain exactly: iALS at its identity bound, BCE at its gradient stop."""
    return fit.info.get("converged", True) if model == "dxplain iALS" else fit.info.get("stationary", True)


def select(model: str, fit, grid: list[dict], train, val, fitset, test) -> tuple[dict, pe.Fit]:
    """Every grid point fitted on train and measured on validation; the best by recall@N among the usable ones
    (``ok``) refitted on train + validation and measured on test."""
    rows, best = [], None
    for params in grid:
        try:
            f = fit(train, K, **params)
        except Exception as exc:  # a failing grid point is a result, not the end of the run
            rows.append({**params, "error": f"{type(exc).__name__}: {exc}"})
            continue
        m = pe.ranking_metrics(f.U, f.V, train, val, N)
        rows.append({**params, "val_recall": m["recall"], "val_ndcg": m["ndcg"], "seconds": f.seconds, **f.info})
        if ok(f, model) and (best is None or m["recall"] > best[1]):
            best = (params, m["recall"])
        print(model, params, f"val recall@{N} {m['recall']:.4f}", f"{f.seconds:.2f}s", flush=True)
    if best is None:
        raise RuntimeError(f"{model}: no grid point gave a usable fit: {rows}")
    final = fit(fitset, K, **best[0])
    m = pe.ranking_metrics(final.U, final.V, fitset, test, N)
    out = {"model": model, "grid": rows, "chosen": best[0], "val_recall": best[1], "test_recall": m["recall"]}
    return {**out, "test_ndcg": m["ndcg"], "test_users": m["users"], "fit_seconds": final.seconds, **final.info}, final


def quality(train, val, test, fitset) -> tuple[dict, dict]:
    grid_als = [{"lam": lam, "alpha": a} for lam in LAMS for a in ALPHAS]
    runs = [
        ("implicit ALS", pe.implicit_als, grid_als),
        ("implicit BPR", pe.implicit_bpr, BPR_GRID),
        ("dxplain iALS", pe.dxplain_ials, grid_als),
        ("dxplain BCE", pe.dxplain_bce, [{"ridge": r} for r in RIDGES]),
    ]
    models, fits = [], {}
    for name, fit, grid in runs:
        row, fits[name] = select(name, fit, grid, train, val, fitset, test)
        models.append(row)
    by = {m["model"]: m for m in models}
    mine = max(("dxplain iALS", "dxplain BCE"), key=lambda n: by[n]["val_recall"])
    ratio = by[mine]["test_recall"] / by["implicit ALS"]["test_recall"]
    verdict = {"dxplain_model": mine, "recall_ratio": ratio, "target": 0.98, "passed": bool(ratio >= 0.98)}
    return {"models": models, "acceptance": verdict}, fits


def identity(model: FactorModel, data, users: np.ndarray) -> dict:
    """Relative identity error of both sides over the users' top-1 unseen items (``explain.ials.fidelity_errors``)."""
    t = Targets.from_pairs(users, top_n(model.U, model.V, data, users, 1)[:, 0])
    item, user = fidelity_errors(model, data, t)
    return {
        "targets": len(t),
        **{
            s: {"max": float(e.max()), "median": float(np.median(e))}
            for s, e in (("user_items", item), ("item_users", user))
        },
    }


def ials_model(U, V, data, lam: float, alpha: float) -> FactorModel:
    settings = {"convention": "implicit", "alpha": alpha}
    return FactorModel(U, V, 0.0, lam, len(data), loss="ials", kind="ials", settings=settings)


def top_n(U, V, seen, users, n: int) -> np.ndarray:
    """(len(users), n) best unseen items by score, best first."""
    S = np.asarray(U, np.float64)[users] @ np.asarray(V, np.float64).T
    S[seen.by_user()[users].nonzero()] = -np.inf
    top = np.argpartition(-S, n - 1, axis=1)[:, :n] if n < S.shape[1] else np.argsort(-S, axis=1)
    return np.take_along_axis(top, np.argsort(-np.take_along_axis(S, top, axis=1), axis=1, kind="stable"), axis=1)


def speed_row(name: str, data, k: int, repeats: int, settings: dict = DEFAULTS) -> tuple[dict, pe.Fit]:
    """implicit's 15-iteration fit and dxplain's converged fits at ``settings``, alternated, medians; once from
    implicit's random start too (``IALS.start``)."""
    before = load()
    implicit_s, tol_s, default_s, fit = [], [], [], None
    for _ in range(repeats):
        implicit_s.append(pe.implicit_als(data, k, **settings).seconds)
        fit = pe.dxplain_ials(data, k, **settings, identity_tol=SPEED_TOL)
        tol_s.append(fit.seconds)
        default_fit = pe.dxplain_ials(data, k, **settings)
        default_s.append(default_fit.seconds)
    random_fit = pe.dxplain_ials(data, k, **settings, identity_tol=SPEED_TOL, start="random")
    users = np.sort(np.random.default_rng(0).choice(data.n_users, min(200, data.n_users), replace=False))
    users = users[data.user_degree()[users] > 0]
    row = {
        "dataset": name,
        "interactions": len(data),
        "users": data.n_users,
        "items": data.n_items,
        "k": k,
        **settings,
        "start": fit.info["start"],
        "implicit_s": implicit_s,
        "implicit_median_s": float(np.median(implicit_s)),
        "dxplain_s": tol_s,
        "dxplain_median_s": float(np.median(tol_s)),
        "ratio": float(np.median(tol_s) / np.median(implicit_s)),
        **{key: fit.info[key] for key in ("sweeps", "identity_bound", "grad_norm", "converged")},
        "identity": identity(ials_model(fit.U, fit.V, data, **settings), data, users),
        "default_tol": IDENTITY_TOL,
        "default_tol_s": default_s,
        "default_tol_median_s": float(np.median(default_s)),
        "default_tol_sweeps": default_fit.info["sweeps"],
        "random_start_s": random_fit.seconds,
        "random_start_sweeps": random_fit.info["sweeps"],
        "random_start_converged": random_fit.info["converged"],
        "load_before": before,
        "load_after": load(),
    }
    print(json.dumps({key: v for key, v in row.items() if key != "identity"}), flush=True)
    return row, fit


def resolved_score(V, G, items, lam: float, alpha: float, j: int) -> float:
    """⟨X_u, V_j⟩ with X_u the user's exact solve from ``items`` against fixed V (``kernels.ials.half_step``)."""
    n = len(items)
    indptr, cols = np.array([0, n], np.int64), np.asarray(items, np.int64)
    x = ials.half_step(indptr, cols, np.full(n, alpha), np.ones(n), V, np.array([lam]), G)[0]
    return float(x @ V[j])


def agreement(label: str, fit: pe.Fit, data, lam: float, alpha: float, users: np.ndarray, seed: int) -> dict:
    """implicit's ``explain`` against dxplain's user-history side for each user's top-1 item, and case deletion."""
    from implicit.cpu.als import AlternatingLeastSquares

    U, V = np.asarray(fit.U, np.float64), np.asarray(fit.V, np.float64)
    t = Targets.from_pairs(users, top_n(U, V, data, users, 1)[:, 0])
    side = IALSExplainer(ials_model(U, V, data, lam, alpha), data).side(t, "item")
    peer = AlternatingLeastSquares(factors=U.shape[1], regularization=lam, alpha=alpha, dtype=np.float64)
    peer.user_factors, peer.item_factors = U, V
    R, G = pe.user_items(data).astype(np.float64), V.T @ V
    rng = np.random.default_rng(seed)
    cols = ("overlap10", "spearman", "score", "resolved", "observed_sum", "aggregate")
    out = {c: [] for c in (*cols, "drop_implicit", "drop_dxplain", "drop_random")}
    for n, (u, j) in enumerate(zip(t.user.tolist(), t.item.tolist())):
        items = data.item[data.user_indptr[u] : data.user_indptr[u + 1]].astype(np.int64)
        total, contributions, _ = peer.explain(u, R, j, N=len(items))
        theirs = np.array([i for i, _ in contributions])
        rows = np.flatnonzero((side["target"] == n) & (side["kind"] == 0))
        rows = rows[np.argsort(-side["importance"][rows], kind="stable")]  # by decreasing importance, as implicit's
        mine = data.item[side["entry"][rows].astype(np.int64)]
        importance = dict(zip(mine.tolist(), side["importance"][rows]))
        contribution = dict(contributions)
        out["overlap10"].append(len(set(theirs[:10]) & set(mine[:10])) / 10)
        out["spearman"].append(spearmanr([contribution[i] for i in items], [importance[i] for i in items])[0])
        out["score"].append(float(U[u] @ V[j]))
        out["resolved"].append(float(total))
        out["observed_sum"].append(float(side["importance"][rows].sum()))
        out["aggregate"].append(float(side["importance"][(side["target"] == n) & (side["kind"] == 1)][0]))
        base = resolved_score(V, G, items, lam, alpha, j)
        for method, drop in (("implicit", theirs[:5]), ("dxplain", mine[:5]), ("random", rng.choice(items, 5, False))):
            kept = np.setdiff1d(items, drop)
            out[f"drop_{method}"].append(base - resolved_score(V, G, kept, lam, alpha, j))
    a = {c: np.asarray(v, np.float64) for c, v in out.items()}
    return {
        "setting": label,
        "lam": lam,
        "alpha": alpha,
        "targets": len(t),
        "overlap10_mean": float(a["overlap10"].mean()),
        "spearman_mean": float(np.nanmean(a["spearman"])),
        **{f"drop_{m}_mean": float(a[f"drop_{m}"].mean()) for m in ("implicit", "dxplain", "random")},
        "dxplain_drop_larger_share": float(np.mean(a["drop_dxplain"] > a["drop_implicit"])),
        "score_mean": float(a["score"].mean()),
        "explain_total_vs_score_max": float(np.max(np.abs(a["resolved"] - a["score"]))),
        "observed_sum_mean": float(a["observed_sum"].mean()),
        "aggregate_mean": float(a["aggregate"].mean()),
        "converged": fit.info.get("converged"),
        "identity_bound": fit.info.get("identity_bound"),
    }


def changed_top(U0, V0, U1, V1, data, users) -> dict:
    a, b = top_n(U0, V0, data, users, N), top_n(U1, V1, data, users, N)
    same_set = np.array([set(x) == set(y) for x, y in zip(a, b)])
    return {
        "users": len(users),
        "top20_set_changed": int((~same_set).sum()),
        "top20_order_changed": int((a != b).any(1).sum()),
    }


def relative(A, B) -> float:
    return float(np.linalg.norm(A - B) / np.linalg.norm(B))


def import_routes(P, fresh: pe.Fit) -> dict:
    """implicit's default fit of P, polished or with its user side re-solved (module docstring, 4)."""
    lam, alpha = DEFAULTS["lam"], DEFAULTS["alpha"]
    peer = pe.implicit_als(P, K)
    U0, V0 = np.asarray(peer.U, np.float64), np.asarray(peer.V, np.float64)
    hs = IALSHalfSteps.local(P, lam, alpha, "implicit")
    start = hs.measure(U0, V0)
    users = np.flatnonzero(P.user_degree() > 0)
    S0 = U0 @ V0.T
    polished = IALS(k=K, **DEFAULTS, identity_tol=SPEED_TOL).fit(P, init=(U0, V0))
    t0 = time.perf_counter()
    U1 = hs.users(V0)
    resolve_s = time.perf_counter() - t0
    resolved = hs.measure(U1, V0)
    return {
        "implicit_fit_s": peer.seconds,
        "start": {"identity_bound": list(start.bound), "grad_norm": start.gnorm},
        "start_identity": identity(ials_model(U0, V0, P, lam, alpha), P, users),
        "polish": {
            "sweeps": polished.info["sweeps"],
            "seconds": polished.info["seconds"],
            "converged": polished.info["converged"],
            "identity_bound": polished.info["identity_bound"],
            "U_change": relative(polished.U, U0),
            "V_change": relative(polished.V, V0),
            "score_change": relative(polished.U @ polished.V.T, S0),
            "vs_fresh_fit_score_change": relative(polished.U @ polished.V.T, fresh.U @ fresh.V.T),
            **changed_top(U0, V0, polished.U, polished.V, P, users),
            "identity": identity(polished, P, users),
        },
        "resolve": {
            "seconds": resolve_s,
            "identity_bound": list(resolved.bound),
            "U_change": relative(U1, U0),
            "score_change": relative(U1 @ V0.T, S0),
            **changed_top(U0, V0, U1, V0, P, users),
            "identity": identity(ials_model(U1, V0, P, lam, alpha), P, users),
        },
    }


def main():
    ap = parser(__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--users", type=int, default=50, help="test users explained (part 3)")
    a = ap.parse_args()
    import implicit
    from numba import set_num_threads

    set_num_threads(1)
    folder = CACHE / "synthetic-ml1m-implicit"
    if not (folder / "interactions.parquet").exists():
        shape = (ML1M_SHAPE["n_interactions"], ML1M_SHAPE["n_users"], ML1M_SHAPE["n_items"])
        generate(folder, *shape, seed=0, implicit=True)
    P = pe.binarised(resolve_dataset("movielens-100k").interactions)
    train, val, test = pe.split_per_user(P, a.seed)
    fitset = pe.union(train, val)
    result = {
        "implicit": implicit.__version__,
        "k": K,
        "n": N,
        "threads": 1,
        "seed": a.seed,
        "split": {"positives": len(P), "train": len(train), "validation": len(val), "test": len(test)},
        "load_start": load(),
    }
    with threadpool_limits(1):
        IALS(k=K, max_sweeps=2).fit(P)  # loads numba's compiled kernels: not timed below
        result["quality"], fits = quality(train, val, test, fitset)
        speed, fresh = [], None
        synthetic = resolve_dataset(str(folder)).interactions
        chosen = next(m for m in result["quality"]["models"] if m["model"] == "dxplain iALS")["chosen"]
        for name, data, k, settings in (
            ("ml-100k binarised", P, K, DEFAULTS),
            ("ml-100k binarised", P, 100, DEFAULTS),
            ("synthetic ml-1m-shaped implicit", synthetic, K, DEFAULTS),
            ("ml-100k binarised", P, K, chosen),
            ("synthetic ml-1m-shaped implicit", synthetic, K, chosen),
        ):
            row, fit = speed_row(name, data, k, a.repeats, settings)
            speed.append(row)
            fresh = fit if (data is P and k == K and settings is DEFAULTS) else fresh
        result["speed"] = {"tol": SPEED_TOL, "target": 10.0, "rows": speed}
        eligible = np.flatnonzero((test.user_degree() > 0) & (fitset.user_degree() >= 10))
        users = np.sort(np.random.default_rng(a.seed).choice(eligible, a.users, replace=False))
        at_defaults = pe.dxplain_ials(fitset, K, **DEFAULTS, identity_tol=SPEED_TOL)
        result["explanation"] = [
            agreement("implicit's defaults", at_defaults, fitset, **DEFAULTS, users=users, seed=a.seed),
            agreement("chosen on validation", fits["dxplain iALS"], fitset, **chosen, users=users, seed=a.seed),
        ]
        result["import"] = import_routes(P, fresh)
    result["load_end"] = load()
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "ials_vs_implicit.json").write_text(json.dumps(result, indent=2, default=float))
    print(ials_vs_implicit_table(result))


if __name__ == "__main__":
    main()
