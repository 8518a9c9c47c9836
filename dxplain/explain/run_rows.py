"""A run's rows and their fidelity: the output schema every explanation is written in, and the error measures.

One row per attribution (``SCHEMA_FIELDS``): a training row of the target's side (kind ``interaction``), or a
side's extra row (``bias``, ``unobserved``, ``unobserved_term``; ``explain.extra_rows``), which has no training
pair: its ids name the target's own user or item (the other is null), its rating is null, and its importance is
its value (α and local importance: the bias's c_j/κ² and κ², null for the unobserved entries' sum).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from scipy.special import expit

from ..interactions import Targets
from ..kernels import representer as K
from .extra_rows import KINDS

SIDES = ["item", "user"]
SCHEMA_FIELDS = [
    "user",
    "item",
    "prediction",
    "score",
    "rec_rank",
    "side",
    "train_user",
    "train_item",
    "rating",
    "global_importance",
    "local_importance",
    "importance",
    "kind",
]
# The columns of extra rows (``extra_columns``), in index form: ids −1 and floats NaN where null.
EXTRA_COLUMNS = ("kind", "target", "train_user", "train_item", "rating", "global_importance", "local_importance")


def predictions(loss: str, mu: float, s: np.ndarray) -> np.ndarray:
    """What a score means to a user: a rating μ + s (squared loss), a probability σ(s) (BCE), the preference
    score s itself (iALS, μ = 0)."""
    return expit(s + mu) if loss == "bce" else s + mu


def extra_columns(extra, t: Targets, side: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """The extra row of every target of ``t`` on one side (``extra``: ``extra_rows.BiasRows`` or
    ``UnobservedRows``), with importance ``values``, as ``EXTRA_COLUMNS`` plus ``importance``."""
    n = len(t)
    owner = extra.owner(side)
    g, loc = extra.alpha_local(values)
    return {
        "kind": np.full(n, KINDS.index(extra.kind), np.int8),
        "target": np.arange(n, dtype=np.int64),
        "train_user": t.user.astype(np.int64) if owner == "user" else np.full(n, -1, np.int64),
        "train_item": t.item.astype(np.int64) if owner == "item" else np.full(n, -1, np.int64),
        "rating": np.full(n, np.nan),
        "global_importance": g,
        "local_importance": loc,
        "importance": np.asarray(values, np.float64),
    }


def term_columns(t: Targets, side: str, target, other, alpha, local) -> dict[str, np.ndarray]:
    """Rows of kind ``unobserved_term``: unobserved entries (``other``: an item on the item side, a user on the
    user side) among the largest terms of a target's ``unobserved`` row, α and local importance their own."""
    target = np.asarray(target, np.int64)
    other = np.asarray(other, np.int64)
    own_user, own_item = t.user[target].astype(np.int64), t.item[target].astype(np.int64)
    return {
        "kind": np.full(len(target), KINDS.index("unobserved_term"), np.int8),
        "target": target,
        "train_user": own_user if side == "item" else other,
        "train_item": other if side == "item" else own_item,
        "rating": np.full(len(target), np.nan),
        "global_importance": np.asarray(alpha, np.float64),
        "local_importance": np.asarray(local, np.float64),
        "importance": np.asarray(alpha, np.float64) * np.asarray(local, np.float64),
    }


def _ids(ids: pa.Array, index: np.ndarray) -> pa.Array:
    null = index < 0
    if null.any():
        return ids.take(pa.array(np.where(null, 0, index), mask=null))
    return ids.take(pa.array(index))


def _floats(x: np.ndarray):
    null = np.isnan(x)
    return pa.array(x, mask=null) if null.any() else x


