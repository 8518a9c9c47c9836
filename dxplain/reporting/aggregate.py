"""The numbers of a run's report, from its manifest and its attribution rows.

Rows come in as record batches (``io.runs.open_run(run).to_batches(...)``), so a run of any size is read
once, in bounded memory: what is kept per batch is one row per target and side, and fixed-bin counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..explain.run_rows import SIDES, decade_counts, relative_error

SIGNS = ("positive", "negative")
# One attribution's share of its target's score, |importance| / |score|, counted in quarter decades from
# 1e-6 to 100: fixed bins, so batches add up without a second pass. Bin b holds SHARE_EDGES[b-1] ≤ share <
# SHARE_EDGES[b]; bin 0 everything below 1e-6, the last bin everything from 100 up.
SHARE_EDGES = 10.0 ** np.arange(-6, 2.01, 0.25)
# The columns the scan reads: the rest of a row (training user/item, rating, α, inner product) is not needed.
SCAN_COLUMNS = ["user", "item", "side", "score", "importance"]


@dataclass
class RunRows:
    """A run's attribution rows, summed per target and side.

    Attributes
    ----------
    per_target : pa.Table
        One row per (user, item, side): ``score``, ``rows`` (attributions kept in the run), ``total``
        (their sum).
    shares : dict
        (side, sign) → counts of the attributions' shares of the score over ``SHARE_EDGES``'s bins.
    """

    per_target: pa.Table
    shares: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)

    def side(self, side: str) -> pa.Table:
        return self.per_target.filter(pc.equal(self.per_target.column("side"), side))

    def users(self) -> list:
        """The users with a recommendation in the run, in id order."""
        return sorted(pc.unique(self.per_target.column("user")).to_pylist())


def _strings(side: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    # The run stores the side as a dictionary; group-bys and filters here compare plain strings.
    return pc.cast(side, pa.string())


def scan_rows(batches: Iterable[pa.RecordBatch]) -> RunRows:
    """Sum a run's rows (``SCAN_COLUMNS``) per target and side, and count their shares of the score."""
    partials, shares = [], {(s, sign): np.zeros(len(SHARE_EDGES) + 1, np.int64) for s in SIDES for sign in SIGNS}
    for batch in batches:
        side = _strings(batch.column("side"))
        t = pa.table(
            {
                "user": batch.column("user"),
                "item": batch.column("item"),
                "side": side,
                "score": batch.column("score"),
                "importance": batch.column("importance"),
            }
        )
        partials.append(
            t.group_by(["user", "item", "side"], use_threads=False).aggregate(
                [("score", "max"), ("importance", "count"), ("importance", "sum")]
            )
        )
        importance, score, sides = (t.column(c).to_numpy() for c in ("importance", "score", "side"))
        share = np.abs(importance) / np.maximum(np.abs(score), 1e-12)
        for s in SIDES:
            for sign, mask in zip(SIGNS, (importance > 0, importance < 0)):
                chosen = share[(sides == s) & mask]
                shares[(s, sign)] += np.bincount(
                    np.searchsorted(SHARE_EDGES, chosen, side="right"), minlength=len(SHARE_EDGES) + 1
                )
    if not partials:
        empty = pa.table(
            {
                "user": pa.array([], pa.int64()),
                "item": pa.array([], pa.int64()),
                "side": pa.array([], pa.string()),
                "score": pa.array([], pa.float64()),
                "rows": pa.array([], pa.int64()),
                "total": pa.array([], pa.float64()),
            }
        )
        return RunRows(empty, shares)
    # A target's rows can span batches: the partial sums of each are added up once more.
    merged = (
        pa.concat_tables(partials)
        .group_by(["user", "item", "side"], use_threads=False)
        .aggregate([("score_max", "max"), ("importance_count", "sum"), ("importance_sum", "sum")])
    )
    per_target = pa.table(
        {
            "user": merged.column("user"),
            "item": merged.column("item"),
            "side": merged.column("side"),
            "score": merged.column("score_max_max"),
            "rows": merged.column("importance_count_sum"),
            "total": merged.column("importance_sum_sum"),
        }
    )
    return RunRows(per_target.sort_by([("user", "ascending"), ("item", "ascending"), ("side", "ascending")]), shares)


def rows_error(rows: RunRows, side: str) -> np.ndarray:
    """|Σ the side's kept rows − score| / |score| per target: the fidelity error when the run kept every
    attribution (top_k 0), else how much of the score the kept top-k rows leave out."""
    t = rows.side(side)
    return relative_error(t.column("total").to_numpy(), t.column("score").to_numpy())


def recorded_decades(shards: list[dict]) -> dict[str, dict[str, int]] | None:
    """Targets per decade of fidelity error and side, added up over the shards' entries; None when a
    shard did not record them (a run written before they were recorded)."""
    out = {}
    for side in SIDES:
        key = f"rel_error_decades_{side}"
        if any(key not in e for e in shards):
            return None
        out[side] = dict(sum((Counter(e[key]) for e in shards), Counter()))
    return out


def fidelity_decades(shards: list[dict], rows: RunRows, top_k: int | None) -> tuple[dict, str]:
    """Targets per decade of fidelity error per side, and where they come from.

    The shards' entries record them (every training row of a side summed, whatever top_k kept); a run
    without them is measured from its rows, which is the fidelity only when it kept every attribution.
    """
    recorded = recorded_decades(shards)
    if recorded is not None:
        return recorded, "recorded"
    measured = {side: decade_counts(rows_error(rows, side)) for side in SIDES}
    return measured, "rows (all attributions)" if top_k == 0 else "rows (top-k only)"


