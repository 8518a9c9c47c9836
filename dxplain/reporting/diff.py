"""What changed between two runs: the items that entered and left each user's top-N, and why an item entered.

``changes`` compares the two runs' targets (one row per (user, item) of each run, its rec_rank and prediction):
a target in the later run only *entered*, one in the earlier only *left*. ``reasons`` picks, for each entered
target, the attribution rows of the later run that carry it most (the largest importances, either side):
they did not carry it in the earlier run, where the item was no target. ``with_reasons`` nests them into the
changes table as a list column, each row marked ``new`` when it was not a training row of the earlier run.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CHANGE_COLUMNS = ["user", "item", "change", "rank_from", "rank_to", "prediction_from", "prediction_to"]
TARGET_COLUMNS = ["user", "item", "rec_rank", "prediction"]
REASON_COLUMNS = ["user", "item", "side", "train_user", "train_item", "rating", "importance", "kind"]


def plain(t: pa.Table) -> pa.Table:
    """Dictionary columns decoded (joins and sorts take plain ones)."""
    cols = [pc.cast(c, c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in t.columns]
    return pa.table(cols, names=t.column_names)


def targets(rows: pa.Table) -> pa.Table:
    """One row per target of a run's rows (``TARGET_COLUMNS``): every row of a target repeats them."""
    t = (
        plain(rows.select(TARGET_COLUMNS))
        .group_by(["user", "item"])
        .aggregate([("rec_rank", "min"), ("prediction", "min")])
    )
    return t.rename_columns(
        [{"rec_rank_min": "rec_rank", "prediction_min": "prediction"}.get(c, c) for c in t.column_names]
    )


def changes(before: pa.Table, after: pa.Table) -> pa.Table:
    """``CHANGE_COLUMNS``: the targets of ``after`` not in ``before`` (entered) and of ``before`` not in ``after``
    (left), by user, entered first, each by rank. Both are ``targets`` tables (with the same id types), or a run's
    targets file (no prediction: those columns are null)."""
    before, after = (t if "prediction" in t.column_names else _null_prediction(t) for t in (before, after))
    a = before.append_column("in_from", pa.array(np.ones(before.num_rows, bool)))
    b = after.append_column("in_to", pa.array(np.ones(after.num_rows, bool)))
    j = a.join(b, keys=["user", "item"], join_type="full outer", left_suffix="_from", right_suffix="_to")
    in_from, in_to = pc.fill_null(j["in_from"], False), pc.fill_null(j["in_to"], False)
    j = j.filter(pc.xor(in_from, in_to))
    change = pc.if_else(pc.fill_null(j["in_to"], False), "entered", "left")
    out = pa.table(
        {
            "user": j["user"],
            "item": j["item"],
            "change": change,
            "rank_from": j["rec_rank_from"],
            "rank_to": j["rec_rank_to"],
            "prediction_from": j["prediction_from"],
            "prediction_to": j["prediction_to"],
        }
    )
    order = pc.coalesce(out["rank_to"], out["rank_from"])
    out = out.append_column("_order", order)
    out = out.sort_by([("user", "ascending"), ("change", "ascending"), ("_order", "ascending"), ("item", "ascending")])
    return out.drop_columns(["_order"])


def _null_prediction(t: pa.Table) -> pa.Table:
    return t.append_column("prediction", pa.nulls(t.num_rows, pa.float64()))


def counts(changed: pa.Table) -> dict:
    """Users whose top-N changed, and targets that entered and left, of a ``changes`` table."""
    entered = int(pc.sum(pc.equal(changed["change"], "entered")).as_py() or 0)
    users = len(pc.unique(changed["user"])) if changed.num_rows else 0
    return {"users_changed": users, "entered": entered, "left": changed.num_rows - entered}


def reasons(rows: pa.Table, entered: pa.Table, per_target: int) -> pa.Table:
    """``REASON_COLUMNS`` of the ``per_target`` training rows (kind ``interaction``) with the largest importance
    for each target of ``entered`` (user, item), from the later run's ``rows``; by target, largest first."""
    r = plain(rows.select(REASON_COLUMNS)).filter(pc.equal(pc.cast(rows["kind"], pa.string()), "interaction"))
    r = r.join(entered.select(["user", "item"]), keys=["user", "item"], join_type="inner")
    r = r.sort_by([("user", "ascending"), ("item", "ascending"), ("importance", "descending")])
    if r.num_rows == 0:
        return r
    target = np.cumsum(
        np.r_[
            True,
            pc.or_(pc.not_equal(r["user"][1:], r["user"][:-1]), pc.not_equal(r["item"][1:], r["item"][:-1])).to_numpy(
                zero_copy_only=False
            ),
        ]
    )
    start = np.r_[0, np.flatnonzero(np.diff(target)) + 1]
    position = np.arange(r.num_rows) - start[target - 1]
    return r.filter(pa.array(position < per_target))


def with_reasons(changed: pa.Table, top: pa.Table, new: np.ndarray | None) -> pa.Table:
    """``changed`` with a ``reasons`` list column: for an entered target its rows of ``top`` (``reasons``' output,
    sorted by target) as structs, each with ``new`` (``new[i]`` for row i of ``top``; null where unknown); an
    empty list for a target that left."""
    new_col = pa.array(new, pa.bool_()) if new is not None else pa.nulls(top.num_rows, pa.bool_())
    fields = ["side", "train_user", "train_item", "rating", "importance"]
    structs = pa.StructArray.from_arrays([*(top[f].combine_chunks() for f in fields), new_col], [*fields, "new"])
    # offsets of each changed row's reasons in ``top``: ``top`` is sorted by target, so a join on position works
    ids = top.select(["user", "item"]).append_column("_row", pa.array(np.arange(top.num_rows)))
    first = ids.group_by(["user", "item"]).aggregate([("_row", "min"), ("_row", "count")])
    at = (
        changed.append_column("_pos", pa.array(np.arange(changed.num_rows)))
        .join(first, keys=["user", "item"], join_type="left outer")
        .sort_by([("_pos", "ascending")])
    )
    starts = pc.fill_null(at["_row_min"], 0).to_numpy(zero_copy_only=False)
    counts = pc.fill_null(at["_row_count"], 0).to_numpy(zero_copy_only=False)
    index = np.concatenate([np.arange(s, s + c) for s, c in zip(starts, counts)] or [np.zeros(0, np.int64)])
    offsets = np.r_[0, np.cumsum(counts)].astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), structs.take(pa.array(index, pa.int64())))
    return changed.append_column("reasons", lists)
