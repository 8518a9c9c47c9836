"""Outputs of a negative-sample run, and supplied negative lists.

    <out>/negatives/<UTC timestamp>-<id>/flagged.parquet     user, item, score, rank, method
    <out>/negatives/<...>/cleaned-negatives.parquet          sampled mode: the negatives minus the flagged ones
    <out>/negatives/<...>/summary.json                       what was run and what it found

The folder is written whole, then renamed into place: a crashed run leaves nothing behind.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..interactions import Interactions
from .atomic import write_result_folder
from .interactions import read_targets


def write_negatives_run(out: str | Path, flagged: pa.Table, summary: dict, cleaned: pa.Table | None = None,
                        now: dt.datetime | None = None) -> Path:
    tables = {"flagged": flagged} | ({"cleaned-negatives": cleaned} if cleaned is not None else {})
    return write_result_folder(out, "negatives", tables, summary, now)


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
