"""Pairwise models and RAIPair on raw tabular data (issue 57): does each model learn as well as a plain
linear classifier, does RAIPair add up, and does masking its top features beat random masking and the
usual tools?

Sets: WDBC (scikit-learn's ``load_breast_cancer``), the four shared UCI sets, and three generated ones:
``spam-shaped`` (4,601 × 57 like UCI spambase: 54 sparse, skewed frequencies and 3 heavy-tailed run
lengths up to 10⁴), ``wide`` (400 × 200, 10 informative correlated features) and ``wdbc-scaled`` (WDBC
with each column multiplied by 10^U(−6, 6) and offset by 10^U(0, 6)).

Per set and model (OPAUC, LowRank), on the flow's seeded 80/20 split: the model's test AUC against a
logistic regression's (scikit-learn, ℓ2, C = 1, standardised) on the same split. For LowRank, whose AUC is
a metric's (dissimilar pairs farther than similar ones), the baseline is the metric the logistic
regression's direction induces, ζ = (wᵀ(x_i − x_j))², scored the same way. Then RAIPair on ``--pairs``
test pairs with the flow's defaults (512-row reference sample), its efficiency error, and the masking
curve of its rankings against random orders, per-pair permutation importance (the flow's baseline) and
shap's KernelExplainer on the same pairs (through the difference function, as in ``masking``).

    python -m benchmarks.pairwise.quality [--pairs 100] [--seed 0] [--sets wdbc,heart,...]
"""

import time

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import parser
from benchmarks.pairwise.common import UCI_SETS, shap_values, uci, write
from dxplain.mapper import LocalMapper
from dxplain.pairwise.explain import (
    explain_pairs,
    masking_curve,
    permutation_rankings,
    random_rankings,
    relative_efficiency_gap,
    top_features,
)
from dxplain.pairwise.models import MODELS, auc_lower_bound, auc_scores, two_classes
from dxplain.pairwise.pairs import choose_pairs, split, support_signs
from dxplain.pairwise.shapley import reference

REFERENCE_ROWS = 512  # the flow's default


def spam_shaped(seed: int = 0, n: int = 4601):
    rng = np.random.default_rng([seed, 57])
    freq = rng.lognormal(-0.5, 1.0, size=(n, 54)) * (rng.random((n, 54)) < rng.uniform(0.05, 0.5, 54))
    runs = np.exp(rng.normal([1.0, 3.0, 5.0], [0.6, 1.2, 1.6], size=(n, 3))).clip(1, 15_841)
    X = np.hstack([freq, runs])
    w = rng.normal(size=57) * (rng.random(57) < 0.4)
    s = np.log1p(X) @ w
    y = (s + rng.logistic(size=n) * s.std() * 0.3 > np.quantile(s, 0.6)).astype(np.int64)  # 40% positive
    return X, y


def wide(seed: int = 0, n: int = 400, D: int = 200):
    rng = np.random.default_rng([seed, 150])
    Z = rng.normal(size=(n, 20))
    X = Z @ rng.normal(size=(20, D)) * 0.3 + rng.normal(size=(n, D))
    y = (X[:, :10] @ rng.normal(size=10) + rng.normal(size=n) > 0).astype(np.int64)
    return X, y


def wdbc():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return X, y.astype(np.int64)


def wdbc_scaled(seed: int = 0):
    X, y = wdbc()
    rng = np.random.default_rng([seed, 30])
    return X * 10 ** rng.uniform(-6, 6, X.shape[1]) + 10 ** rng.uniform(0, 6, X.shape[1]), y


SETS = {
    "wdbc": wdbc,
    **{name: (lambda name=name: uci(name)[:2]) for name in UCI_SETS},
    "spam-shaped": spam_shaped,
    "wide": wide,
    "wdbc-scaled": wdbc_scaled,
}


