"""Outputs of a negative-sample run, and supplied negative lists.

    <out>/negatives/<UTC timestamp>-<id>/flagged.parquet     user, item, score, rank, method
    <out>/negatives/<...>/cleaned-negatives.parquet          sampled mode: the negatives minus the flagged ones
    <out>/negatives/<...>/summary.json                       what was run and what it found

The folder is written whole, then renamed into place: a crashed run leaves nothing behind.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..interactions import Interactions
from .atomic import atomic_path
from .interactions import read_targets


def write_negatives_run(out: str | Path, flagged: pa.Table, summary: dict, cleaned: pa.Table | None = None,
                        now: dt.datetime | None = None) -> Path:
    now = now or dt.datetime.now(dt.timezone.utc)
    path = Path(out) / "negatives" / f"{now:%Y-%m-%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    with atomic_path(path) as tmp:
        tmp.mkdir(parents=True)
        pq.write_table(flagged, tmp / "flagged.parquet")
        if cleaned is not None:
            pq.write_table(cleaned, tmp / "cleaned-negatives.parquet")
        (tmp / "summary.json").write_text(json.dumps({**summary, "folder": str(path)}, indent=2, default=str))
    return path


def read_negatives(path: str | Path, P: Interactions) -> tuple[np.ndarray, np.ndarray]:
    """A Parquet/CSV list of negative (user, item) pairs in original ids; unknown ids or positives are errors."""
    t = read_targets(path, P)
    key = t.user.astype(np.int64) * P.n_items + t.item
    bad = np.isin(key, P.user.astype(np.int64) * P.n_items + P.item)
    if bad.any():
        n = int(np.flatnonzero(bad)[0])
        raise InputError(f"{path}: ({P.user_ids[t.user[n]]}, {P.item_ids[t.item[n]]}) is a positive interaction, "
                         f"not a negative ({int(bad.sum())} such pairs); remove positives from the negatives list")
    order = np.argsort(key)
    return t.user[order].astype(np.int64), t.item[order].astype(np.int64)


def pairs_table(P: Interactions, u: np.ndarray, i: np.ndarray) -> pa.Table:
    return pa.table({"user": P.user_ids.take(pa.array(u)), "item": P.item_ids.take(pa.array(i))})
