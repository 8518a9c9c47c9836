"""The SBQ paper's applications (Khanna et al. 2019, §6), on data that ships with scikit-learn and ml-100k.

    pip install -e '.[bench]'
    python -m benchmarks.prototypes.applications --seeds 10       # ~3 min on 2 cores

(a) data cleaning: an ℓ2 logistic regression; the targets are the test points of one half of the test
    set that it misclassifies (with their true labels). Remove the top m SBQ prototypes (or m random
    training points), retrain, and measure accuracy on that half and on the untouched other half.
(b) fixing flipped labels: flip 10% of the training labels; a clean 10% "curated" set is part of every
    model's training data and its misclassified points are SBQ's targets (the 5 highest-loss curated
    points if fewer than 5 are misclassified). Check candidates in the order of SBQ, SBQ with F = I (the
    practical kernel), self-influence g_xᵀH⁻¹g_x (Koh & Liang) or random; report the share of flips
    found against the number checked, and test accuracy after fixing the ones found.
(c) summarisation: logistic regression trained on only the m SBQ prototypes of the validation set
    (or m random training points), mean test log-likelihood against m.
(d) recommendations (ml-100k, ALS-MF k=32): m prototypes for one user's top-10 list; the share of
    ‖μ_T‖² they explain, against m random training interactions of that user or those items with their
    optimal weights.

SBQ's Fisher kernel here has rank p + 1 (the model's parameters), so it selects at most p + 1 points;
the m and budget grids stay below that. Mean ± 95% CI (t over seeds). Writes
benchmarks/results/prototypes/applications.{json,md,png}.
"""

from __future__ import annotations

import json
import time

import numpy as np

from benchmarks.common import RESULTS, parser
from dxplain.evaluation.deletion import summarise as t_interval
from dxplain.kernels import fisher as F
from dxplain.kernels.sbq import greedy, mean_embedding, objective_of
from dxplain.models.logistic import LogisticRegression

PROTOTYPES = RESULTS / "prototypes"
LAM = 1e-2
COLOURS = {"sbq": "C0", "sbq-identity": "C1", "self-influence": "C2", "random": "C3"}


def load(name: str):
    from sklearn.datasets import load_breast_cancer, load_digits

    if name == "digits-4v9":
        d = load_digits()
        keep = np.isin(d.target, (4, 9))
        return d.data[keep], (d.target[keep] == 9).astype(int)
    if name == "digits-0-4v5-9":  # a harder pair of classes: a linear model makes ~5% errors
        d = load_digits()
        return d.data, (d.target >= 5).astype(int)
    if name == "breast-cancer":
        d = load_breast_cancer()
        return d.data, d.target.astype(int)
    raise ValueError(name)


def split(n: int, shares, rng):
    idx = rng.permutation(n)
    cuts = (np.cumsum(shares)[:-1] * n).astype(int)
    return np.split(idx, cuts)


def standardise(X, train):
    mu, sd = X[train].mean(axis=0), X[train].std(axis=0)
    return (X - mu) / np.where(sd > 0, sd, 1.0)


def fit(X, y):
    return LogisticRegression(LAM).fit(X, y)


def accuracy(model, X, y) -> float:
    return float(np.mean(model.predict(X) == y))


def prepared(name, seed, shares):
    """The seed's random split of the data (the first part trains), standardised, and the fitted model."""
    rng = np.random.default_rng(seed)
    X, y = load(name)
    parts = split(len(y), shares, rng)
    X = standardise(X, parts[0])
    return rng, X, y, parts, fit(X[parts[0]], y[parts[0]])


def sbq_order(model, X, y, Xt, yt, m, kind="empirical"):
    Phi, Phi_T = F.logistic_embedding(X, y, model.theta, Xt, yt, kind)
    return greedy(Phi, mean_embedding(Phi_T), m).index


def ci(values) -> tuple[float, float]:
    """Mean and 95% t-interval half-width."""
    s = t_interval(values)
    return s.mean, s.half_width