def attribution_rows(
    t: Targets,
    s: np.ndarray,
    mu: float,
    side: str,
    user_ids: pa.Array,
    item_ids: pa.Array,
    target: np.ndarray,
    train_user: np.ndarray,
    train_item: np.ndarray,
    rating: np.ndarray,
    global_importance: np.ndarray,
    local_importance: np.ndarray,
    loss: str = "squared",
    more: list[dict] | None = None,
) -> pa.Table:
    """One output row per attribution (schema ``SCHEMA_FIELDS``), ordered by ``row_order``; ``prediction``
    is what the score means under the model's ``loss`` (``predictions``).

    Attributions come as indices: ``target`` into ``t`` (and ``s``, its scores), the training row as its
    user and item indices and rating. So the rows of one side can be gathered from several parts of the
    data and ordered once. ``more``: extra rows (``extra_columns``, ``term_columns``), ordered with them.
    """
    n = len(target)
    columns = {
        "kind": np.zeros(n, np.int8),
        "target": target,
        "train_user": train_user,
        "train_item": train_item,
        "rating": rating,
        "global_importance": global_importance,
        "local_importance": local_importance,
        "importance": global_importance * local_importance,
    }
    if more:
        columns = {c: np.concatenate([columns[c], *(m[c] for m in more)]) for c in columns}
    order = row_order(columns["target"], columns["importance"])
    c = {name: v[order] for name, v in columns.items()}
    tgt = c["target"]
    return pa.table(
        {
            "user": user_ids.take(pa.array(t.user[tgt])),
            "item": item_ids.take(pa.array(t.item[tgt])),
            "prediction": predictions(loss, mu, s[tgt]),
            "score": s[tgt],
            "rec_rank": t.rec_rank[tgt],
            # One shared dictionary for both sides, so tables of either side concatenate and group.
            "side": pa.DictionaryArray.from_arrays(np.full(len(tgt), SIDES.index(side), np.int8), pa.array(SIDES)),
            "train_user": _ids(user_ids, c["train_user"].astype(np.int64)),
            "train_item": _ids(item_ids, c["train_item"].astype(np.int64)),
            "rating": _floats(c["rating"]),
            "global_importance": _floats(c["global_importance"]),
            "local_importance": _floats(c["local_importance"]),
            "importance": c["importance"],
            # Every kind in the dictionary, whatever this table holds: shards and sides concatenate and group.
            "kind": pa.DictionaryArray.from_arrays(c["kind"].astype(np.int8), pa.array(KINDS)),
        }
    )


def row_order(target: np.ndarray, importance: np.ndarray) -> np.ndarray:
    """The order of output rows: by target, then by decreasing importance, ties in input order.

    The same order as ``np.lexsort((-importance, target))``, and faster: the stable rank by importance and
    the target make one unique int64 key, so one sort of it suffices.
    """
    n = len(target)
    rank = np.empty(n, np.int64)
    rank[np.argsort(-importance, kind="stable")] = np.arange(n)
    return np.argsort(target.astype(np.int64) * max(n, 1) + rank)


# Decades of the relative fidelity error that a run counts its targets in: "e" holds the targets with
# 10^e ≤ error < 10^(e+1); the first also holds exact ones (error 0), the last everything from 10^e up.
ERROR_DECADES = range(-16, 3)


def relative_error(total: np.ndarray, score: np.ndarray, floor: float = K.SCORE_FLOOR) -> np.ndarray:
    """|Σ importance − score| / |score| per target, the score floored at ``floor`` (``SCORE_FLOOR``: a zero score
    has no scale; a biased model's floor is a share of the ratings' range, ``extra_rows.score_floor``)."""
    return np.abs(total - score) / np.maximum(np.abs(score), floor)


def decade_counts(rel: np.ndarray) -> dict[str, int]:
    """Targets per decade of their relative error (``ERROR_DECADES``), keyed by the decade's exponent,
    only the decades that hold some: counts of shards add up, and the report draws them as a histogram."""
    with np.errstate(divide="ignore"):  # an exact explanation (error 0) goes to the first decade
        e = np.clip(np.floor(np.log10(rel)), ERROR_DECADES[0], ERROR_DECADES[-1]).astype(int)
    values, counts = np.unique(e, return_counts=True)
    return {str(v): int(c) for v, c in zip(values, counts)}


def fidelity(item_sum: np.ndarray, user_sum: np.ndarray, score: np.ndarray, floor: float = K.SCORE_FLOOR) -> dict:
    """Spread of |Σ importance − score| / max(|score|, floor) per side: 0 means the explanation is exact; None
    when there is no target to measure (never a 0 for nothing); the targets per decade of it (``decade_counts``);
    and the largest absolute miss |Σ importance − score| (in the score's units)."""
    out = {}
    for side, total in (("item", item_sum), ("user", user_sum)):
        rel = relative_error(total, score, floor)
        out[side] = {
            "median_rel_error": float(np.median(rel)) if len(rel) else None,
            "max_rel_error": float(rel.max()) if len(rel) else None,
            "rel_error_decades": decade_counts(rel),
            "max_abs_error": float(np.abs(total - score).max()) if len(rel) else None,
        }
    return out
