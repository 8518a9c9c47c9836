"""An ``implicit``-trained ALS model imported and explained end to end, as a team would run it, one run per route.

    python -m benchmarks.als.import_refresh       # ml-100k, ratings ≥ 4 as clicks; implicit's defaults, k = 32

1. ``implicit``'s ``AlternatingLeastSquares`` (its defaults: 15 iterations, λ 0.01, α 1) fits the clicks;
   its factors are written as the Parquet files ``import-embeddings`` reads (``id``, ``embedding``).
2. ``dxplain import-embeddings --loss ials --alpha 1 --lam 0.01 --route R`` stores them (a subprocess, timed):
   ``polish`` trains on to stationarity, ``resolve`` re-solves every user against the items.
3. ``dxplain refresh --model M.zarr`` explains every user's top-10 with it (a subprocess on a 2-worker LocalCluster,
   timed) and publishes; its summary gives the fidelity against ``--tol``.

Recorded per route: what the model store says of the import (route, sweeps, seconds, factor movement, users whose
top-20 changed), the commands' wall seconds, and the run's fidelity. The polished model is exact on both sides;
the re-solved one on the user's-items side only (docs/model.md, "Train, predict, recommend, import").
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from benchmarks.als.common import ALS
from benchmarks.common import ROOT, cli_command, parser
from dxplain.datasets import resolve_dataset
from dxplain.interactions import Interactions
from dxplain.io.dataset_folders import write_dataset
from dxplain.models.base import FactorModel

LAM, ALPHA = 0.01, 1.0  # implicit's own defaults


def clicks(name: str) -> Interactions:
    d = resolve_dataset(name).interactions
    keep = d.rating >= 4
    return Interactions.from_indices(d.user[keep], d.item[keep], np.ones(int(keep.sum())), d.user_ids, d.item_ids)


def implicit_factors(d: Interactions, k: int) -> tuple[np.ndarray, np.ndarray, float]:
    from implicit.cpu.als import AlternatingLeastSquares

    R = sp.csr_matrix((d.rating.astype(np.float32), (d.user, d.item)), shape=(d.n_users, d.n_items))
    model = AlternatingLeastSquares(factors=k, regularization=LAM, alpha=ALPHA, num_threads=2, random_state=0)
    t0 = time.perf_counter()
    with threadpool_limits(1, user_api="blas"):
        model.fit(R, show_progress=False)
    return np.asarray(model.user_factors, float), np.asarray(model.item_factors, float), time.perf_counter() - t0


def run(cmd: list[str], log: Path) -> tuple[str, float]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    log.write_text(p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed; log in {log}:\n{p.stderr[-3000:]}")
    return p.stdout, seconds


def main():
    ap = parser(__doc__)
    ap.add_argument("--dataset", default="movielens-100k")
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--routes", default="polish,resolve")
    ap.add_argument("--work", default=None, help="a folder for the data, factors and runs (default: a temporary one)")
    a = ap.parse_args()
    import implicit

    work = Path(a.work or tempfile.mkdtemp(prefix="dxplain-import-"))
    d = clicks(a.dataset)
    table = {"user": d.user_ids.take(pa.array(d.user)), "item": d.item_ids.take(pa.array(d.item)), "rating": d.rating}
    write_dataset(work / "clicks", pa.table(table))
    U, V, fit_s = implicit_factors(d, a.k)
    for side, ids, F in (("user", d.user_ids, U), ("item", d.item_ids, V)):
        pq.write_table(pa.table({"id": ids, "embedding": [list(r) for r in F]}), work / f"{side}.parquet")
    rows = []
    for route in a.routes.split(","):
        store = work / f"{route}.zarr"
        rest = ["--user-factors", work / "user.parquet", "--item-factors", work / "item.parquet", "--loss", "ials"]
        rest += ["--alpha", ALPHA, "--lam", LAM, "--route", route]
        _, import_s = run(
            cli_command("import-embeddings", work / "clicks", store, *map(str, rest)), work / f"import-{route}.log"
        )
        record = FactorModel.load(store).settings["import"]
        stdout, refresh_s = run(
            cli_command("refresh", work / "clicks", work / f"out-{route}", "--model", str(store)),
            work / f"refresh-{route}.log",
        )
        s = json.loads(stdout[: stdout.index("\n}") + 2])
        rows.append(
            {
                "route": route,
                "import": record,
                "import_command_s": round(import_s, 2),
                "refresh_command_s": round(refresh_s, 2),
                "model_kind": s["model_kind"],
                "targets": s["targets"],
                "attributions": s["attributions"],
                "tol": s["fidelity_tol"],
                "fidelity_ok": s["fidelity_ok"],
                "fidelity_max_rel_error": s["fidelity_max_rel_error"],
                "fidelity_median_rel_error": s["fidelity_median_rel_error"],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    out = {
        "dataset": f"{a.dataset}, ratings ≥ 4 as clicks",
        "clicks": len(d),
        "k": a.k,
        "implicit": implicit.__version__,
        "implicit_settings": {"iterations": 15, "regularization": LAM, "alpha": ALPHA},
        "implicit_fit_s": round(fit_s, 3),
        "routes": rows,
    }
    ALS.mkdir(parents=True, exist_ok=True)
    (ALS / "import_refresh.json").write_text(json.dumps(out, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()
