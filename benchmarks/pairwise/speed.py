"""Fig. 2 and the vectorisation target: seconds per pair against D for ASIPair and RAIPair (LowRank on the
paper's synthetic data, N = 1000, 80% as reference), and vectorised ASIPair against a per-coalition loop.

    python -m benchmarks.pairwise.speed [--pairs 3] [--big 16,32,64,128,256,784]
    python -m benchmarks.pairwise.speed --plot     # redraw speed.png from speed.json
"""

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.common import load_result, parser
from benchmarks.pairwise.common import PAIRWISE, slope, synthetic, timed, write
from dxplain.pairwise.brute import loop_shapley
from dxplain.pairwise.models import LowRank
from dxplain.pairwise.shapley import asipair, default_h, default_m, raipair, reference


def setup(D, seed=0, N=1000):
    X, y = synthetic(N, D, seed)
    n = int(0.8 * N)
    zeta = LowRank(rank=min(4, D), seed=seed).fit(X[:n], y[:n])
    return zeta, reference(zeta, X[:n]), X[n:]


def speed_plot(r):
    """Fig. 2: seconds per pair against D (log-log), ASIPair and RAIPair."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    rows = r["rows"]
    ax.plot(
        [x["D"] for x in rows if x["asipair_s"]],
        [x["asipair_s"] for x in rows if x["asipair_s"]],
        "o-",
        label="ASIPair",
    )
    ax.plot(
        [x["D"] for x in rows],
        [x["raipair_s"] for x in rows],
        "s-",
        label=f"RAIPair (slope {r['raipair_slope_D_ge_16']:.2f} for D ≥ 16)",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("D")
    ax.set_ylabel("seconds per pair (1 thread)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(PAIRWISE / "speed.png", dpi=110)


def main():
    ap = parser(__doc__)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--big", default="16,32,64,128,256,784")
    ap.add_argument("--loop-d", type=int, default=10)
    ap.add_argument("--plot", action="store_true", help="only redraw speed.png from speed.json")
    a = ap.parse_args()
    if a.plot:
        speed_plot(load_result("pairwise/speed.json"))
        return
    rows = []
    with threadpool_limits(1):  # one core: the per-pair cost, not the machine's load
        for D in range(2, 10):
            zeta, ref, T = setup(D)
            ta = [timed(asipair, zeta, T[2 * p], T[2 * p + 1], ref)[1] for p in range(a.pairs)]
            tr = [
                timed(raipair, zeta, T[2 * p], T[2 * p + 1], ref, np.random.default_rng(p))[1] for p in range(a.pairs)
            ]
            rows.append(
                {
                    "D": D,
                    "asipair_s": float(np.mean(ta)),
                    "raipair_s": float(np.mean(tr)),
                    "M": default_m(D),
                    "H": default_h(default_m(D)),
                }
            )
            print(rows[-1], flush=True)
        for D in [int(d) for d in a.big.split(",") if d]:
            zeta, ref, T = setup(D)
            n = 1 if D > 200 else a.pairs
            tr = [timed(raipair, zeta, T[2 * p], T[2 * p + 1], ref, np.random.default_rng(p))[1] for p in range(n)]
            rows.append(
                {
                    "D": D,
                    "asipair_s": None,
                    "raipair_s": float(np.mean(tr)),
                    "M": default_m(D),
                    "H": default_h(default_m(D)),
                    "pairs": n,
                }
            )
            print(rows[-1], flush=True)
        vectorised = []
        for N in (1000, 250):  # reference 800 (Fig. 2's N) and 200 rows
            zeta, ref, T = setup(a.loop_d, N=N)
            asipair(zeta, T[0], T[1], ref)  # build the reference's whitening once (reused by every pair)
            vec = [timed(asipair, zeta, T[2 * p], T[2 * p + 1], ref) for p in range(a.pairs)]
            loop = [timed(loop_shapley, zeta, T[2 * p], T[2 * p + 1], ref, 0.2, 0.95) for p in range(a.pairs)]
            vectorised.append(
                {
                    "D": a.loop_d,
                    "reference": len(ref.Ri),
                    "vectorised_s": float(np.mean([v[1] for v in vec])),
                    "loop_s": float(np.mean([l[1] for l in loop])),
                    "max_abs_difference": max(float(np.max(np.abs(v[0][0] - l[0]))) for v, l in zip(vec, loop)),
                }
            )
            vectorised[-1]["speedup"] = vectorised[-1]["loop_s"] / vectorised[-1]["vectorised_s"]
            print(vectorised[-1], flush=True)
    big = [r for r in rows if r["D"] >= 16]
    ds = [r["D"] for r in rows]
    out = {
        "model": "LowRank, rank ≤ min(4, D), estimator by cross-validation",
        "N": 1000,
        "reference": 800,
        "threads": 1,
        "rows": rows,
        "raipair_slope_all": slope(ds, [r["raipair_s"] for r in rows]),
        "raipair_slope_D_ge_16": slope([r["D"] for r in big], [r["raipair_s"] for r in big]) if len(big) > 1 else None,
        "asipair_log2_growth_per_feature": float(np.polyfit(ds[:8], np.log2([r["asipair_s"] for r in rows[:8]]), 1)[0]),
        "vectorised": vectorised,
    }
    print(out["raipair_slope_D_ge_16"])
    write("speed", out)
    speed_plot(out)


if __name__ == "__main__":
    main()
