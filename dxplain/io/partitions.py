"""The training interactions and their global importance α, partitioned so that a worker reads only a part.

    <root>/user/part-00000.parquet ...   users user_cuts[p]:user_cuts[p+1]   (user, item, rating)
    <root>/item/part-00000.parquet ...   items item_cuts[p]:item_cuts[p+1]   same columns
    <root>/index.json                    key, cuts and counts: written last, so its presence means complete
    <root>/alpha/{user,item}/part-…      α of the same rows, one column, for the model being explained
    <root>/alpha/index.json              the α key (data and model), written last

The interactions are written before training (ALS shards read them) and α after it (explanation
shards read both), so the data parts are reused by every model trained on the same data.

Rows keep the table's (user, item) order in both layouts, so every part is itself a valid ``Interactions``
over the full id spaces: a by-user part holds its users' whole histories (the item side of an explanation),
a by-item part its items' whole rater lists (the user side). Parts hold about ``rows_per_part``
interactions each, which bounds what a worker holds at once however large the table grows.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..interactions import Interactions, equal_cuts
from .atomic import Location, atomic_file, exists, filesystem, join, read_text, write_text_atomic

ROWS_PER_PART = 2_000_000  # ~50 MB of columns per part; a shard holds one item part at a time


@dataclass(frozen=True)
class Part:
    """One part: interactions over the full id spaces, and α in the same row order (None before α is written)."""

    data: Interactions
    alpha: np.ndarray | None


@dataclass(frozen=True)
class Partitions:
    """Where the parts are and which users / items each holds (small: scattered to workers with the job)."""

    root: Location
    user_cuts: np.ndarray
    item_cuts: np.ndarray
    user_ids: pa.Array
    item_ids: pa.Array
    n_interactions: int
    with_alpha: bool = False

    def item_parts(self, items: np.ndarray) -> np.ndarray:
        """The item parts that hold any of ``items``, ascending."""
        return np.unique(np.searchsorted(self.item_cuts, np.asarray(items), side="right") - 1)

    def item_range(self, p: int) -> tuple[int, int]:
        return int(self.item_cuts[p]), int(self.item_cuts[p + 1])

    def read_users(self, lo: int, hi: int) -> Part:
        """The interactions of users lo:hi (whole histories), from the by-user parts that overlap them."""
        first = int(np.searchsorted(self.user_cuts, lo, side="right") - 1)
        last = int(np.searchsorted(self.user_cuts, hi, side="left"))
        tables = [self._read("user", p) for p in range(max(first, 0), min(last, len(self.user_cuts) - 1))]
        t = pa.concat_tables(tables) if tables else _empty(self.with_alpha)
        user = t["user"].to_numpy()
        keep = slice(*np.searchsorted(user, [lo, hi]))  # rows are sorted by user
        return self._part(t, keep)

    def read_items(self, p: int, lo: int | None = None, hi: int | None = None) -> Part:
        """The interactions of the items in item part p (whole rater lists), or of its items lo:hi only."""
        t = self._read("item", p)
        if lo is None:
            return self._part(t, slice(None))
        item = t["item"].to_numpy()
        return self._part(t, (item >= lo) & (item < hi))  # rows are in (user, item) order, not by item

    def read_part(self, side: str, p: int) -> Part:
        """Part p of one side (``user`` or ``item``), its rows in file order (the order its α is written in)."""
        return self._part(self._read(side, p), slice(None))

    def _read(self, side: str, p: int) -> pa.Table:
        t = _read_table(join(self.root, side, _name(p)))
        if self.with_alpha:
            t = t.append_column("alpha", _read_table(join(self.root, "alpha", side, _name(p)))["alpha"])
        return t

    def _part(self, t: pa.Table, keep: slice | np.ndarray) -> Part:
        col = {c: t[c].to_numpy()[keep] for c in t.column_names}
        data = Interactions(col["user"], col["item"], col["rating"], self.user_ids, self.item_ids)
        return Part(data, col.get("alpha"))


def _read_table(loc: Location) -> pa.Table:
    fs, path = filesystem(loc)
    with fs.open(path, "rb") as fh:
        return pq.read_table(fh)


def _name(p: int) -> str:
    return f"part-{p:05d}.parquet"


def _empty(with_alpha: bool) -> pa.Table:
    columns = {"user": pa.array([], pa.int32()), "item": pa.array([], pa.int32()), "rating": pa.array([], pa.float64())}
    return pa.table({**columns, **({"alpha": pa.array([], pa.float64())} if with_alpha else {})})


def store_path(out: Location, dataset: str, data: Interactions) -> Location:
    """Where a refresh keeps the parts of this exact data (one store per data; a new model rewrites only α)."""
    return join(out, "partitions", f"{dataset}-{data.fingerprint()}")


def write_partitions(root: Location, data: Interactions, rows_per_part: int = ROWS_PER_PART) -> Partitions:
    """Write (or reuse, when ``root`` already holds this exact data) the by-user and by-item parts of ``data``.

    Each file is written atomically and the index last, so a crash leaves no store a reader would trust.
    """
    key = data.fingerprint()
    index = _reusable(join(root, "index.json"), key)
    if index is None:
        n_parts = max(1, -(-len(data) // max(1, rows_per_part)))
        user_cuts, item_cuts = equal_cuts(data.user_indptr, n_parts), equal_cuts(data.item_indptr, n_parts)
        def columns(rows):
            return {"user": data.user[rows], "item": data.item[rows], "rating": data.rating[rows]}

        _write_parts(root, data, user_cuts, item_cuts, columns)
        index = {"key": key, "n_interactions": len(data), "n_users": data.n_users, "n_items": data.n_items,
                 "user_cuts": user_cuts.tolist(), "item_cuts": item_cuts.tolist()}
        write_text_atomic(join(root, "index.json"), json.dumps(index))
    return Partitions(root, np.asarray(index["user_cuts"], np.int64), np.asarray(index["item_cuts"], np.int64),
                      data.user_ids, data.item_ids, int(index["n_interactions"]))


def write_alpha(parts: Partitions, data: Interactions, alpha: np.ndarray, key: str) -> Partitions:
    """Write (or reuse, for the same ``key``) α beside the parts, in their row order; parts that read it back."""
    if len(alpha) != len(data) or len(data) != parts.n_interactions:
        raise ValueError(f"alpha has {len(alpha)} values for {len(data)} interactions in a store of "
                         f"{parts.n_interactions}")
    root = join(parts.root, "alpha")
    if _reusable(join(root, "index.json"), key) is None:
        _write_parts(root, data, parts.user_cuts, parts.item_cuts, lambda rows: {"alpha": alpha[rows]})
        write_text_atomic(join(root, "index.json"), json.dumps({"key": key}))
    return dataclasses.replace(parts, with_alpha=True)


def alpha_reusable(parts: Partitions, key: str) -> bool:
    """Whether the α beside ``parts`` is complete and was written for ``key`` (a stale index is removed)."""
    return _reusable(join(parts.root, "alpha", "index.json"), key) is not None


def write_alpha_part(parts: Partitions, side: str, p: int, alpha: np.ndarray) -> None:
    """α of part p of one side, in the part's row order (``Partitions.read_part``); written atomically by
    the task that computed it. ``finish_alpha`` vouches for the set once every part is written."""
    if parts.with_alpha:
        raise ValueError("write α parts before finish_alpha, into a store read without α")
    fs, path = filesystem(join(parts.root, "alpha", side))
    fs.makedirs(path, exist_ok=True)
    _write(join(parts.root, "alpha", side, _name(p)), {"alpha": alpha})


def finish_alpha(parts: Partitions, key: str) -> Partitions:
    """Write the α index (last: its presence means every α part of ``key`` is there); parts that read α."""
    write_text_atomic(join(parts.root, "alpha", "index.json"), json.dumps({"key": key}))
    return dataclasses.replace(parts, with_alpha=True)


def _reusable(index_loc: Location, key: str) -> dict | None:
    """The index at ``index_loc`` if it has ``key``; otherwise None, and a stale index is removed first,
    because the files it vouches for are about to be rewritten."""
    if not exists(index_loc):
        return None
    index = json.loads(read_text(index_loc))
    if index.get("key") == key:
        return index
    fs, path = filesystem(index_loc)
    fs.rm(path)
    return None


def _write_parts(root: Location, data: Interactions, user_cuts: np.ndarray, item_cuts: np.ndarray, columns) -> None:
    """One file per part and side; ``columns(rows)`` gives a part's columns from its rows in data order."""
    fs, path = filesystem(root)
    for side in ("user", "item"):
        fs.makedirs(f"{path}/{side}", exist_ok=True)
    for p, (a, b) in enumerate(itertools.pairwise(user_cuts)):
        _write(join(root, "user", _name(p)), columns(np.arange(data.user_indptr[a], data.user_indptr[b])))
    for p, (a, b) in enumerate(itertools.pairwise(item_cuts)):
        rows = np.sort(data.item_order[data.item_indptr[a]:data.item_indptr[b]])  # back to (user, item) order
        _write(join(root, "item", _name(p)), columns(rows))


def _write(loc: Location, columns: dict) -> None:
    with atomic_file(loc) as fh:
        pq.write_table(pa.table(columns), fh, compression="lz4")  # read many times per run: lz4 decodes fastest
