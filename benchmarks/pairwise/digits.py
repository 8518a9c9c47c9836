"""Figs. 3–4 on scikit-learn's 8×8 digits, 1 vs 9 (D = 64; the stand-in for the paper's 784-pixel MNIST
1v9): OPAUC (9 positive), RAIPair on a few test (9, 1) pairs: the deviation scores φ̂ (Fig. 3, how sparse)
and the top 8% of pixels highlighted on each pair (Fig. 4, a PNG).

    python -m benchmarks.pairwise.digits [--pairs 4]
"""

import math

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import parser
from benchmarks.pairwise.common import PAIRWISE, timed, write
from dxplain.pairwise.models import OPAUC
from dxplain.pairwise.pairs import choose_pairs, split
from dxplain.pairwise.shapley import raipair, reference


def main():
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from sklearn.datasets import load_digits

    d = load_digits()
    keep = np.isin(d.target, (1, 9))
    X, y = d.data[keep].astype(float), (d.target[keep] == 9).astype(np.int64)
    train, test = split(y, a.seed)
    zeta = OPAUC(seed=a.seed).fit(X[train], y[train])
    ref = reference(zeta, X[train])
    pi, pj = choose_pairs(y[test], a.pairs, "opauc", a.seed)
    k = math.ceil(0.08 * ref.D)
    rows = []
    with threadpool_limits(1):
        for n in range(len(pi)):
            (phi, z, info), secs = timed(
                raipair, zeta, X[test][pi[n]], X[test][pj[n]], ref, np.random.default_rng([a.seed, n])
            )
            hat = info["phi_hat"]
            rows.append(
                {
                    "i": int(test[pi[n]]),
                    "j": int(test[pj[n]]),
                    "zeta": z,
                    "seconds": secs,
                    "M": info["M"],
                    "H": info["H"],
                    "phi": phi.tolist(),
                    "phi_hat": hat.tolist(),
                    "nonzero_deviation_share": float(np.mean(np.abs(hat) > 1e-12)),
                    "top8pct": np.argsort(-phi)[:k].tolist(),
                }
            )
            print(n, secs, rows[-1]["nonzero_deviation_share"], flush=True)
    out = {
        "D": ref.D,
        "train": len(train),
        "test_auc": zeta.auc(X[test], y[test]),
        "top_k": k,
        "pairs": rows,
        "note": "scikit-learn 8x8 digits stand in for the paper's 28x28 MNIST 1v9",
    }
    write("digits", out)
    plot(X[test], pi, pj, rows)


def plot(Xt, pi, pj, rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(rows), figsize=(3 * len(rows), 8.4), squeeze=False)
    for c, r in enumerate(rows):
        axes[0][c].bar(np.arange(len(r["phi_hat"])), r["phi_hat"], color="k")
        axes[0][c].set_title(f"pair {c}: deviation φ̂ (Fig. 3)", fontsize=8)
        for row, img in ((1, Xt[pi[c]]), (2, Xt[pj[c]])):
            ax = axes[row][c]
            ax.imshow(img.reshape(8, 8), cmap="gray_r")
            for p in r["top8pct"]:
                ax.add_patch(plt.Rectangle((p % 8 - 0.5, p // 8 - 0.5), 1, 1, fill=False, color="red", lw=2))
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(("9 (positive)" if row == 1 else "1 (negative)") + ": top 8% red", fontsize=8)
    fig.tight_layout()
    fig.savefig(PAIRWISE / "digits.png", dpi=110)


if __name__ == "__main__":
    main()
