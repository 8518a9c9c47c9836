"""MovieLens-100k's cold start over several seeded splits: how much of a model gap is the choice of 94 users.

    flock /tmp/dxplain-heavy.lock nice -n 5 python -m benchmarks.gammli.ml100k_splits --seeds 0 1 2 3 4

The cold test set of one split is every rating of 94 held-out users, so its RMSE moves with which users
are drawn: a user's mean rating varies far more than any model's correction of it. Per split seed s this
runs ``benchmarks.gammli.data --seed s`` (the split: held-out users and warm test rows) and
``benchmarks.gammli.ml100k`` on it, each in its own process (every model, its own seeds fixed at 0; nothing
is tuned on the test file), keeps each split's result in
``benchmarks/results/gammli/ml100k-splits/s<seed>.json``, and writes ``ml100k_splits.json``: per model the
mean and sample SD of warm and cold RMSE over the splits, and GAMMLI's paired cold-RMSE difference to each
other model (mean, its standard error, and on how many splits GAMMLI was lower).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, ROOT, parser


def run(module: str, *args: str) -> None:
    """``python -m <module> <args>`` from the repository root, as a user runs it; stop if it fails."""
    subprocess.run([sys.executable, "-m", module, *args], check=True, cwd=ROOT)


def summary(runs: dict[int, dict]) -> dict:
    models = list(next(iter(runs.values()))["results"])
    rmse = {
        m: {side: np.array([r["results"][m][side]["rmse"] for r in runs.values()]) for side in ("warm", "cold")}
        for m in models
    }
    out = {"seeds": list(runs), "n_cold_users_rows": [r["n_cold"] for r in runs.values()], "models": {}}
    for m in models:
        out["models"][m] = {
            side: {"mean": float(x.mean()), "sd": float(x.std(ddof=1)) if len(x) > 1 else None, "per_split": x.tolist()}
            for side, x in rmse[m].items()
        }
        if m != "GAMMLI":
            d = rmse["GAMMLI"]["cold"] - rmse[m]["cold"]
            out["models"][m]["gammli_cold_minus_this"] = {
                "mean": float(d.mean()),
                "se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else None,
                "gammli_lower_on": int((d < 0).sum()),
                "splits": len(d),
            }
    return out


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--data", default=str(ROOT / "bench-data"))
    p.add_argument("--out", default=str(RESULTS / "gammli" / "ml100k_splits.json"))
    a = p.parse_args(argv)
    each = Path(a.out).parent / "ml100k-splits"
    runs = {}
    for s in a.seeds:
        data = Path(a.data) / f"ml100k-s{s}"
        run("benchmarks.gammli.data", "--seed", str(s), "--out", str(data))
        run("benchmarks.gammli.ml100k", "--data", str(data), "--out", str(each / f"s{s}.json"))
        runs[s] = json.loads((each / f"s{s}.json").read_text())
        result = summary(runs)
        Path(a.out).write_text(json.dumps(result, indent=1))  # after every split: a cut run keeps what it did
    for m, r in result["models"].items():
        d = r.get("gammli_cold_minus_this")
        print(
            f"{m:18s} warm {r['warm']['mean']:.4f}  cold {r['cold']['mean']:.4f} ± {r['cold']['sd'] or 0:.4f}"
            + (
                ""
                if d is None
                else f"  GAMMLI − this: {d['mean']:+.4f} (se {d['se'] or 0:.4f}, "
                f"lower on {d['gammli_lower_on']}/{d['splits']})"
            )
        )


if __name__ == "__main__":
    main()
