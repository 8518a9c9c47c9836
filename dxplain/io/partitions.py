"""The training interactions and their global importance α, partitioned so that a worker reads only a part.

    <root>/user/part-00000.parquet ...   users user_cuts[p]:user_cuts[p+1]   (user, item, rating)
    <root>/item/part-00000.parquet ...   items item_cuts[p]:item_cuts[p+1]   same columns
    <root>/{user,item}_ids.parquet      the id lists (column ``id``): what a task's copy of ``Partitions`` reads
    <root>/index.json                    key, cuts and counts: written last, so its presence means complete
    <root>/alpha/{user,item}/part-…      α of the same rows, one column, for the model being explained
    <root>/alpha/index.json              the α key (data and model), written last

The interactions are written before training (ALS shards read them) and α after it (explanation
shards read both), so the data parts are reused by every model trained on the same data.

Rows keep the table's (user, item) order in both layouts, so every part is itself a valid ``Interactions``
over the full id spaces: a by-user part holds its users' whole histories (the item side of an explanation),
a by-item part its items' whole rater lists (the user side). Parts hold about ``rows_per_part``
interactions each, which bounds what a worker holds at once however large the table grows.

A table too large for the flow's process is partitioned by tasks instead (``dxplain.ingest``), which
write the same files through the functions below, and meanwhile::

    <root>/_buckets/{user,item}/<part>/<chunk>.parquet   a chunk's rows of one part, removed once all is written

A store is written by ``build_store`` (cuts, the parts, the id lists, the index last) or reused when its
index has the data's key.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..interactions import Interactions, TableSummary, equal_cuts
from .atomic import Location, atomic_file, exists, filesystem, is_local, join, read_text, write_text_atomic
from .tables import parquet_metadata, read_id_column, read_parquet

ROWS_PER_PART = 2_000_000  # ~50 MB of columns per part; a shard holds one item part at a time


def _name(p: int) -> str:
    return f"part-{p:05d}.parquet"


def _empty(with_alpha: bool) -> pa.Table:
    columns = {"user": pa.array([], pa.int32()), "item": pa.array([], pa.int32()), "rating": pa.array([], pa.float64())}
    return pa.table({**columns, **({"alpha": pa.array([], pa.float64())} if with_alpha else {})})


def _write(loc: Location, columns: dict) -> None:
    with atomic_file(loc) as fh:
        pq.write_table(pa.table(columns), fh, compression="lz4")  # read many times per run: lz4 decodes fastest


def _reusable(index_loc: Location, key: str) -> dict | None:
    """The index at ``index_loc`` if it has ``key``; otherwise None, and a stale index is removed first,
    because the files it vouches for are about to be rewritten."""
    if not exists(index_loc):
        return None
    index = json.loads(read_text(index_loc))
    if index.get("key") == key:
        # Reused: say so by a write, which ``runs.prune`` sees as the store being in use.
        write_text_atomic(join(str(index_loc).rsplit("/", 1)[0], ".last-used"), f"{time.time()}\n")
        return index
    fs, path = filesystem(index_loc)
    fs.rm(path)
    return None


def _write_ids(root: Location, user_ids: pa.Array, item_ids: pa.Array, replace: bool = True) -> None:
    """The id lists beside the parts (before the index: a complete store has them); kept if there and not
    ``replace`` (a reused store)."""
    for side, ids in (("user", user_ids), ("item", item_ids)):
        if replace or not exists(join(root, f"{side}_ids.parquet")):
            fs, path = filesystem(root)
            fs.makedirs(path, exist_ok=True)
            _write(join(root, f"{side}_ids.parquet"), {"id": ids})


def _write_parts(
    root: Location, data: Interactions, user_cuts: np.ndarray, item_cuts: np.ndarray, columns, item_columns=None
) -> None:
    """One file per part and side; ``columns(rows)`` gives a part's columns from its rows in data order
    (``item_columns(rows)`` the by-item parts', when they differ)."""
    fs, path = filesystem(root)
    for side in ("user", "item"):
        fs.makedirs(f"{path}/{side}", exist_ok=True)
    for p, (a, b) in enumerate(itertools.pairwise(user_cuts)):
        _write(join(root, "user", _name(p)), columns(np.arange(data.user_indptr[a], data.user_indptr[b])))
    for p, (a, b) in enumerate(itertools.pairwise(item_cuts)):
        rows = np.sort(data.item_order[data.item_indptr[a] : data.item_indptr[b]])  # back to (user, item) order
        _write(join(root, "item", _name(p)), (item_columns or columns)(rows))


@functools.lru_cache(maxsize=2)  # a run's stores: the positives' and the training table's
def _ids_of(root: str, key: str, n_users: int, n_items: int) -> tuple[pa.Array, pa.Array]:
    """A store's id lists, read once per process and data (``key``): a worker's tasks share them."""
    ids = tuple(read_id_column(join(root, f"{side}_ids.parquet")) for side in ("user", "item"))
    if (len(ids[0]), len(ids[1])) != (n_users, n_items):
        raise RuntimeError(
            f"{root}: its id lists hold {len(ids[0])} users and {len(ids[1])} items, the parts "
            f"{n_users} and {n_items}: the store was rewritten under a running job"
        )
    return ids


def _by_reference(
    root, user_cuts, item_cuts, n_users: int, n_items: int, n_interactions: int, with_alpha: bool, key: str
) -> Partitions:
    user_ids, item_ids = _ids_of(str(root), key, n_users, n_items)
    return Partitions(root, user_cuts, item_cuts, user_ids, item_ids, n_interactions, with_alpha, key)


def store_path(out: Location, dataset: str, data: Interactions | TableSummary) -> Location:
    """Where a refresh keeps the parts of this exact data (one store per data; a new model rewrites only α)."""
    return join(out, "partitions", f"{dataset}-{data.fingerprint()}")


def open_store(root: Location) -> Partitions | None:
    """The complete store at ``root`` as it is (its index and id lists), or None when it is gone or unfinished."""
    if not exists(join(root, "index.json")):
        return None
    index = json.loads(read_text(join(root, "index.json")))
    if "user_cuts" not in index or not exists(join(root, "user_ids.parquet")):
        return None
    ids = [read_id_column(join(root, f"{side}_ids.parquet")) for side in ("user", "item")]
    return Partitions(
        root,
        np.asarray(index["user_cuts"], np.int64),
        np.asarray(index["item_cuts"], np.int64),
        *ids,
        int(index["n_interactions"]),
        key=index["key"],
    )


def holds_pairs(parts: Partitions, users: pa.Array, items: pa.Array) -> np.ndarray:
    """Whether each (user, item), in original ids, is a row of the store: reads only the by-user parts of the
    users it knows."""
    u = pc.index_in(users.cast(parts.user_ids.type), value_set=parts.user_ids)
    i = pc.index_in(items.cast(parts.item_ids.type), value_set=parts.item_ids)
    known = pc.and_(pc.is_valid(u), pc.is_valid(i)).to_numpy(zero_copy_only=False)
    u, i = (pc.fill_null(x, -1).to_numpy().astype(np.int64) for x in (u, i))
    n_items = len(parts.item_ids)
    held = np.zeros(len(u), bool)
    part = np.searchsorted(parts.user_cuts, u, side="right") - 1
    for p in np.unique(part[known]):
        at = np.flatnonzero(known & (part == p))
        d = parts.read_part("user", int(p)).data
        held[at] = np.isin(u[at] * n_items + i[at], d.user.astype(np.int64) * n_items + d.item)
    return held


def build_store(
    root: Location,
    table: Interactions | TableSummary,
    write_parts: Callable[[np.ndarray, np.ndarray], None],
    rows_per_part: int | None = None,
) -> Partitions:
    """Write (or reuse, when ``root`` already holds this exact data) the store of ``table``: its cuts,
    then ``write_parts(user_cuts, item_cuts)`` writes every part of both sides, then the id lists and the
    index, last, so a crash leaves no store a reader would trust.

    Parameters
    ----------
    table : Interactions or TableSummary
        The data: its fingerprint keys the store, its degrees cut the parts.
    write_parts : callable
        Writes part p of each side from the cuts, (n_user_parts + 1,) and (n_item_parts + 1,) int64.
    rows_per_part : int, optional
        Interactions per part, about; by default ``ROWS_PER_PART``, read at call time (so a test can set
        smaller parts for a whole flow).
    """
    key = table.fingerprint()
    index = _reusable(join(root, "index.json"), key)
    if index is None:
        n_parts = max(1, -(-len(table) // max(1, rows_per_part or ROWS_PER_PART)))
        user_cuts, item_cuts = equal_cuts(table.user_indptr, n_parts), equal_cuts(table.item_indptr, n_parts)
        write_parts(user_cuts, item_cuts)
        _write_ids(root, table.user_ids, table.item_ids)
        index = {
            "key": key,
            "n_interactions": len(table),
            "n_users": table.n_users,
            "n_items": table.n_items,
            "user_cuts": user_cuts.tolist(),
            "item_cuts": item_cuts.tolist(),
        }
        write_text_atomic(join(root, "index.json"), json.dumps(index))
    else:
        _write_ids(root, table.user_ids, table.item_ids, replace=False)  # a store from before they were kept
    return Partitions(
        root,
        np.asarray(index["user_cuts"], np.int64),
        np.asarray(index["item_cuts"], np.int64),
        table.user_ids,
        table.item_ids,
        int(index["n_interactions"]),
        key=key,
    )


def write_partitions(root: Location, data: Interactions, rows_per_part: int | None = None) -> Partitions:
    """Write (or reuse) the by-user and by-item parts of ``data``, a table in this process (``build_store``)."""

    def columns(rows):
        return {"user": data.user[rows], "item": data.item[rows], "rating": data.rating[rows]}

    return build_store(
        root, data, lambda user_cuts, item_cuts: _write_parts(root, data, user_cuts, item_cuts, columns), rows_per_part
    )


def write_alpha(
    parts: Partitions, data: Interactions, alpha: np.ndarray, key: str, item_alpha: np.ndarray | None = None
) -> Partitions:
    """Write (or reuse, for the same ``key``) α beside the parts, in their row order; parts that read it back.
    ``item_alpha``: the by-item parts' α (in data order) when it differs from the by-user parts' (iALS with Spark's
    weights: an entry's α divides by its user's weight on one side and its item's on the other)."""
    item_alpha = alpha if item_alpha is None else item_alpha
    if len(alpha) != len(data) or len(item_alpha) != len(data) or len(data) != parts.n_interactions:
        raise ValueError(
            f"alpha has {len(alpha)} values for {len(data)} interactions in a store of {parts.n_interactions}"
        )
    root = join(parts.root, "alpha")
    if _reusable(join(root, "index.json"), key) is None:
        _write_parts(
            root,
            data,
            parts.user_cuts,
            parts.item_cuts,
            lambda rows: {"alpha": alpha[rows]},
            lambda rows: {"alpha": item_alpha[rows]},
        )
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


def write_part(root: Location, side: str, p: int, columns: dict[str, np.ndarray]) -> None:
    """Part p of one side (``user`` or ``item``): its (user, item, rating) columns, rows in (user, item) order."""
    _write(join(root, side, _name(p)), columns)


def write_bucket(root: Location, side: str, p: int, chunk: int, columns: dict[str, np.ndarray]) -> None:
    """The rows of part p of one side that source chunk ``chunk`` holds, until the part is assembled."""
    _write(join(root, "_buckets", side, f"{p:05d}", f"{chunk:05d}.parquet"), columns)


def read_buckets(root: Location, side: str, p: int) -> pa.Table:
    """Every bucket of part p of one side, in chunk order; only finished files, not an interrupted write's."""
    folder = join(root, "_buckets", side, f"{p:05d}")
    fs, path = filesystem(folder)
    names = sorted(f.rsplit("/", 1)[-1] for f in fs.ls(path, detail=False)) if fs.exists(path) else []
    tables = [read_parquet(join(folder, n)) for n in names if n.endswith(".parquet") and not n.startswith(".")]
    return pa.concat_tables(tables) if tables else _empty(False)


def remove_buckets(root: Location) -> None:
    fs, path = filesystem(root)
    if fs.exists(f"{path}/_buckets"):
        fs.rm(f"{path}/_buckets", recursive=True)


def remove_store(root: Location) -> None:
    """Remove a store being written that failed: nothing is left that a reader would trust."""
    fs, path = filesystem(root)
    if fs.exists(path):
        fs.rm(path, recursive=True)


@dataclass(frozen=True)
class Part:
    """One part: interactions over the full id spaces, and α in the same row order (None before α is written)."""

    data: Interactions
    alpha: np.ndarray | None


@dataclass(frozen=True)
class Partitions:
    """Where the parts are and which users / items each holds. Sent to a task it is its root, cuts and key
    (``__reduce__``): the task's process reads the id lists from the store, once."""

    root: Location
    user_cuts: np.ndarray
    item_cuts: np.ndarray
    user_ids: pa.Array
    item_ids: pa.Array
    n_interactions: int
    with_alpha: bool = False
    key: str | None = None  # the data's fingerprint (index.json's): which ids a task's copy reads

    def __reduce__(self):
        # Sent to a task, the parts are their root and cuts: every task of a map gets its own copy of its
        # arguments, and the id lists are O(users + items) bytes, times the number of tasks. A worker
        # reads them once from the store (``_ids_of``) and keeps them for every later task.
        if self.key is not None and is_local(self.root):
            return _by_reference, (
                self.root,
                self.user_cuts,
                self.item_cuts,
                len(self.user_ids),
                len(self.item_ids),
                self.n_interactions,
                self.with_alpha,
                self.key,
            )
        return object.__reduce__(self)

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

    def user_part_offsets(self) -> np.ndarray:
        """The table row where each by-user part starts (parts hold consecutive users' rows in table
        order), from the files' footers."""
        rows = [parquet_metadata(join(self.root, "user", _name(p))).num_rows for p in range(len(self.user_cuts) - 1)]
        return np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)

    def read_rows(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(user, item, rating) of the table's rows ``index`` (in that order), reading only their by-user parts."""
        index = np.asarray(index, np.int64)
        offsets = self.user_part_offsets()
        part = np.searchsorted(offsets, index, side="right") - 1
        user, item = np.empty(len(index), np.int64), np.empty(len(index), np.int64)
        rating = np.empty(len(index))
        for p in np.unique(part):
            at = np.flatnonzero(part == p)
            d = self.read_part("user", int(p)).data
            local = index[at] - offsets[p]
            user[at], item[at], rating[at] = d.user[local], d.item[local], d.rating[local]
        return user, item, rating

    def read_part(self, side: str, p: int) -> Part:
        """Part p of one side (``user`` or ``item``), its rows in file order (the order its α is written in)."""
        return self._part(self._read(side, p), slice(None))

    def _read(self, side: str, p: int) -> pa.Table:
        t = read_parquet(join(self.root, side, _name(p)))
        if self.with_alpha:
            t = t.append_column("alpha", read_parquet(join(self.root, "alpha", side, _name(p)))["alpha"])
        return t

    def _part(self, t: pa.Table, keep: slice | np.ndarray) -> Part:
        col = {c: t[c].to_numpy()[keep] for c in t.column_names}
        data = Interactions(col["user"], col["item"], col["rating"], self.user_ids, self.item_ids)
        return Part(data, col.get("alpha"))
