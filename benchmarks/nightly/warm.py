"""Two nights of `dxplain refresh` as a team runs them: a daily folder of Parquet files, a day appended between them.

    python -m benchmarks.nightly.warm                          # ml-100k: the newest 1% of ratings (by time) is day 2
    python -m benchmarks.nightly.warm --data synthetic-5m      # the 5M scaling set: 1% appended, new users and items
    python -m benchmarks.nightly.warm --data synthetic-5m --reuse-night1   # night 2 only, from the last run's night 1
    python -m benchmarks.nightly.warm --data synthetic-5m --cold-only      # night 2's cold refresh alone

Per data set, each refresh a `dxplain refresh` subprocess with the defaults (biased MF, k = 32, --tol 1e-4, a
LocalCluster of 2 workers), in one run: night 1 on day 1 into OUT (cold: no run before it); night 2 on day 1 + day 2
into OUT (warm: from night 1's model); the same night 2 cold (`--cold`) into another folder. Recorded: each
refresh's wall time and stages, the warm start's record (rows added, new users and items, sweeps against the last
cold fit), both night-2 runs' fidelity, the share of users whose top-10 is the same in the warm and the cold run,
and warm / cold wall time (the issue's target: ≤ 25% at 5M). ``--cold-only``: night 2's cold refresh alone (the
ratio's denominator, when a machine has not the hours for all three), in ``cold_<data>.json``.

Day 2 of ml-100k is its newest 1% of ratings. Of a synthetic set: all rows of 0.2% of its users and 0.2% of its
items (new users and items) and random other rows, 1% in all. Results: ``benchmarks/results/nightly/warm_<data>.json``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import CACHE, RESULTS, parser
from benchmarks.scaling.common import SIZES, scaling_dataset
from dxplain.datasets import resolve_dataset
from dxplain.io import model_store, runs

NIGHTLY = RESULTS / "nightly"


def days(data: str, root: Path) -> tuple[Path, Path]:
    """(the daily folder with day 1, day 2's file kept aside), written once under ``root``."""
    folder, later = root / "daily", root / "day-02.parquet"
    if (folder / "day-01.parquet").exists() and later.exists():
        return folder, later
    source = resolve_dataset(
        "movielens-100k" if data == "movielens-100k" else str(scaling_dataset(CACHE, SIZES[data[10:]]))
    )
    d = source.interactions
    table = pa.table(
        {"user": d.user_ids.take(pa.array(d.user)), "item": d.item_ids.take(pa.array(d.item)), "rating": d.rating}
    )
    rng = np.random.default_rng(0)
    late = np.zeros(len(d), bool)
    if d.timestamp is not None:
        late[np.argsort(d.timestamp, kind="stable")[int(0.99 * len(d)) :]] = True
    else:
        late |= np.isin(d.user, rng.choice(d.n_users, d.n_users // 500, replace=False))
        late |= np.isin(d.item, rng.choice(d.n_items, d.n_items // 500, replace=False))
        extra = int(0.01 * len(d)) - int(late.sum())
        late[rng.choice(np.flatnonzero(~late), max(extra, 0), replace=False)] = True
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.filter(pa.array(~late)), folder / "day-01.parquet")
    pq.write_table(table.filter(pa.array(late)), later)
    return folder, later


def refresh(dataset: Path, out: Path, *extra: str) -> dict:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "dxplain.cli", "refresh", "--dataset", str(dataset), "--out", str(out), "-q", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    s = runs.read_manifest(runs.resolve_run(out))["summary"]
    return {"wall_s": round(time.perf_counter() - t0, 1), **kept(s)}


def kept(summary: dict) -> dict:
    """What the results keep of a run's summary, with its model's sweeps and Newton steps."""
    keep = ("stage_seconds", "training_start", "fidelity_max_rel_error", "fidelity_ok", "targets", "model")
    info = model_store.model_attrs(summary["model"]).get("info") or {}
    return {k: summary[k] for k in keep} | {"sweeps": info.get("sweeps"), "newton_steps": info.get("newton_iters")}


def top_n(out: Path) -> dict:
    t = runs.open_run(runs.resolve_run(out)).to_table(columns=["user", "item"])
    found: dict = {}
    for u, i in zip(t["user"].to_pylist(), t["item"].to_pylist()):
        found.setdefault(u, set()).add(i)
    return found


def reused_night1(out: Path) -> dict:
    """Night 1 of an earlier run of this benchmark, kept in ``out`` as if just published: its run and model stay;
    later runs, models and part stores (night 2's, which would be reused) go. Its summary, wall time unknown."""
    found = sorted(p for p in (out / "runs").iterdir() if p.is_dir())
    if not found:
        raise SystemExit(f"--reuse-night1: no run in {out}; run the benchmark once without it")
    run = found[0]
    summary = runs.read_manifest(run)["summary"]
    model = Path(summary["model"])
    fingerprint = model.name.split("-")[1]
    for p in found[1:]:
        shutil.rmtree(p)
    for p in (out / "models").iterdir():
        if p != model:
            shutil.rmtree(p)
    for p in (out / "partitions").iterdir():
        if fingerprint not in p.name:
            shutil.rmtree(p)
    runs.publish_latest(str(out), str(run))
    return {"wall_s": None, "reused": run.name, **kept(summary)}


def main():
    ap = parser(__doc__)
    ap.add_argument("--data", default="movielens-100k", help="movielens-100k or synthetic-<1m|5m|20m|50m>")
    ap.add_argument(
        "--reuse-night1",
        action="store_true",
        help="keep night 1 (its run, model and parts) from the last run of this benchmark and run night 2 only",
    )
    ap.add_argument("--cold-only", action="store_true", help="run night 2's cold refresh only (cold_<data>.json)")
    a = ap.parse_args()
    root = CACHE / "nightly" / a.data
    folder, later = days(a.data, root)
    if a.cold_only:
        shutil.rmtree(root / "cold", ignore_errors=True)
        shutil.copy(later, folder / "day-02.parquet")
        cold = refresh(folder, root / "cold", "--cold")
        NIGHTLY.mkdir(parents=True, exist_ok=True)
        (NIGHTLY / f"cold_{a.data}.json").write_text(json.dumps({"data": a.data, "night2_cold": cold}, indent=2) + "\n")
        print("night 2, cold:", json.dumps(cold))
        return
    for out in ("cold",) if a.reuse_night1 else ("out", "cold"):
        shutil.rmtree(root / out, ignore_errors=True)
    (folder / "day-02.parquet").unlink(missing_ok=True)
    night1 = reused_night1(root / "out") if a.reuse_night1 else refresh(folder, root / "out")
    print("night 1:", json.dumps(night1), flush=True)
    shutil.copy(later, folder / "day-02.parquet")
    warm = refresh(folder, root / "out")
    print("night 2, warm:", json.dumps(warm), flush=True)
    cold = refresh(folder, root / "cold", "--cold")
    print("night 2, cold:", json.dumps(cold), flush=True)
    a_top, b_top = top_n(root / "out"), top_n(root / "cold")
    same = sum(a_top[u] == b_top.get(u) for u in a_top)
    result = {
        "data": a.data,
        "rows_day1": pq.read_metadata(folder / "day-01.parquet").num_rows,
        "rows_day2": pq.read_metadata(later).num_rows,
        "night1": night1,
        "night2_warm": warm,
        "night2_cold": cold,
        "top10_same_users": same,
        "users": len(a_top),
        "top10_same_share": round(same / len(a_top), 4),
        "warm_over_cold_wall": round(warm["wall_s"] / cold["wall_s"], 3),
        "warm_over_cold_train": round(warm["stage_seconds"]["train"] / cold["stage_seconds"]["train"], 3),
        "target_wall_share": 0.25,
    }
    NIGHTLY.mkdir(parents=True, exist_ok=True)
    (NIGHTLY / f"warm_{a.data}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("night")}))


if __name__ == "__main__":
    main()
