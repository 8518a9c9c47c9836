"""Lists of (user, item) pairs in original ids: the targets to explain, the negatives to score, GAMMLI's pairs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..interactions import Interactions, Targets
from ..vocabulary import Vocabulary
from .atomic import Location, atomic_file
from .tables import read_table
from .validation import index_of


def read_pairs(path: str) -> pa.Table:
    """A table of (user, item[, rating]) pairs to explain or score."""
    table = read_table(path)
    missing = [c for c in ("user", "item") if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; a pairs file needs 'user' and 'item' columns")
    if table.num_rows == 0:
        raise InputError(f"{path}: the table has no rows; give at least one (user, item) pair")
    return table


def read_targets(path: Location, data: Interactions, skip_unseen: bool | None = None) -> tuple[Targets, int]:
    """A Parquet/CSV list of (user, item) to explain, in original ids, and how many pairs were skipped.
    Ids that ``data`` lacks are an error naming them, unless ``skip_unseen`` drops their pairs (a nightly
    list that names users or items newer than the training data); False: the error says --skip-unseen would,
    None: the command has no such option."""
    table = read_table(path)
    missing = [c for c in ("user", "item") if c not in table.column_names]
    if missing:
        raise InputError(
            f"{path}: a targets file needs columns user and item; missing {missing}, found {table.column_names}"
        )
    if table.num_rows == 0:
        raise InputError(f"{path}: the targets file has no rows; list at least one (user, item) pair")
    sides = (("user", data.user_ids), ("item", data.item_ids))
    skipped = 0
    if skip_unseen:  # each id looked up once; the pairs naming an unseen one dropped
        vocabularies = [(side, Vocabulary(ids)) for side, ids in sides]
        u, i = (v.positions(v.cast(table.column(side), side, str(path))) for side, v in vocabularies)
        seen = (u >= 0) & (i >= 0)
        skipped, table = int((~seen).sum()), table.filter(pa.array(seen))
        if table.num_rows == 0:
            raise InputError(
                f"{path}: every target names a user or item the training data lacks, so nothing "
                "is left to explain; list pairs of its users and items"
            )
        u, i = u[seen].astype(np.int32), i[seen].astype(np.int32)
    else:
        found, problems = {}, []
        for side, vocabulary in sides:  # both sides' problems at once
            try:
                found[side] = index_of(table.column(side), vocabulary, side, str(path))
            except InputError as e:
                problems.append(str(e).removeprefix(f"{path}: "))
        if problems:
            hint = " (or pass --skip-unseen to drop their pairs)" if skip_unseen is False else ""
            raise InputError(f"{path}: " + "; and ".join(problems) + hint)
        u, i = found["user"], found["item"]
    key = u.astype(np.int64) * data.n_items + i
    if len(np.unique(key)) != len(key):
        raise InputError(f"{path}: the targets list repeats (user, item) pairs; list each pair once")
    rank = table.column("rec_rank").to_numpy() if "rec_rank" in table.column_names else None
    targets = Targets.from_pairs(u, i, rank)
    # Arrow's allocator keeps what it freed for reuse, which the flow's process would carry through
    # training. Hand it back.
    pa.default_memory_pool().release_unused()
    return targets, skipped


def read_negatives(path: str | Path, P: Interactions) -> tuple[np.ndarray, np.ndarray]:
    """A Parquet/CSV list of negative (user, item) pairs in original ids; unknown ids or positives are errors."""
    t, _ = read_targets(path, P)
    key = t.user.astype(np.int64) * P.n_items + t.item
    bad = np.isin(key, P.user.astype(np.int64) * P.n_items + P.item)
    if bad.any():
        n = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: ({P.user_ids[t.user[n]]}, {P.item_ids[t.item[n]]}) is a positive interaction, "
            f"not a negative ({int(bad.sum())} such pairs); remove positives from the negatives list"
        )
    order = np.argsort(key)
    return t.user[order].astype(np.int64), t.item[order].astype(np.int64)


def pairs_table(P: Interactions, u: np.ndarray, i: np.ndarray) -> pa.Table:
    """(user, item) index pairs of ``P``'s id spaces as a table of original ids."""
    return pa.table({"user": P.user_ids.take(pa.array(u)), "item": P.item_ids.take(pa.array(i))})


def read_id_list(path: Location, what: str) -> pa.Array:
    """The ids in a Parquet/CSV file's ``what`` column (or its ``id`` column), e.g. ``recommend --users``."""
    table = read_table(path)
    column = next((c for c in (what, "id") if c in table.column_names), None)
    if column is None:
        raise InputError(f"{path}: needs a {what!r} (or 'id') column of {what} ids; found {table.column_names}")
    if table.num_rows == 0:
        raise InputError(f"{path}: the table has no rows; list at least one {what} id")
    return table.column(column).combine_chunks()


def write_table_file(path: Location, table: pa.Table) -> None:
    """One Parquet file, written whole to a temporary sibling and then moved onto ``path``."""
    with atomic_file(path) as fh:
        pq.write_table(table, fh)