def logistic_baseline(X, y, train, test, model: str) -> float:
    from sklearn.linear_model import LogisticRegression

    mu, sd = X[train].mean(0), X[train].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    lr = LogisticRegression(C=1.0, max_iter=10_000).fit((X[train] - mu) / sd, y[train])
    w = lr.coef_[0] / sd
    if model == "opauc":
        return auc_scores(X[test] @ w, y[test])

    class RankOne:  # the logistic direction as a metric, scored exactly as LowRank.auc scores LowRank
        MAX_AUC_PAIRS, seed, auc = MODELS["lowrank"].MAX_AUC_PAIRS, 0, MODELS["lowrank"].auc

        def __call__(self, A, B):
            return ((A - B) @ w) ** 2

    return RankOne().auc(X[test], y[test])


def masked_mean(curve, name: str) -> float:
    """The masking curve's mean test AUC over p ≥ 5% (the acceptance's average)."""
    return float(np.mean([r[f"auc_{name}"] for r in curve if r["p"] >= 0.05]))


def run_set(name: str, model: str, pairs: int, seed: int, shap: bool) -> dict:
    X, y = SETS[name]()
    y = two_classes(y)
    train, test = split(y, seed)
    t = time.perf_counter()
    zeta = MODELS[model](seed=seed).fit(X[train], y[train])
    fit_s = time.perf_counter() - t
    Xt, yt = X[test], y[test]
    auc = zeta.auc(Xt, yt)
    lr = logistic_baseline(X, y, train, test, model)
    n_pos, n_neg = int(yt.sum()), int((1 - yt).sum())
    row = {
        "set": name,
        "model": model,
        "rows": len(X),
        "D": X.shape[1],
        "auc": auc,
        "auc_logistic": lr,
        "ratio": auc / lr,
        "auc_lower_bound": auc_lower_bound(auc, min(n_pos, n_neg), max(n_pos, n_neg)),
        "lam": getattr(zeta, "lam", None),
        "fit_s": fit_s,
    }
    ref = reference(zeta, X[train], rows=REFERENCE_ROWS, seed=seed)
    a, b = choose_pairs(yt, pairs, model, seed)
    t = time.perf_counter()
    with threadpool_limits(1):
        phi, z = explain_pairs(zeta, ref, Xt[a], Xt[b], "raipair", seed, mapper=LocalMapper(), shards=1)
    row["raipair_s_per_pair"] = (time.perf_counter() - t) / len(a)
    row["max_relative_efficiency_error"] = relative_efficiency_gap(phi, z, ref.base)
    signs = support_signs(model, yt[a], yt[b])[:, None]
    rankings = {
        "raipair": top_features(signs * phi),
        "permutation": permutation_rankings(zeta, Xt[a], Xt[b], seed, signs=signs[:, 0]),
        "random": random_rankings(len(a), ref.D, seed),
    }
    if shap:
        with threadpool_limits(1):
            sv = shap_values("kernel", zeta, X[train], Xt[a], Xt[b], seed)
        rankings["shap_kernel"] = top_features(signs * sv)
    curve = masking_curve(zeta, Xt, yt, X[train].mean(0), rankings)
    row["masking"] = curve
    row["masked_auc"] = {k: masked_mean(curve, k) for k in rankings}
    row["pairs"] = len(a)
    return row


def main():
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--no-shap", action="store_true")
    a = ap.parse_args()
    rows = []
    for name in a.sets.split(","):
        for model in ("opauc", "lowrank"):
            rows.append(run_set(name, model, a.pairs, a.seed, not a.no_shap))
            r = rows[-1]
            print(
                f"{name} {model}: AUC {r['auc']:.3f} vs logistic {r['auc_logistic']:.3f} ({r['ratio']:.3f}), "
                f"RAIPair {r['raipair_s_per_pair']:.3f} s/pair, efficiency {r['max_relative_efficiency_error']:.1e}, "
                f"masked {r['masked_auc']}",
                flush=True,
            )
    write("quality", {"pairs": a.pairs, "seed": a.seed, "reference_rows": REFERENCE_ROWS, "rows": rows})


if __name__ == "__main__":
    main()