# ---- (a) data cleaning -------------------------------------------------------------------------------------


def cleaning(name, seed, ms):
    rng, X, y, (tr, ta, ho), model = prepared(name, seed, (0.5, 0.25, 0.25))
    wrong = ta[model.predict(X[ta]) != y[ta]]
    out = {
        "targets": int(len(wrong)),
        "base": {"target_half": accuracy(model, X[ta], y[ta]), "held_out": accuracy(model, X[ho], y[ho])},
    }
    if len(wrong) == 0:
        return out
    order = sbq_order(model, X[tr], y[tr], X[wrong], y[wrong], max(ms))
    for m in ms:
        for method, drop in (("sbq", order[:m]), ("random", rng.choice(len(tr), m, replace=False))):
            keep = np.setdiff1d(np.arange(len(tr)), drop)
            mm = fit(X[tr][keep], y[tr][keep])
            out.setdefault(method, {})[m] = {
                "target_half": accuracy(mm, X[ta], y[ta]),
                "held_out": accuracy(mm, X[ho], y[ho]),
                "removed": int(len(drop)),
            }
    return out


# ---- (b) fixing flipped labels -----------------------------------------------------------------------------


def flips(name, seed, budgets):
    rng = np.random.default_rng(seed)
    X, y = load(name)
    cur, tr, te = split(len(y), (0.1, 0.6, 0.3), rng)
    X = standardise(X, np.concatenate([cur, tr]))
    noisy = y.copy()
    flipped = rng.choice(tr, int(round(0.1 * len(tr))), replace=False)
    noisy[flipped] = 1 - noisy[flipped]
    train = np.concatenate([tr, cur])  # the curated set is part of every model's training data
    model = fit(X[train], noisy[train])
    loss = -np.where(y[cur] == 1, np.log(model.proba(X[cur])), np.log1p(-model.proba(X[cur])))
    targets = cur[model.predict(X[cur]) != y[cur]]
    if len(targets) < 5:
        targets = cur[np.argsort(-loss)[:5]]
    G = F.logistic_scores(X[tr], noisy[tr], model.theta)
    orders = {
        "sbq": tr[sbq_order(model, X[tr], noisy[tr], X[targets], y[targets], max(budgets))],
        "sbq-identity": tr[sbq_order(model, X[tr], noisy[tr], X[targets], y[targets], max(budgets), "identity")],
        "self-influence": tr[np.argsort(-F.self_influence(G, model.hessian(X[train])))],
        "random": rng.permutation(tr),
    }
    out = {"flips": int(len(flipped)), "targets": int(len(targets)), "base_test": accuracy(model, X[te], y[te])}
    for method, order in orders.items():
        for c in budgets:
            checked = order[:c]
            found = np.intersect1d(checked, flipped)
            fixed = noisy.copy()
            fixed[found] = y[found]
            mm = fit(X[train], fixed[train])
            out.setdefault(method, {})[c] = {
                "found": len(found) / len(flipped),
                "checked": int(len(checked)),
                "test_accuracy": accuracy(mm, X[te], y[te]),
            }
    return out


# ---- (c) summarisation -------------------------------------------------------------------------------------


def summarisation(name, seed, ms):
    rng, X, y, (tr, va, te), model = prepared(name, seed, (0.6, 0.2, 0.2))
    out = {"full": model.log_likelihood(X[te], y[te])}
    orders = {
        "sbq": sbq_order(model, X[tr], y[tr], X[va], y[va], max(ms)),
        "sbq-identity": sbq_order(model, X[tr], y[tr], X[va], y[va], max(ms), "identity"),
    }
    for m in ms:
        subsets = {k: o[:m] for k, o in orders.items()} | {"random": rng.choice(len(tr), m, replace=False)}
        for method, S in subsets.items():
            mm = fit(X[tr][S], y[tr][S])
            out.setdefault(method, {})[m] = {"test_ll": mm.log_likelihood(X[te], y[te]), "size": int(len(S))}
    return out


