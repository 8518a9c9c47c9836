"""Reproduce App. C of the representer paper on ml-100k: find false negatives, remove them, retrain.

    python -m benchmarks.negatives.appc --seeds 5       # ~25 min on 2 cores
    python -m benchmarks.negatives.appc --select-ridge  # the default λ: validation recall@20

Protocol (docs/methods.md §1, paper App. C): ratings ≥ 4 are positives; a random 50/50 split of them per
seed; the base model is BCE MF with every unobserved training pair a negative of weight 0.05. Each
method flags the p% lowest-scoring negatives (p ∈ {1, 2, 5, 10}); we report (a) the share of flagged
negatives that are test positives (the false negatives we can check) and (b) the change in test
recall@20 after retraining without them (same initialisation and solver). Retrainings run as Dask
tasks on a LocalCluster. Mean ± 95% CI (t over seeds). Writes benchmarks/results/negatives/appc.{json,md,png}.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import RESULTS, parser
from dxplain.config import Settings
from dxplain.datasets import resolve_dataset
from dxplain.distributed.cluster import connect
from dxplain.evaluation.deletion import summarise as t_interval
from dxplain.explain import negatives as N
from dxplain.explain.targets import recommend
from dxplain.models.implicit_mf import (
    ImplicitMF,
    dense_terms,
    positive_pairs,
    sample_negatives,
    sparse_terms,
)

NEGATIVES = RESULTS / "negatives"
PERCENTS = (1, 2, 5, 10)


def recall_at(model, P_train, P_test, n=20) -> float:
    """Mean over test users of |top-n unseen ∩ test positives| / |test positives| (He et al. 2020)."""
    users = np.unique(P_test.user)
    t = recommend(model.U, model.V, P_train, users, n)
    key = P_test.user.astype(np.int64) * P_test.n_items + P_test.item
    hits = np.isin(t.user.astype(np.int64) * P_test.n_items + t.item, key)
    per_user = np.bincount(t.user, weights=hits, minlength=P_test.n_users)[users]
    return float(np.mean(per_user / P_test.user_degree()[users]))


def split(P, seed, share=0.5):
    r = np.random.default_rng(seed).random(len(P))
    return P.subset(r < share), P.subset(r >= share)


def make_terms(P_train, sampled, seed, excluded=None):
    """All unobserved pairs as negatives, or ``sampled`` uniform negatives per positive (drawn per seed)."""
    if not sampled:
        return dense_terms(P_train, 0.05, excluded)
    return sparse_terms(P_train, *sample_negatives(P_train, sampled, seed), 0.05, excluded)


def retrain_recall(P_train, P_test, excluded, k, seed, sampled=0, ridge=None) -> float:
    with threadpool_limits(1, "blas"):
        terms = make_terms(P_train, sampled, seed, excluded)
        m = ImplicitMF(k=k, seed=seed, lam=ridge / terms.n_terms if ridge else None).fit(terms)
        return recall_at(m, P_train, P_test)


def run_seed(P, seed, k, client, sampled=0, ridge=None) -> dict:
    t0 = time.perf_counter()
    P_train, P_test = split(P, seed)
    terms = make_terms(P_train, sampled, seed)
    with threadpool_limits(1, "blas"):
        base = ImplicitMF(k=k, seed=seed, lam=ridge / terms.n_terms if ridge else None).fit(terms)
    base_recall = recall_at(base, P_train, P_test)
    test_key = P_test.user.astype(np.int64) * P.n_items + P_test.item
    out = {
        "seed": seed,
        "base_recall@20": base_recall,
        "base_grad_norm": base.grad_norm,
        "lam": base.lam,
        "n_train_pos": len(P_train),
        "n_test_pos": len(P_test),
        "n_neg": terms.n_neg,
        "methods": {},
    }
    jobs = {}
    for method in N.METHODS:
        ts = time.perf_counter()
        _, u, i = N.flag(method, base, terms, P_train, max(PERCENTS), seed)
        score_s = time.perf_counter() - ts
        res = out["methods"][method] = {"score_seconds": score_s}
        for p in PERCENTS:
            K = N.flag_count(terms, p)  # the lowest p% is a prefix of the lowest 10%
            found = np.isin(u[:K] * P.n_items + i[:K], test_key)
            res[f"p{p}"] = {
                "flagged": K,
                "share_test_positives": float(found.mean()),
                "test_positives_found": int(found.sum()),
            }
            jobs[(method, p)] = client.submit(
                retrain_recall, P_train, P_test, (u[:K], i[:K]), k, seed, sampled, ridge, pure=False
            )
    for (method, p), fut in jobs.items():
        r = fut.result()
        out["methods"][method][f"p{p}"].update({"recall@20": r, "recall_change": r - base_recall})
    out["seconds"] = time.perf_counter() - t0
    print(f"seed {seed}: base recall@20 {base_recall:.4f}, {out['seconds']:.0f}s", flush=True)
    return out


def ci(values) -> tuple[float, float]:
    """Mean and 95% t-interval half-width."""
    s = t_interval(values)
    return s.mean, s.half_width


def summarise(runs: list[dict]) -> dict:
    table = {}
    for method in N.METHODS:
        for p in PERCENTS:
            cell = [r["methods"][method][f"p{p}"] for r in runs]
            table[f"{method}/p{p}"] = {
                "share_test_positives": ci([c["share_test_positives"] for c in cell]),
                "recall_change": ci([c["recall_change"] for c in cell]),
            }
    return table


def markdown(summary: dict, runs: list[dict]) -> str:
    base = ci([r["base_recall@20"] for r in runs])
    lines = [
        f"Base model recall@20: {base[0]:.4f} ± {base[1]:.4f} over {len(runs)} seeds.",
        "",
        "| method | p | share of flagged that are test positives | Δ recall@20 after retraining |",
        "|---|---|---|---|",
    ]
    for method in N.METHODS:
        for p in PERCENTS:
            c = summary[f"{method}/p{p}"]
            s, d = c["share_test_positives"], c["recall_change"]
            lines.append(f"| {method} | {p}% | {100 * s[0]:.2f}% ± {100 * s[1]:.2f} | {d[0]:+.4f} ± {d[1]:.4f} |")
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method in N.METHODS:
        for ax, key, scale in ((axes[0], "share_test_positives", 100), (axes[1], "recall_change", 1)):
            m = np.array([summary[f"{method}/p{p}"][key][0] for p in PERCENTS]) * scale
            e = np.array([summary[f"{method}/p{p}"][key][1] for p in PERCENTS]) * scale
            ax.errorbar(PERCENTS, m, yerr=e, marker="o", capsize=3, label=method)
    axes[0].set(
        xlabel="negatives removed (%)", ylabel="flagged that are test positives (%)", title="(a) false negatives found"
    )
    axes[1].set(xlabel="negatives removed (%)", ylabel="Δ recall@20", title="(b) after retraining")
    axes[1].axhline(0, color="grey", lw=0.5)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def select_ridge(P, k) -> None:
    """Validation recall@20 (40/10 of the positives; the test half untouched) for a few ridges λ|D|."""
    P_fit, rest = split(P, 100, share=0.4)
    P_val = split(rest, 101, share=1 / 6)[0]
    terms = dense_terms(P_fit, 0.05)
    for ridge in (0.3, 1, 2, 3, 5, 10, 30):
        with threadpool_limits(1, "blas"):
            m = ImplicitMF(k=k, lam=ridge / terms.n_terms).fit(terms)
        print(f"ridge λ|D| = {ridge:5}: validation recall@20 {recall_at(m, P_fit, P_val):.4f}, ‖∇f‖ {m.grad_norm:.1e}")


def main():
    ap = parser(__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--select-ridge", action="store_true")
    ap.add_argument(
        "--sampled",
        type=int,
        default=0,
        help="base model on this many uniform negatives per positive instead of all unobserved pairs",
    )
    ap.add_argument("--ridge", type=float, help="λ|D| (default: the library's, 3)")
    a = ap.parse_args()
    P = positive_pairs(resolve_dataset("movielens-100k").interactions, 4)
    if a.select_ridge:
        select_ridge(P, a.k)
        return
    t0 = time.perf_counter()
    with connect(Settings.from_env(workers=a.workers)) as client:
        runs = [run_seed(P, s, a.k, client, a.sampled, a.ridge) for s in range(a.seeds)]
    summary = summarise(runs)
    NEGATIVES.mkdir(parents=True, exist_ok=True)
    name = f"appc_sampled{a.sampled}" if a.sampled else "appc"
    res = {
        "protocol": __doc__.strip().splitlines()[0],
        "seeds": a.seeds,
        "k": a.k,
        "percents": PERCENTS,
        "negatives": f"{a.sampled} sampled per positive" if a.sampled else "all unobserved",
        "ridge": a.ridge,
        "seconds": time.perf_counter() - t0,
        "summary": summary,
        "runs": runs,
    }
    (NEGATIVES / f"{name}.json").write_text(json.dumps(res, indent=2))
    md = markdown(summary, runs)
    (NEGATIVES / f"{name}.md").write_text(md)
    plot(summary, NEGATIVES / f"{name}.png")
    print(md)


if __name__ == "__main__":
    main()
