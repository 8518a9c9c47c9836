"""GAMMLI at scale: eq. 6 data with N interactions, fitted on a 2-worker LocalCluster; time per stage, memory.

    flock /tmp/dxplain-heavy.lock nice -n 5 python benchmarks/gammli_scale.py --sizes 1000000 10000000

Users = items = √(10·N) (the simulation's 10% density). (K, L, λ) are fixed (10, 10, 10) so the rows
time the three fitting stages, not the grid; the ALS runs at most ``--max-sweeps`` sweeps. Writes
``benchmarks/results/gammli/scale.json`` (per size: seconds per stage, peak RSS of the flow process and
of each worker) and the cost slopes log(t₂/t₁)/log(N₂/N₁) between consecutive sizes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def run(n_obs: int, workers: int, max_sweeps: int) -> dict:
    from dxplain.config import Settings
    from dxplain.distributed.cluster import connect
    from dxplain.distributed.mapper import DaskMapper
    from dxplain.gammli.fit import Config, fit_gammli
    from dxplain.gammli.synthetic import eq6
    from dxplain.io.features import features_from_table

    side = int(round(np.sqrt(10 * n_obs)))
    t = time.perf_counter()
    d = eq6(side, side, n_obs=n_obs, seed=0)
    gen = time.perf_counter() - t
    users, items = features_from_table(d["users"], "user"), features_from_table(d["items"], "item")
    cfg = Config(K=10, L=10, lam=10.0, rank=3, max_sweeps=max_sweeps, n_parts=4 * workers, tol=1e-8)
    with connect(Settings(workers=workers, threads_per_worker=1)) as client:
        mapper = DaskMapper(client)
        m = fit_gammli(users, items, d["u"], d["i"], d["y"], cfg, mapper, log=print)
        memory = mapper.peak_rss_mib()
    return {"n": int(len(d["y"])), "users": side, "items": side, "generate_seconds": round(gen, 2),
            "seconds": m.info["seconds"], "sweeps": m.info["sweeps"], "peak_rss_mib": memory,
            "rmse_train_noise_floor": float(np.sqrt(np.mean((d["y"] - d["f"]) ** 2)))}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-sweeps", type=int, default=100)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "gammli" / "scale.json"))
    a = p.parse_args(argv)
    rows = []
    for n in a.sizes:
        rows.append(run(n, a.workers, a.max_sweeps))
        print(json.dumps(rows[-1]), flush=True)
        slopes = {}
        for r1, r2 in zip(rows, rows[1:]):
            slopes[f"{r1['n']}->{r2['n']}"] = {k: round(float(np.log(r2["seconds"][k] / max(r1["seconds"][k], 1e-3))
                                                              / np.log(r2["n"] / r1["n"])), 3)
                                               for k in r1["seconds"]}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"args": vars(a), "runs": rows, "slopes": slopes}, indent=1))


if __name__ == "__main__":
    main()