# ---- (d) recommendations -----------------------------------------------------------------------------------


def recommendations(n_users, ms, seed):
    from dxplain.datasets import resolve_dataset
    from dxplain.explain.prototypes import mf_fisher_embedding
    from dxplain.explain.targets import recommend
    from dxplain.models.als.trainer import ALSMF

    data = resolve_dataset("movielens-100k").interactions
    model = ALSMF(k=32, seed=0).fit(data)
    rng = np.random.default_rng(seed)
    out = []
    for u in rng.choice(data.n_users, n_users, replace=False):
        T = recommend(model.U, model.V, data, np.array([u]), 10)
        Phi, Phi_T = mf_fisher_embedding(model, data, T)
        mu = mean_embedding(Phi_T)
        sel = greedy(Phi, mu, max(ms))
        pool = np.flatnonzero((data.user == u) | np.isin(data.item, T.item))  # the rest have k(x, t) = 0
        row = {"user": int(u), "pool": int(len(pool))}
        for m in ms:
            row[f"sbq_{m}"] = 1 - sel.objective[m] / sel.objective[0]
            S = rng.choice(pool, min(m, len(pool)), replace=False)
            Phi_S = Phi[S].toarray()
            w = np.linalg.lstsq(Phi_S @ Phi_S.T, Phi[S] @ mu.T.toarray().ravel(), rcond=None)[0]  # optimal weights
            row[f"random_{m}"] = 1 - objective_of(Phi, mu, S, w) / sel.objective[0]
        out.append(row)
    return out


# ---- report ------------------------------------------------------------------------------------------------


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--rec-users", type=int, default=20)
    args = ap.parse_args()
    t0 = time.perf_counter()
    grids = {
        "digits-4v9": {"m": (10, 20, 40), "budget": (10, 20, 30, 45, 60)},
        "digits-0-4v5-9": {"m": (10, 20, 40, 60), "budget": (10, 20, 30, 45, 60)},
        "breast-cancer": {"m": (5, 10, 20, 30), "budget": (5, 10, 15, 20, 30)},
    }
    res = {"seeds": args.seeds, "lam": LAM, "cleaning": {}, "flips": {}, "summarisation": {}}
    for name, g in grids.items():
        res["cleaning"][name] = [cleaning(name, s, g["m"][:2]) for s in range(args.seeds)]
        res["flips"][name] = [flips(name, s, g["budget"]) for s in range(args.seeds)]
        res["summarisation"][name] = [summarisation(name, s, g["m"]) for s in range(args.seeds)]
        print(f"{name} done at {time.perf_counter() - t0:.0f}s", flush=True)
    res["recommendations"] = recommendations(args.rec_users, (5, 10, 20), 0)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    PROTOTYPES.mkdir(parents=True, exist_ok=True)
    (PROTOTYPES / "applications.json").write_text(json.dumps(res, indent=1, default=float))
    md = report(res, grids)
    (PROTOTYPES / "applications.md").write_text(md)
    plot(res, grids)
    print(md)


def fmt(values, pct=True) -> str:
    m, h = ci(values)
    return f"{100 * m:.1f} ± {100 * h:.1f}" if pct else f"{m:.3f} ± {h:.3f}"


