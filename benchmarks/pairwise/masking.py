"""Fig. 1: test AUC of OPAUC after masking the top p% of features ranked by ASIPair, RAIPair, shap's
KernelExplainer and PermutationExplainer, and at random, on the four UCI sets; seeds give the mean and a 95% CI.

Each seed: stratified 80/20 split, OPAUC on the train rows (the reference set), ``--pairs`` test
(positive, negative) pairs; each pair's ranking masks its top ⌈p·D⌉ features in every test instance,
replaced by the training mean, and the test AUC is averaged over the pairs' rankings. ASIPair runs where
D ≤ 16 (Heart, Diabetes); Parkinson (D = 22) and Ionosphere (D = 34) are above its cap.

    python -m benchmarks.pairwise.masking [--seeds 5] [--pairs 20]
"""

import json

import numpy as np
from scipy import stats
from threadpoolctl import threadpool_limits

from benchmarks.common import parser
from benchmarks.pairwise.common import PAIRWISE, UCI_SETS, shap_values, timed, uci, write
from dxplain.pairwise.explain import MASK_P, explain_pairs, masking_curve, random_rankings, top_features
from dxplain.pairwise.models import OPAUC
from dxplain.pairwise.pairs import choose_pairs, split
from dxplain.pairwise.shapley import DEFAULT_MAX_D, reference


def one_seed(name, seed, n_pairs):
    X, y, _ = uci(name)
    train, test = split(y, seed)
    zeta = OPAUC(seed=seed).fit(X[train], y[train])
    ref = reference(zeta, X[train])
    Xt, yt = X[test], y[test]
    a, b = choose_pairs(yt, n_pairs, "opauc", seed)
    ranks, secs = {}, {}
    if ref.D <= DEFAULT_MAX_D:
        (phi, _), secs["asipair"] = timed(explain_pairs, zeta, ref, Xt[a], Xt[b], "asipair", seed)
        ranks["asipair"] = top_features(phi)
    (phi, _), secs["raipair"] = timed(explain_pairs, zeta, ref, Xt[a], Xt[b], "raipair", seed)
    ranks["raipair"] = top_features(phi)
    phi, secs["shap_kernel"] = timed(shap_values, "kernel", zeta, X[train], Xt[a], Xt[b], seed)
    ranks["shap_kernel"] = top_features(phi)
    phi, secs["shap_permutation"] = timed(shap_values, "permutation", zeta, X[train], Xt[a], Xt[b], seed)
    ranks["shap_permutation"] = top_features(phi)
    ranks["random"] = random_rankings(len(a), ref.D, seed)
    curve = masking_curve(zeta, Xt, yt, X[train].mean(0), ranks)
    return {
        "auc": zeta.auc(Xt, yt),
        "curve": curve,
        "seconds_per_pair": {k: v / len(a) for k, v in secs.items()},
        "D": ref.D,
        "pairs": len(a),
    }


def ci95(v):
    v = np.asarray(v, float)
    if len(v) < 2:
        return float(v.mean()), 0.0
    return float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))


def main():
    ap = parser(__doc__)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--sets", default=",".join(UCI_SETS))
    ap.add_argument("--only", default=None, help="run one set:seed and keep it (resumable chunks); no summary")
    a = ap.parse_args()
    runs_dir = PAIRWISE / "masking_runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = [tuple(a.only.split(":"))] if a.only else [(n, str(s)) for n in a.sets.split(",") for s in range(a.seeds)]
    todo = [(n, s) for n, s in todo if not (runs_dir / f"{n}_{s}_{a.pairs}.json").exists()]
    if todo:
        X, y, _ = uci("diabetes")  # warm shap up (imports, compilation) outside the timed calls
        for kind in ("kernel", "permutation"):
            shap_values(kind, OPAUC().fit(X, y), X, X[:2], X[-2:])
    with threadpool_limits(1):
        for name, seed in todo:
            r = one_seed(name, int(seed), a.pairs)
            (runs_dir / f"{name}_{seed}_{a.pairs}.json").write_text(json.dumps(r, default=float))
            print(name, seed, r["seconds_per_pair"], flush=True)
    if a.only:
        return
    out = {"pairs": a.pairs, "seeds": a.seeds, "p": list(MASK_P), "masked_value": "training mean", "sets": {}}
    for name in a.sets.split(","):
        runs = [json.loads((runs_dir / f"{name}_{s}_{a.pairs}.json").read_text()) for s in range(a.seeds)]
        methods = [k[4:] for k in runs[0]["curve"][0] if k.startswith("auc_") and not k.endswith("_sd")]
        table = []
        for n, p in enumerate(MASK_P):
            row = {"p": p, "masked": runs[0]["curve"][n]["masked"]}
            for m in methods:
                row[m], row[m + "_ci95"] = ci95([r["curve"][n][f"auc_{m}"] for r in runs])
            table.append(row)
        beats = {m: all(r[m] < r["random"] for r in table if r["p"] >= 0.05) for m in methods if m != "random"}
        out["sets"][name] = {
            "D": runs[0]["D"],
            "auc": ci95([r["auc"] for r in runs]),
            "curve": table,
            "lower_than_random_at_every_p_ge_5pct": beats,
            "seconds_per_pair": {
                m: float(np.mean([r["seconds_per_pair"][m] for r in runs])) for m in runs[0]["seconds_per_pair"]
            },
        }
        print(name, out["sets"][name]["auc"], beats, flush=True)
    write("masking", out)
    plot(out)


def plot(out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(out["sets"]), figsize=(4 * len(out["sets"]), 3.4), squeeze=False)
    for ax, (name, r) in zip(axes[0], out["sets"].items()):
        p = [row["p"] * 100 for row in r["curve"]]
        for m, color in (
            ("asipair", "C0"),
            ("raipair", "C1"),
            ("shap_kernel", "C2"),
            ("shap_permutation", "C3"),
            ("random", "C7"),
        ):
            if m in r["curve"][0]:
                mu = np.array([row[m] for row in r["curve"]])
                ci = np.array([row[m + "_ci95"] for row in r["curve"]])
                ax.plot(p, mu, marker="o", label=m, color=color)
                ax.fill_between(p, mu - ci, mu + ci, alpha=0.12, color=color)
        ax.set_xscale("log")
        ax.set_title(f"{name} (D={r['D']})")
        ax.set_xlabel("masked features (%)")
    axes[0][0].set_ylabel("test AUC")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(PAIRWISE / "masking.png", dpi=110)


if __name__ == "__main__":
    main()