def rows_per_target(rows: RunRows, side: str) -> np.ndarray:
    return rows.side(side).column("rows").to_numpy()


# What each summary entry is, in the order the page lists them; entries not named here follow, by key.
SUMMARY_LABELS = {
    "dataset": "data",
    "model": "model store",
    "loss": "loss",
    "prediction": "prediction",
    "lam": "λ (regulariser)",
    "lam_known": "λ known",
    "grad_norm": "gradient norm ‖∇f‖",
    "users": "users",
    "targets": "targets explained",
    "attributions": "attributions (rows)",
    "pairs_scored": "(target, training row) pairs scored",
    "top_n": "recommendations per user (top_n)",
    "top_k": "attributions kept per sign and side (top_k; 0 = all)",
    "shards": "shards",
    "resumed_shards": "shards resumed",
    "user_side_tasks": "user-side tasks",
    "seconds": "wall time, s",
    "stage_seconds": "stage wall time, s",
    "task_seconds": "time inside tasks, s",
    "attributions_per_second": "attributions per task-second",
    "peak_rss_mib": "peak memory (RSS), MiB",
    "fidelity_max_rel_error": "fidelity: max relative error",
    "fidelity_median_rel_error": "fidelity: median relative error (median of the shards' medians)",
    "fidelity_tol": "fidelity tolerance (--tol)",
    "fidelity_ok": "fidelity within tolerance",
    "fidelity_warning": "fidelity warning",
    "run": "run folder",
}


def _flat(key: str, value) -> list[tuple[str, object]]:
    if isinstance(value, dict) and value:
        return [kv for k, v in value.items() for kv in _flat(f"{key}.{k}", v)]
    return [(key, value)]


def summary_rows(summary: dict) -> list[tuple[str, str, object]]:
    """(key, label, value) per entry of a summary, nested entries flattened to ``a.b`` keys (peak memory per
    worker, seconds per stage); known entries first with their labels, then any others under their key."""
    order = [k for k in SUMMARY_LABELS if k in summary] + sorted(k for k in summary if k not in SUMMARY_LABELS)
    out = []
    for key in order:
        for flat, value in _flat(key, summary[key]):
            sub = flat[len(key) :].lstrip(".")
            out.append((flat, SUMMARY_LABELS.get(key, key) + (f": {sub}" if sub else ""), value))
    return out


@dataclass
class Reason:
    """One attribution shown under a recommendation: the training row and its importance, or a side's extra row
    (``kind`` bias or unobserved: ``explain.extra_rows``)."""

    train_user: object
    train_item: object
    rating: float
    importance: float
    kind: str = "interaction"


@dataclass
class Recommendation:
    item: object
    rec_rank: int
    prediction: float
    score: float
    reasons: dict[str, list[Reason]]  # side → the top reasons, by decreasing importance


def recommendations(rows: pa.Table, reasons: int) -> dict[object, list[Recommendation]]:
    """Per user (in id order), their recommendations by rank, each with the ``reasons`` most important
    attributions per side (as ``dxplain explain`` lists them), from the run's rows of those users. A side's
    extra row (a bias, the unobserved entries' sum) comes first, whatever its importance."""
    if rows.num_rows == 0:
        return {}
    rows = rows.set_column(rows.schema.get_field_index("side"), "side", _strings(rows.column("side")))
    kinds = _strings(rows.column("kind")) if "kind" in rows.column_names else pa.array(["interaction"] * rows.num_rows)
    rows = rows.append_column("kind_name", kinds).append_column(
        "training_row", pc.equal(kinds, "interaction")
    )  # false first: the extra row heads its side
    rows = rows.sort_by(
        [
            ("user", "ascending"),
            ("rec_rank", "ascending"),
            ("item", "ascending"),
            ("side", "ascending"),
            ("training_row", "ascending"),
            ("importance", "descending"),
        ]
    )
    # Only the first ``reasons`` training rows of each (user, item, side) become Python objects: a run that kept
    # every attribution has hundreds per target.
    u, i, s = (rows.column(c).to_numpy(zero_copy_only=False) for c in ("user", "item", "side"))
    training = rows.column("training_row").to_numpy(zero_copy_only=False)
    n = len(u)
    starts = np.ones(n, bool)
    starts[1:] = (u[1:] != u[:-1]) | (i[1:] != i[:-1]) | (s[1:] != s[:-1])
    counted = np.cumsum(training)  # the training rows up to each row, within its group below
    before = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    position = counted - (counted[before] - training[before])
    out: dict[object, list[Recommendation]] = {}
    for r in rows.filter(pa.array(~training | (position <= reasons))).to_pylist():
        recs = out.setdefault(r["user"], [])
        if not recs or recs[-1].item != r["item"]:
            recs.append(Recommendation(r["item"], r["rec_rank"], r["prediction"], r["score"], {s: [] for s in SIDES}))
        reason = Reason(r["train_user"], r["train_item"], r["rating"], r["importance"], r["kind_name"])
        recs[-1].reasons[r["side"]].append(reason)
    return out