def report(res, grids) -> str:
    L = [
        f"# SBQ applications ({res['seeds']} seeds, mean ± 95% CI; `python -m benchmarks.prototypes.applications "
        f"--seeds {res['seeds']}`)",
        "",
    ]
    L += [
        "## (a) Data cleaning: remove m training points, retrain (accuracy %)",
        "",
        "| data | targets (misclassified) | m | SBQ: target half | random: target half | SBQ: held-out half "
        "| random: held-out half | no removal: target / held-out |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in res["cleaning"].items():
        ok = [r for r in runs if "sbq" in r]
        for m in grids[name]["m"][:2]:
            L.append(
                f"| {name} | {np.mean([r['targets'] for r in runs]):.1f} (seeds with any: {len(ok)}) | {m} | "
                f"{fmt([r['sbq'][m]['target_half'] for r in ok])} | "
                f"{fmt([r['random'][m]['target_half'] for r in ok])} | "
                f"{fmt([r['sbq'][m]['held_out'] for r in ok])} | {fmt([r['random'][m]['held_out'] for r in ok])} | "
                f"{fmt([r['base']['target_half'] for r in ok])} / {fmt([r['base']['held_out'] for r in ok])} |"
            )
    methods = ("sbq", "sbq-identity", "self-influence", "random")
    L += [
        "",
        "## (b) Fixing flipped labels (10% flipped): share of flips found (%) / test accuracy after fixing (%)",
        "",
        "| data | checked | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for name, runs in res["flips"].items():
        for c in grids[name]["budget"]:
            cells = [
                f"{fmt([r[k][c]['found'] for r in runs])} / {fmt([r[k][c]['test_accuracy'] for r in runs])}"
                for k in methods
            ]
            L.append(f"| {name} | {c} | " + " | ".join(cells) + " |")
        L.append(f"| {name} | 0 (noisy model) | test accuracy {fmt([r['base_test'] for r in runs])} | | | |")
    L += [
        "",
        "## (c) Summarisation: logistic regression on m points, mean test log-likelihood",
        "",
        "| data | m | SBQ | SBQ (F = I) | random | all training data |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in res["summarisation"].items():
        for m in grids[name]["m"]:
            L.append(
                f"| {name} | {m} | "
                + " | ".join(
                    fmt([r[k][m]["test_ll"] for r in runs], pct=False) for k in ("sbq", "sbq-identity", "random")
                )
                + f" | {fmt([r['full'] for r in runs], pct=False)} |"
            )
    rec = res["recommendations"]
    L += [
        "",
        f"## (d) Recommendations (ml-100k, {len(rec)} users' top-10 lists): share of ‖μ_T‖² explained (%)",
        "",
        "| m | SBQ prototypes | random interactions of the user or the items (optimal weights) |",
        "|---|---|---|",
    ]
    for m in (5, 10, 20):
        L.append(f"| {m} | {fmt([r[f'sbq_{m}'] for r in rec])} | {fmt([r[f'random_{m}'] for r in rec])} |")
    return "\n".join(L) + "\n"


def plot(res, grids) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    for col, (name, runs) in enumerate(res["flips"].items()):
        ax = axes[0, col]
        for k in ("sbq", "sbq-identity", "self-influence", "random"):
            b = grids[name]["budget"]
            mh = [ci([r[k][c]["found"] for r in runs]) for c in b]
            ax.errorbar(
                b, [x[0] for x in mh], yerr=[x[1] for x in mh], label=k, capsize=3, marker="o", color=COLOURS[k]
            )
        ax.set(title=f"(b) flipped labels found — {name}", xlabel="training points checked", ylabel="share of flips")
        ax.legend()
    for col, (name, runs) in enumerate(res["summarisation"].items()):
        ax = axes[1, col]
        for k in ("sbq", "sbq-identity", "random"):
            ms = grids[name]["m"]
            mh = [ci([r[k][m]["test_ll"] for r in runs]) for m in ms]
            ax.errorbar(
                ms, [x[0] for x in mh], yerr=[x[1] for x in mh], label=k, capsize=3, marker="o", color=COLOURS[k]
            )
        ax.axhline(ci([r["full"] for r in runs])[0], color="k", ls=":", label="all training data")
        ax.set(title=f"(c) summarisation — {name}", xlabel="m", ylabel="mean test log-likelihood")
        ax.legend()
    fig.tight_layout()
    fig.savefig(PROTOTYPES / "applications.png", dpi=110)


if __name__ == "__main__":
    main()
