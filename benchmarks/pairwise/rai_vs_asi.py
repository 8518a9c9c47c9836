"""RAIPair against ASIPair: relative ℓ2 error ‖φ_RAI − φ_ASI‖ / ‖φ_ASI‖ and top-10% overlap (features in both
top-⌈0.1·D⌉ sets), over a grid of H (permutations) and M (measurements), OPAUC on the UCI sets.

ASIPair needs D ≤ 16: Heart (13) and Diabetes (8) are used whole; Parkinson (22) and Ionosphere (34) are
cut to their first 12 features (a scaled-down stand-in, said so in the output).

    python -m benchmarks.pairwise.rai_vs_asi [--pairs 10] [--seed 0]
"""

import json
import math

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import parser
from benchmarks.pairwise.common import PAIRWISE, UCI_SETS, uci, write
from dxplain.pairwise.models import OPAUC
from dxplain.pairwise.pairs import choose_pairs, split
from dxplain.pairwise.shapley import asipair, default_h, default_m, raipair, reference

CUT = 12


def main():
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hs", default="5,20,80,320")
    ap.add_argument("--sets", default=",".join(UCI_SETS), help="run these and merge into the existing results")
    a = ap.parse_args()
    hs = [int(h) for h in a.hs.split(",")]
    old = PAIRWISE / "rai_vs_asi.json"
    out = json.loads(old.read_text()) if old.exists() else {}
    if out.get("pairs") != a.pairs or out.get("H") != hs or out.get("seed") != a.seed:
        out = {"pairs": a.pairs, "seed": a.seed, "H": hs, "sets": {}}
    with threadpool_limits(1):
        for name in a.sets.split(","):
            X, y, feats = uci(name)
            cut = X.shape[1] > 16
            if cut:
                X = X[:, :CUT]
            train, test = split(y, a.seed)
            zeta = OPAUC(seed=a.seed).fit(X[train], y[train])
            ref = reference(zeta, X[train])
            D = ref.D
            pa, pb = choose_pairs(y[test], a.pairs, "opauc", a.seed)
            Xi, Xj = X[test][pa], X[test][pb]
            exact = [asipair(zeta, Xi[n], Xj[n], ref)[0] for n in range(len(pa))]
            ms = sorted({max(2, D // 4), max(2, D // 2), default_m(D), D})
            k = max(1, math.ceil(0.1 * D))
            grid = []
            for M in ms:
                for H in hs:
                    err, overlap, num, den = [], [], 0.0, 0.0
                    for n in range(len(pa)):
                        phi = raipair(zeta, Xi[n], Xj[n], ref, np.random.default_rng([a.seed, n, H, M]), H=H, M=M)[0]
                        err.append(np.linalg.norm(phi - exact[n]) / max(np.linalg.norm(exact[n]), 1e-300))
                        num, den = num + np.linalg.norm(phi - exact[n]), den + np.linalg.norm(exact[n])
                        overlap.append(len(set(np.argsort(-phi)[:k]) & set(np.argsort(-exact[n])[:k])) / k)
                    grid.append(
                        {
                            "M": M,
                            "H": H,
                            "rel_l2_error": float(np.mean(err)),
                            "rel_l2_error_median": float(np.median(err)),
                            "pooled_rel_l2_error": num / den,
                            "rel_l2_error_sd": float(np.std(err)),
                            "top10_overlap": float(np.mean(overlap)),
                        }
                    )
                    print(name, grid[-1], flush=True)
            out["sets"][name] = {
                "D": D,
                "cut_to_first_features": CUT if cut else None,
                "default_M": default_m(D),
                "default_H": default_h(default_m(D)),
                "top_k": k,
                "grid": grid,
            }
    write("rai_vs_asi", out)


if __name__ == "__main__":
    main()
