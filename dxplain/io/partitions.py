"""The training interactions and their global importance α, partitioned so that a worker reads only a part.

    <root>/user/part-00000.parquet ...   users user_cuts[p]:user_cuts[p+1]   (user, item, rating, alpha)
    <root>/item/part-00000.parquet ...   items item_cuts[p]:item_cuts[p+1]   same columns
    <root>/index.json                    key, cuts and counts: written last, so its presence means complete

Rows keep the table's (user, item) order in both layouts, so every part is itself a valid ``Interactions``
over the full id spaces: a by-user part holds its users' whole histories (the item side of an explanation),
a by-item part its items' whole rater lists (the user side). Parts hold about ``rows_per_part``
interactions each, which bounds what a worker holds at once however large the table grows.
"""

from __future__ import annotations

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
    """One part: interactions over the full id spaces, and α in the same row order."""

    data: Interactions
    alpha: np.ndarray


@dataclass(frozen=True)
class Partitions:
    """Where the parts are and which users / items each holds (small: scattered to workers with the job)."""

    root: Location
    user_cuts: np.ndarray
    item_cuts: np.ndarray
    user_ids: pa.Array
    item_ids: pa.Array
    n_interactions: int

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
        t = pa.concat_tables(tables) if tables else _empty()
        user = t["user"].to_numpy()
        keep = slice(*np.searchsorted(user, [lo, hi]))  # rows are sorted by user
        return self._part(t, keep)

    def read_items(self, p: int) -> Part:
        """The interactions of the items in item part p (whole rater lists)."""
        return self._part(self._read("item", p), slice(None))

    def _read(self, side: str, p: int) -> pa.Table:
        fs, path = filesystem(join(self.root, side, _name(p)))
        with fs.open(path, "rb") as fh:
            return pq.read_table(fh)

    def _part(self, t: pa.Table, keep: slice) -> Part:
        col = {c: t[c].to_numpy()[keep] for c in t.column_names}
        data = Interactions(col["user"], col["item"], col["rating"], self.user_ids, self.item_ids)
        return Part(data, col["alpha"])


def _name(p: int) -> str:
    return f"part-{p:05d}.parquet"


def _empty() -> pa.Table:
    return pa.table({"user": pa.array([], pa.int32()), "item": pa.array([], pa.int32()),
                     "rating": pa.array([], pa.float64()), "alpha": pa.array([], pa.float64())})


def store_path(out: Location, dataset: str, data: Interactions) -> Location:
    """Where a refresh keeps the parts of this exact data (one store per data; a new model rewrites it)."""
    return join(out, "partitions", f"{dataset}-{data.fingerprint()}")


def write_partitions(root: Location, data: Interactions, alpha: np.ndarray, key: str,
                     rows_per_part: int = ROWS_PER_PART) -> Partitions:
    """Write (or reuse, when ``root`` already holds a complete store with this ``key``) the parts of ``data``.

    ``key`` names what the parts hold (data and model); a store written for another key is rewritten.
    Each file is written atomically and the index last, so a crash leaves no store a reader would trust.
    """
    if len(alpha) != len(data):
        raise ValueError(f"alpha has {len(alpha)} values for {len(data)} interactions")
    index_loc = join(root, "index.json")
    fs, path = filesystem(root)
    if exists(index_loc):
        index = json.loads(read_text(index_loc))
        if index.get("key") == key and index.get("n_interactions") == len(data):
            return _partitions(root, index, data)
        fs.rm(filesystem(index_loc)[1])  # the store is about to change: never trust it half-rewritten
    n_parts = max(1, -(-len(data) // max(1, rows_per_part)))
    user_cuts, item_cuts = equal_cuts(data.user_indptr, n_parts), equal_cuts(data.item_indptr, n_parts)
    for side in ("user", "item"):
        fs.makedirs(f"{path}/{side}", exist_ok=True)
    for p, (a, b) in enumerate(itertools.pairwise(user_cuts)):
        rows = np.arange(data.user_indptr[a], data.user_indptr[b])
        _write(join(root, "user", _name(p)), data, alpha, rows)
    for p, (a, b) in enumerate(itertools.pairwise(item_cuts)):
        rows = np.sort(data.item_order[data.item_indptr[a]:data.item_indptr[b]])  # back to (user, item) order
        _write(join(root, "item", _name(p)), data, alpha, rows)
    index = {"key": key, "n_interactions": len(data), "n_users": data.n_users, "n_items": data.n_items,
             "user_cuts": user_cuts.tolist(), "item_cuts": item_cuts.tolist()}
    write_text_atomic(index_loc, json.dumps(index))
    return _partitions(root, index, data)


def _write(loc: Location, data: Interactions, alpha: np.ndarray, rows: np.ndarray) -> None:
    table = pa.table({"user": data.user[rows], "item": data.item[rows], "rating": data.rating[rows],
                      "alpha": alpha[rows]})
    with atomic_file(loc) as fh:
        pq.write_table(table, fh, compression="lz4")  # read many times per run: lz4 decodes fastest (measured)


def _partitions(root: Location, index: dict, data: Interactions) -> Partitions:
    return Partitions(root, np.asarray(index["user_cuts"], np.int64), np.asarray(index["item_cuts"], np.int64),
                      data.user_ids, data.item_ids, int(index["n_interactions"]))
