"""Scaling benchmark (issue 3): the whole refresh on synthetic sets of 1M–50M interactions.

    python -m benchmarks.scaling.refresh                                 # 1M, 5M, 20M, 50M; every mode
    python -m benchmarks.scaling.refresh --sizes 1m,5m --modes supplied  # a quick look

Each size runs ``dxplain refresh`` as a user would (a subprocess: a LocalCluster of 2 workers, Prefect's
ephemeral mode), in each of these modes:

- ``supplied``: 10 targets per user given as a Parquet list (the production case: another system
  recommends, dxplain explains). This run trains the model.
- ``own``: dxplain's own top-10 per user (block GEMM with a memory budget). It reuses the model.
- ``uniform``: a control. 10 supplied targets per user drawn uniformly over the catalogue, so the
  explanation's work (pairs scored: Σ history + Σ raters over targets) grows like |D|. Drawn by
  popularity (``supplied``), targets land on items whose rater counts grow with |D|, and the work grows
  faster. It reuses the model.

Sets (``dxplain.datasets.synthetic``, Zipf degrees): |D|/100 users and |D|/400 items, so the top size
has 500k users and 125k items. Users are heavier than Amazon's (~5 ratings) on purpose: with 10 targets
per user and the top 10 positive and negative attributions per side, every target writes 40 rows, and
Amazon's user count would make the 50M output 4·10⁹ rows. Here it is 2·10⁸.
Ratings have rank 8 plus noise (``--rank`` another rank, cached in its own folder); the model has
``--k`` factors (64), ALS-MF unless ``--model-kind`` names another (the refresh's default for ratings is biased MF).

Training is capped at ``--max-sweeps`` ALS sweeps without the Newton polish (``--newton-steps 0``): the
polish to ‖∇f‖ ≤ 1e-9 does not have a size-independent cost (its Hessian-vector products are cheap, but
their number grows with conditioning), so a capped run is what measures cost against |D|. The summary's
gradient norm and fidelity error say how far from the optimum that leaves the model.

Records wall seconds per stage, seconds per phase inside the shard tasks, throughput and the peak RSS of
the flow process and of every worker process into ``benchmarks/results/scaling/`` (JSON, CSV, Markdown
and a PNG plot of cost against |D|).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from benchmarks.common import CACHE, ROOT, cli_command, parser
from benchmarks.scaling.common import SCALING, SIZES, TARGETS_PER_USER, scaling_dataset, supplied_targets


def refresh(folder: Path, out: Path, mode: str, a) -> dict:
    cmd = cli_command(
        "refresh",
        folder,
        out,
        "--k",
        str(a.k),
        "--top-k",
        "10",
        "--workers",
        str(a.workers),
        "--max-sweeps",
        str(a.max_sweeps),
        "--newton-steps",
        "0",
        "--model-kind",
        a.model_kind,
    )
    cmd += (
        ["--top-n", str(TARGETS_PER_USER)]
        if mode == "own"
        else ["--targets", str(supplied_targets(folder, popular=mode == "supplied"))]
    )
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    (out / f"{mode}.log").write_text(p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"refresh failed ({mode}, {folder}); log in {out / f'{mode}.log'}:\n{p.stderr[-3000:]}")
    summary = json.loads(p.stdout[: p.stdout.index("\n}") + 2])
    return {**summary, "process_wall_seconds": round(wall, 1)}


def record(n_asked: int, mode: str, s: dict, data_info: dict) -> dict:
    st, passes, mem = s["stage_seconds"], s["task_seconds"], s["peak_rss_mib"]
    # Task seconds by what they do: targets (the plan pass: recommended, or supplied ones selected),
    # explanation (the item-keyed user side, the shards' gather and item side), writing.
    ph = {
        "recommend": passes["plan"],
        "explain": passes["user_side"] + passes["gather"] + passes["explain"],
        "write": passes["write"],
    }
    return {
        "size": n_asked,
        "interactions": data_info["interactions"],
        "users": data_info["users"],
        "items": data_info["items"],
        "mode": mode,
        "targets": s["targets"],
        "attributions": s["attributions"],
        "partition_s": st.get("partition", 0.0),
        "train_s": st["train"],
        "preprocess_s": st["preprocess"],
        "recommend_explain_write_s": st["recommend_explain_write"],
        "load_s": st["load"],
        "publish_s": st["publish"],
        "total_s": s["seconds"],
        # Task seconds per phase (summed over the 2 workers), and the stage's wall split in their proportion.
        **{f"task_{k}_s": round(v, 3) for k, v in ph.items()},
        **{f"pass_{k}_s": v for k, v in passes.items()},
        **{
            f"{k}_wall_s": round(st["recommend_explain_write"] * v / max(sum(ph.values()), 1e-9), 1)
            for k, v in ph.items()
        },
        # The exact explanation's work: (target, training row) pairs scored, Σ history + Σ raters over targets.
        "pairs_scored": s["pairs_scored"],
        "pairs_per_interaction": round(s["pairs_scored"] / data_info["interactions"], 1),
        "explain_ns_per_pair": round(ph["explain"] * 1e9 / max(s["pairs_scored"], 1), 1),
        "targets_per_s": round(s["targets"] / max(st["recommend_explain_write"], 1e-9)),
        "attributions_per_s": round(s["attributions"] / max(st["recommend_explain_write"], 1e-9)),
        "peak_rss_flow_mib": mem["flow"],
        "peak_rss_worker_max_mib": max(mem["workers"].values()),
        "grad_norm": s["grad_norm"],
        "fidelity_max_rel_error_item": s["fidelity_max_rel_error"]["item"],
        "fidelity_median_rel_error_item": s["fidelity_median_rel_error"]["item"],
        "fidelity_median_rel_error_user": s["fidelity_median_rel_error"]["user"],
        **{
            f"fidelity_p99_rel_error_below_{side}": s.get("fidelity_p99_rel_error_below", {}).get(side)
            for side in ("item", "user")
        },
    }


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, cx, bx) = plt.subplots(1, 3, figsize=(16, 4.4))
    for mode, marker in (("supplied", "o"), ("own", "s"), ("uniform", "^")):
        colour = {"worker": "C0" if mode == "supplied" else "C2", "flow": "C1" if mode == "supplied" else "C3"}
        r = sorted((x for x in rows if x["mode"] == mode), key=lambda x: x["interactions"])
        if not r:
            continue
        n = np.array([x["interactions"] for x in r])
        if mode == "uniform":  # the control: only its explanation, against |D| and against its work
            ax.loglog(
                n,
                [x["explain_wall_s"] for x in r],
                marker=marker,
                color="C9",
                ls="-.",
                label="explanation (uniform targets, control)",
            )
            cx.loglog(
                [x["pairs_scored"] for x in r],
                [x["task_explain_s"] for x in r],
                marker=marker,
                color="C9",
                ls="-.",
                label="explanation task seconds (uniform)",
            )
            continue
        for key, label in (
            ("explain_wall_s", "explanation"),
            ("recommend_wall_s", "recommendation"),
            ("write_wall_s", "writing"),
            ("preprocess_s", "preprocessing"),
            ("partition_s", "partitioning"),
        ):
            if (mode == "supplied" and key == "recommend_wall_s") or (mode == "own" and key == "partition_s"):
                continue  # own targets reuse the supplied run's parts
            ax.loglog(
                n,
                [x.get(key, np.nan) for x in r],
                marker=marker,
                ls="-" if mode == "supplied" else "--",
                label=f"{label} ({mode})",
            )
        if mode == "supplied":
            ax.loglog(n, [x["train_s"] for x in r], marker=marker, color="k", label="training (supplied run)")
            # Linear through the largest point: a steeper curve would cross it from below.
            ref = r[-1]["train_s"] * n / n[-1]
            ax.loglog(n, ref, color="grey", lw=0.8, ls=":", label="∝ |D| (through the top size)")
            ax.loglog(
                n,
                r[-1]["explain_wall_s"] * n / n[-1],
                color="C0",
                lw=0.8,
                ls=":",
                label="∝ |D| (through the top explanation)",
            )
        w = [x.get("pairs_scored", np.nan) for x in r]
        cx.loglog(
            w,
            [x["task_explain_s"] for x in r],
            marker=marker,
            ls="-" if mode == "supplied" else "--",
            label=f"explanation task seconds ({mode})",
        )
        if mode == "supplied" and all(np.isfinite(w)):
            cx.loglog(
                w,
                r[-1]["task_explain_s"] * np.array(w) / w[-1],
                color="grey",
                lw=0.8,
                ls=":",
                label="∝ pairs (through the top size)",
            )
        bx.plot(
            n / 1e6,
            [x["peak_rss_worker_max_mib"] / 1024 for x in r],
            marker=marker,
            color=colour["worker"],
            label=f"worker, max ({mode})",
        )
        bx.plot(
            n / 1e6,
            [x["peak_rss_flow_mib"] / 1024 for x in r],
            marker=marker,
            ls="--",
            color=colour["flow"],
            label=f"flow ({mode})",
        )
    bx.axhline(8, color="red", lw=0.8, label="8 GiB limit")
    ax.set_xlabel("|D| (interactions)")
    ax.set_ylabel("wall seconds")
    ax.set_title("Refresh stages against |D| (2 workers)")
    ax.legend(fontsize=7)
    cx.set_xlabel("(target, training row) pairs scored")
    cx.set_ylabel("seconds in explanation tasks (both workers)")
    cx.set_title("Explanation against its work")
    cx.legend(fontsize=7)
    bx.set_xlabel("|D| (millions)")
    bx.set_ylabel("peak RSS (GiB)")
    bx.set_title("Peak memory per process")
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(rows: list[dict]) -> str:
    cols = [
        ("interactions", "|D|"),
        ("users", "users"),
        ("items", "items"),
        ("mode", "targets"),
        ("targets", "explained"),
        ("partition_s", "partition s"),
        ("train_s", "train s"),
        ("preprocess_s", "preprocess s"),
        ("recommend_wall_s", "recommend s"),
        ("explain_wall_s", "explain s"),
        ("write_wall_s", "write s"),
        ("total_s", "total s"),
        ("targets_per_s", "targets/s"),
        ("pairs_per_interaction", "pairs scored / |D|"),
        ("explain_ns_per_pair", "explain ns/pair"),
        ("peak_rss_worker_max_mib", "worker peak MiB"),
        ("peak_rss_flow_mib", "flow peak MiB"),
        ("fidelity_median_rel_error_item", "fidelity (median rel. err.)"),
    ]
    out = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for key, _ in cols:
            v = r.get(key, float("nan"))
            cells.append(
                f"{v:,}"
                if isinstance(v, int)
                else f"{v:.1e}"
                if "fidelity" in key
                else f"{v:,.1f}"
                if isinstance(v, float)
                else str(v)
            )
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = parser(__doc__)
    ap.add_argument("--sizes", default="1m,5m,20m,50m")
    ap.add_argument("--modes", default="supplied,own,uniform")
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--rank", type=int, default=8, help="the synthetic ratings' rank (8: the recorded sets)")
    ap.add_argument("--max-sweeps", type=int, default=8)
    ap.add_argument(
        "--model-kind", default="mf", help="the model trained (mf: ALS-MF, what the recorded tables measure)"
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--out", default=str(SCALING))
    a = ap.parse_args()
    if a.rank < 1:
        ap.error(f"--rank {a.rank}: give the ratings' rank, at least 1")
    results, out = Path(a.out), Path(a.cache) / "scaling-runs"
    results.mkdir(parents=True, exist_ok=True)
    store = results / "scaling.json"
    rows = json.loads(store.read_text()) if store.exists() else []
    for name in a.sizes.split(","):
        n = SIZES[name]
        folder = scaling_dataset(Path(a.cache), n, a.rank)
        # Counts from the Parquet footers: no second load of the whole table, no cache file to keep in step.
        info = {key: pq.read_metadata(folder / f"{key}.parquet").num_rows for key in ("interactions", "users", "items")}
        for mode in a.modes.split(","):
            run_out = out / (name if a.rank == 8 else f"{name}-rank{a.rank}")  # own and uniform reuse its model
            # Start clean (the earlier runs of this size are GBs); the supplied run partitions and trains
            # afresh, own reuses its parts and model.
            for old in run_out.glob("*"):
                if mode == "supplied" or old.name not in ("models", "partitions"):  # own, uniform reuse them
                    shutil.rmtree(old) if old.is_dir() else old.unlink()
            run_out.mkdir(parents=True, exist_ok=True)
            s = refresh(folder, run_out, mode, a)
            r = {**record(n, mode, s, info), "k": a.k, "data_rank": a.rank}
            print(json.dumps(r), flush=True)
            rows = [x for x in rows if (x["size"], x["mode"]) != (n, mode)] + [r]
            rows.sort(key=lambda x: (["supplied", "own", "uniform"].index(x["mode"]), x["size"]))
            store.write_text(json.dumps(rows, indent=2))
            with open(results / "scaling.csv", "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for x in rows for k in x)))
                w.writeheader()
                w.writerows(rows)
            (results / "scaling.md").write_text(markdown(rows))
            plot(rows, results / "scaling.png")
    print((results / "scaling.md").read_text())


def replot():
    rows = json.loads((SCALING / "scaling.json").read_text())
    plot(rows, SCALING / "scaling.png")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
