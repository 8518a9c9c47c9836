"""GAMMLI at scale: `dxplain gammli fit` on eq. 6 data of N interactions, on a 2-worker LocalCluster.

    flock /tmp/dxplain-heavy.lock nice -n 5 python -m benchmarks.gammli.scale --sizes 1000000 10000000

Per size: the data is made by `dxplain datasets synth --kind gammli` (users = items = √(10·N), the
simulation's 10% density; kept under ``--data``), then fitted by the CLI in its own process, exactly as a
user runs it, with (K, L, λ) fixed at (10, 10, 10) so the rows time the fitting stages rather than the grid,
and at most ``--max-sweeps`` ALS sweeps per stage-3 fit. Recorded from the run's ``metrics.json``: seconds
per stage, peak RSS (VmHWM) of the flow's process and of each worker. Writes
``benchmarks/results/gammli/scale.json`` with the cost slopes log(t₂/t₁)/log(N₂/N₁) between consecutive sizes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, ROOT, parser


def cli(*args: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dxplain.cli", *args], check=True, cwd=ROOT)
    return time.perf_counter() - t


def run(n_obs: int, workers: int, max_sweeps: int, data: Path, out: Path) -> dict:
    d = data / f"gammli-{n_obs}"
    gen = None
    if not (d / "interactions.parquet").exists():
        gen = cli("datasets", "synth", "--kind", "gammli", "--interactions", str(n_obs), "--seed", "0", "--out", str(d))
    o = out / f"fit-{n_obs}"
    wall = cli(
        "gammli",
        "fit",
        "--dataset",
        str(d / "interactions.parquet"),
        "--user-features",
        str(d / "user_features.parquet"),
        "--item-features",
        str(d / "item_features.parquet"),
        "--K",
        "10",
        "--L",
        "10",
        "--lam",
        "10",
        "--max-sweeps",
        str(max_sweeps),
        "--workers",
        str(workers),
        "--out",
        str(o),
        "--force",
    )
    m = json.loads((o / "metrics.json").read_text())
    meta = json.loads((o / "model" / "meta.json").read_text())
    return {
        "n": m["n_train"],
        "generate_seconds": None if gen is None else round(gen, 1),
        "wall_seconds": round(wall, 1),
        "seconds": m["seconds"],
        "sweeps": meta["info"]["sweeps"],
        "backfit_sweeps": meta["info"]["backfit_sweeps"],
        "relative_change": meta["info"]["relative_change"],
        "peak_rss_mib": m["peak_rss_mib"],
        "train_parts": meta["train_parts"],
    }


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-sweeps", type=int, default=100)
    p.add_argument("--data", default=str(ROOT / "bench-data"), help="where the synthetic tables are kept")
    p.add_argument("--fits", default="/tmp/dxplain-gammli-scale", help="where the fits' --out folders go")
    p.add_argument("--out", default=str(RESULTS / "gammli" / "scale.json"))
    a = p.parse_args(argv)
    rows = []
    for n in a.sizes:
        rows.append(run(n, a.workers, a.max_sweeps, Path(a.data), Path(a.fits)))
        print(json.dumps(rows[-1]), flush=True)
        slopes = {}
        for r1, r2 in zip(rows, rows[1:]):
            slopes[f"{r1['n']}->{r2['n']}"] = {
                k: round(float(np.log(r2["seconds"][k] / max(r1["seconds"][k], 1e-3)) / np.log(r2["n"] / r1["n"])), 3)
                for k in r1["seconds"]
                if k in r2["seconds"]
            }
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"args": vars(a), "runs": rows, "slopes": slopes}, indent=1))


if __name__ == "__main__":
    main()
