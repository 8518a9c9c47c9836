"""Amazon-scale SBQ prototypes and negative-sample aggregation (issue 24): 1M–50M Amazon-like interactions
on the 2-worker LocalCluster.

    python -m benchmarks.scaling.amazon --sizes 5m,20m,50m     # ~the recorded run
    python -m benchmarks.scaling.amazon --sizes 1m --check     # and greedy over the whole table, compared
    python -m benchmarks.scaling.amazon --stages negatives --sizes 1m --check   # negatives, and their checks
    python -m benchmarks.scaling.amazon --stages negatives --sizes 50m --closed-form   # the closed-form check only
    python -m benchmarks.scaling.amazon --sizes 1m --implicit    # SBQ on BCE MF trained over the parts

Negatives (``--stages negatives``): ``dxplain negatives --negatives 4 --positive-threshold none --percent 1``
(every interaction a positive, M = 4 sampled negatives per positive, the lowest 1% flagged by the
representer), BCE MF trained over the training table's parts for ``--neg-sweeps`` sweeps (to stationarity
it takes hundreds at 1M: over 18 minutes there). Recorded in
``benchmarks/results/scaling/amazon/negatives.json`` with its stage seconds, peaks and ‖∇f‖. ``--check`` runs the
same command ``--in-memory`` (the same algorithm on this process's mapper) and compares the flagged
sets, and compares the closed form I_neg with the naive sum over the positives that share the user or
the item, on 1,000 of the sampled negatives.

Per size, as a user would run it (``python -m dxplain.cli``, a LocalCluster of 2 workers, Prefect's
ephemeral mode):

1. the set: ``dxplain datasets synth --kind amazon --interactions N`` (explicit ratings; docs/scaling.md,
   "Amazon-like data"), cached in ``~/.cache/dxplain/bench/amazon-N``;
2. a first ``dxplain prototypes --user U -m 1`` trains the model (ALS capped at ``--max-sweeps`` sweeps
   without the Newton polish: a Fisher kernel needs no stationary point) and stores it;
3. targets: the top-10 unseen items of 1,000 users drawn with a seed, scored by that model here (this
   process, not the flow's);
4. ``dxplain prototypes --targets targets.parquet -m 100``, which reuses the stored model: the SBQ run
   measured (exact greedy over the by-user parts, ``explain.prototypes_parts``).

Records each run's stage seconds and the VmHWM of the flow's process and of every worker into
``benchmarks/results/scaling/amazon/sbq.json``, and the cost slope of each stage between sizes (1 = linear).
``--check`` also selects with greedy over every row's embedding in this process (whole table: use it at
1M) and compares the prototypes and weights.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import ROOT, cli_command, parser
from benchmarks.scaling.common import AMAZON_SIZES, SCALING, amazon_dataset
from dxplain.explain.targets import recommend
from dxplain.interactions import Interactions
from dxplain.models.base import FactorModel

AMAZON = SCALING / "amazon"


def run_cli(cmd: list[str], log: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository root, append its stderr to ``log`` if given, stop if it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as fh:  # the run's own log (its stages' timings and counts)
            fh.write(f"$ {' '.join(cmd)}\n{p.stderr}\n")
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p


def runs_from_5m(results: dict) -> list[dict]:
    """The recorded runs of 5M interactions and more, by size: the ones the cost slopes are taken over."""
    return sorted(
        (r for r in results["runs"].values() if r["interactions"] >= AMAZON_SIZES["5m"]),
        key=lambda r: r["interactions"],
    )


def prototypes(folder: Path, out: Path, args: list[str], a) -> dict:
    cmd = cli_command(
        "prototypes",
        folder,
        out,
        "--k",
        str(a.k),
        "--workers",
        "2",
        "--max-sweeps",
        str(a.max_sweeps),
        "--newton-steps",
        "0",
        *args,
        *(["--implicit"] if a.implicit else []),
    )
    t0 = time.perf_counter()
    run_cli(cmd, out / "prototypes.log")
    runs = sorted((out / "prototypes").iterdir(), key=lambda f: f.stat().st_mtime)
    summary = json.loads((runs[-1] / "summary.json").read_text())
    summary["wall_seconds"] = time.perf_counter() - t0
    return summary


def user_targets(folder: Path, model_path: str, n_users: int, top_n: int, seed: int = 1) -> tuple[Path, dict]:
    """The top-``top_n`` unseen items of ``n_users`` users drawn with ``seed``; only their rows are read."""
    path = folder / f"targets-{n_users}x{top_n}.parquet"
    user_ids = pq.read_table(folder / "users.parquet")["id"]
    item_ids = pq.read_table(folder / "items.parquet")["id"]
    users = np.sort(np.random.default_rng(seed).choice(len(user_ids), n_users, replace=False))
    rows = pq.read_table(folder / "interactions.parquet", filters=[("user", "in", user_ids.take(users))])
    u = np.searchsorted(user_ids.to_numpy(), rows["user"].to_numpy())
    i = np.searchsorted(item_ids.to_numpy(), rows["item"].to_numpy())
    seen = Interactions.from_indices(u, i, rows["rating"].to_numpy(), user_ids, item_ids)
    model = FactorModel.load(model_path)
    T = recommend(model.U, model.V, seen, users, top_n)
    pq.write_table(pa.table({"user": user_ids.take(pa.array(T.user)), "item": item_ids.take(pa.array(T.item))}), path)
    return path, {"target_users": n_users, "targets": len(T), "distinct_target_items": int(len(np.unique(T.item)))}


def check(folder: Path, summary: dict, targets: Path, m: int) -> dict:
    """Greedy over every row's embedding in this process, against the flow's prototypes."""
    from dxplain.datasets import resolve_dataset
    from dxplain.explain.prototypes import mf_fisher_rows
    from dxplain.io.targets import read_targets
    from dxplain.kernels.sbq import greedy, mean_embedding

    data = resolve_dataset(str(folder)).interactions
    model = FactorModel.load(summary["model"], data)
    T = read_targets(str(targets), data)
    t0 = time.perf_counter()
    R, R_T = mf_fisher_rows(model, data, T)
    ref = greedy(R, mean_embedding(R_T), m)
    secs = time.perf_counter() - t0
    got = pq.read_table(Path(summary["folder"]) / "prototypes.parquet")
    pairs = list(
        zip(
            data.user_ids.take(pa.array(data.user[ref.index])).to_pylist(),
            data.item_ids.take(pa.array(data.item[ref.index])).to_pylist(),
        )
    )
    same = pairs == list(zip(got["user"].to_pylist(), got["item"].to_pylist()))
    rel = float(np.max(np.abs(got["weight"].to_numpy() - ref.weights) / np.abs(ref.weights))) if same else None
    return {"same_prototypes": same, "max_weight_rel_diff": rel, "whole_table_seconds": secs}


def negatives(folder: Path, out: Path, a, in_memory: bool = False) -> dict:
    cmd = cli_command(
        "negatives",
        folder,
        out,
        "--negatives",
        "4",
        "--positive-threshold",
        "none",
        "--percent",
        "1",
        "--k",
        str(a.k),
        "--max-sweeps",
        str(a.neg_sweeps),
        "--newton-steps",
        "0",
        *(["--in-memory"] if in_memory else ["--workers", "2"]),
    )
    t0 = time.perf_counter()
    run_cli(cmd)
    (run,) = (out / "negatives").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    summary.update(wall_seconds=time.perf_counter() - t0, folder=str(run))
    return summary


def check_negatives(folder: Path, summary: dict, other: dict | None, n: int = 1000, seed: int = 0) -> dict:
    """The flagged set against the in-memory run's (``other``; None skips it), and on ``n`` sampled
    negatives the closed form I_neg (``explain.negatives.negative_score``) against Σ over the positives
    sharing the user or the item."""
    from scipy.special import expit

    from dxplain.datasets import resolve_dataset
    from dxplain.explain.negatives import negative_score
    from dxplain.models.implicit_mf import ImplicitModel

    a = pq.read_table(Path(summary["folder"]) / "flagged.parquet")
    P = resolve_dataset(str(folder)).interactions
    model = ImplicitModel.from_stored(FactorModel.load(summary["model"]))  # fitted on D, whose ids are P's
    score = negative_score("representer", model, None, P)
    pairs = pq.read_table(Path(summary["folder"]) / "cleaned-negatives.parquet", columns=["user", "item"])
    pick = np.sort(np.random.default_rng(seed).choice(pairs.num_rows, n, replace=False))
    u = np.searchsorted(P.user_ids.to_numpy(), pairs["user"].take(pick).to_numpy())
    i = np.searchsorted(P.item_ids.to_numpy(), pairs["item"].take(pick).to_numpy())
    closed = score.pairs(u, i)
    # The flow's scores of its flagged pairs (S^V, S^U summed over D's parts) against P's sums here.
    fu = np.searchsorted(P.user_ids.to_numpy(), a["user"].to_numpy()[:n])
    fi = np.searchsorted(P.item_ids.to_numpy(), a["item"].to_numpy()[:n])
    flagged_rel = np.abs(score.pairs(fu, fi) - a["score"].to_numpy()[:n]) / np.abs(a["score"].to_numpy()[:n])
    Ut, Vt = score.Us, score.Vs
    item_order, item_indptr = P.item_order, P.item_indptr
    naive = np.empty(n)
    for t, (uu, ii) in enumerate(zip(u, i)):  # Definition 1 term by term: the positives of user uu and of item ii
        alpha = -model.neg_weight * expit(Ut[uu] @ Vt[ii]) / (model.lam * model.n_train)
        own = P.item[P.user_indptr[uu] : P.user_indptr[uu + 1]]
        others = P.user[item_order[item_indptr[ii] : item_indptr[ii + 1]]]
        naive[t] = alpha * (np.sum(Vt[own] @ Vt[ii]) + np.sum(Ut[others] @ Ut[uu]))
    got = {
        "closed_form_negatives": n,
        "closed_form_max_rel_diff": float(np.max(np.abs(closed - naive) / np.abs(naive))),
        "flagged_scores_max_rel_diff": float(np.max(flagged_rel)),
    }
    if other is None:
        return got
    b = pq.read_table(Path(other["folder"]) / "flagged.parquet")
    return {
        "same_flagged": bool(a.select(["user", "item"]).equals(b.select(["user", "item"]))),
        "flagged_overlap": len(
            set(zip(a["user"].to_pylist(), a["item"].to_pylist()))
            & set(zip(b["user"].to_pylist(), b["item"].to_pylist()))
        )
        / max(1, a.num_rows),
        "max_score_rel_diff": float(
            np.max(np.abs(a["score"].to_numpy() - b["score"].to_numpy()) / np.abs(b["score"].to_numpy()))
        )
        if a.num_rows == b.num_rows
        else None,
        "in_memory_seconds": other["seconds"],
        **got,
    }


def slope(sizes: list[int], values: list[float]) -> float:
    """d log(cost) / d log(|D|) between the smallest and largest size."""
    return float(np.log(values[-1] / values[0]) / np.log(sizes[-1] / sizes[0]))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sizes", default="5m,20m,50m")
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--max-sweeps", type=int, default=8)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--out", default="/tmp/dxplain-amazon-bench")
    ap.add_argument("--check", action="store_true")
    ap.add_argument(
        "--closed-form",
        action="store_true",
        help="negatives: only the closed form against the naive sum (no in-memory run: at 50M it would "
        "take as long again)",
    )
    ap.add_argument(
        "--neg-sweeps",
        type=int,
        default=20,
        help="alternating sweeps of the negatives' BCE training (no Newton polish); ‖∇f‖ is recorded",
    )
    ap.add_argument("--stages", default="sbq", help="sbq, negatives or both (comma-separated)")
    ap.add_argument(
        "--implicit",
        action="store_true",
        help="SBQ on the implicit reading (every interaction a positive, 4 sampled negatives each, BCE "
        "MF trained over the parts for --max-sweeps sweeps); results in sbq_implicit.json",
    )
    ap.add_argument(
        "--from-negatives",
        action="store_true",
        help="with --implicit: explain the BCE model the negatives stage trained at that size (the same "
        "table D = P ∪ N: 4 negatives a positive, seed 0; its --neg-sweeps sweeps), in its output "
        "folder (its parts are reused), instead of training one; its train stage is recorded",
    )
    a = ap.parse_args()
    if a.from_negatives and not a.implicit:
        ap.error("--from-negatives explains the negatives' BCE model: add --implicit")
    if a.implicit and a.check:
        ap.error("--check compares with greedy over the explicit table; run it without --implicit")
    AMAZON.mkdir(parents=True, exist_ok=True)
    if "negatives" in a.stages.split(","):
        run_negatives(a)
    if "sbq" in a.stages.split(","):
        run_sbq(a)


def run_negatives(a) -> None:
    path = AMAZON / "negatives.json"
    results = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    for name in a.sizes.split(","):
        n = AMAZON_SIZES[name]
        folder = amazon_dataset(n)
        out = Path(a.out) / f"negatives-{name}"
        shutil.rmtree(out, ignore_errors=True)  # a fresh model store: the run trains
        got = negatives(folder, out / "cluster", a)
        run = {
            "interactions": n,
            "k": a.k,
            "per_positive": 4,
            "percent": 1,
            "max_sweeps": a.neg_sweeps,
            **{
                key: got[key]
                for key in (
                    "positives",
                    "negatives_total",
                    "flagged",
                    "grad_norm",
                    "lam",
                    "solver",
                    "sweeps",
                    "newton_iters",
                    "users",
                    "items",
                    "stage_seconds",
                    "peak_rss_mib",
                    "flow_peak_rss_mib_after_stage",
                    "seconds",
                    "wall_seconds",
                )
            },
        }
        if a.check:
            run["check"] = check_negatives(folder, got, negatives(folder, out / "memory", a, in_memory=True))
        elif a.closed_form:
            run["check"] = check_negatives(folder, got, None)
        results["runs"][name] = run
        print(json.dumps({name: run}, indent=1), flush=True)
        # After every size (a later size that fails leaves the slopes measured so far); from 5M up, as SBQ's.
        done = runs_from_5m(results)
        if len(done) > 1:
            sizes = [r["interactions"] for r in done]
            results["slopes"] = {
                stage: slope(sizes, [r["stage_seconds"][stage] for r in done]) for stage in done[0]["stage_seconds"]
            }
            results["slopes"]["sizes"] = [min(sizes), max(sizes)]
            print(json.dumps(results["slopes"]), flush=True)
        path.write_text(json.dumps(results, indent=1))


def run_sbq(a) -> None:
    path = AMAZON / ("sbq_implicit.json" if a.implicit else "sbq.json")
    results = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    for name in a.sizes.split(","):
        n = AMAZON_SIZES[name]
        folder = amazon_dataset(n)
        if a.from_negatives:  # the negatives stage's run: its model, parts and train stage
            out = Path(a.out) / f"negatives-{name}" / "cluster"
            (model,) = (out / "models").glob("*-implicit-*.zarr")
            done = json.loads((AMAZON / "negatives.json").read_text())["runs"][name]
            train = {
                "model": str(model),
                "from": "negatives.json",
                "max_sweeps": done["max_sweeps"],
                "stage_seconds": done["stage_seconds"],
                "peak_rss_mib": done["peak_rss_mib"],
                "seconds": done["seconds"],
            }
            given = ["--model", str(model)]
        else:
            out = Path(a.out) / (f"{name}-implicit" if a.implicit else name)
            shutil.rmtree(out, ignore_errors=True)  # the first run trains: its train stage is the one recorded
            first_user = pc.min(pq.read_table(folder / "users.parquet")["id"]).as_py()
            train = prototypes(folder, out, ["--user", str(first_user), "-m", "1"], a)
            given = []
        targets, info = user_targets(folder, train["model"], a.users, 10)
        sbq = prototypes(folder, out, ["--targets", str(targets), "-m", str(a.m), *given], a)
        run = {
            "interactions": n,
            **info,
            "m": a.m,
            "k": a.k,
            "max_sweeps": train.get("max_sweeps", a.max_sweeps),
            "implicit": a.implicit,
            "train": {key: train[key] for key in ("stage_seconds", "peak_rss_mib", "seconds", "from") if key in train},
            "sbq": {
                key: sbq[key]
                for key in (
                    "stage_seconds",
                    "peak_rss_mib",
                    "flow_peak_rss_mib_after_stage",
                    "seconds",
                    "wall_seconds",
                    "selected",
                    "explained_share",
                    "candidates",
                )
            },
        }
        if a.check:
            run["check"] = check(folder, sbq, targets, a.m)
        results["runs"][name] = run
        print(json.dumps({name: run}, indent=1), flush=True)
        path.write_text(json.dumps(results, indent=1))
    # The slope is from 5M up (1M is the equality check's size, where fixed costs dominate).
    done = runs_from_5m(results)
    if len(done) > 1:
        sizes = [r["interactions"] for r in done]
        results["slopes"] = {
            f"sbq_{stage}": slope(sizes, [r["sbq"]["stage_seconds"][stage] for r in done])
            for stage in ("load", "select")
        }
        results["slopes"]["train"] = slope(sizes, [r["train"]["stage_seconds"]["train"] for r in done])
        results["slopes"]["sizes"] = [min(sizes), max(sizes)]
        print(json.dumps(results["slopes"]), flush=True)
        path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
