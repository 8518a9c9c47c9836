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

A table too large for the flow's process is partitioned by tasks instead (``scan_source`` then
``stream_partitions``): each task reads a chunk of the file's row groups, and the flow keeps only a
``TableSummary`` (ids, degrees, rating statistics, fingerprint), O(users + items)::

    scan      chunk → validated counts, rating sum, digest           (one task per chunk)
    bucket    chunk → <root>/_buckets/{user,item}/<part>/<chunk>     (one task per chunk)
    assemble  a part's buckets → sorted, checked, the part's file    (one task per part and side)
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from ..interactions import Interactions, RowStats, TableSummary, equal_cuts, row_digest, stable_id_order
from .atomic import Location, atomic_file, exists, filesystem, is_local, join, read_text, write_text_atomic

ROWS_PER_PART = 2_000_000  # ~50 MB of columns per part; a shard holds one item part at a time
ROWS_PER_CHUNK = 4_000_000  # rows a streaming task reads at once (whole row groups): ~100 MB of columns


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
        # arguments, and the id lists are 104 MB at 50M Amazon-like interactions, 13 GB over 125 tasks.
        # A worker reads them once from the store (``_ids_of``) and keeps them for every later task.
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
        rows = []
        for p in range(len(self.user_cuts) - 1):
            fs, path = filesystem(join(self.root, "user", _name(p)))
            with fs.open(path, "rb") as fh:
                rows.append(pq.ParquetFile(fh).metadata.num_rows)
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
        t = _read_table(join(self.root, side, _name(p)))
        if self.with_alpha:
            t = t.append_column("alpha", _read_table(join(self.root, "alpha", side, _name(p)))["alpha"])
        return t

    def _part(self, t: pa.Table, keep: slice | np.ndarray) -> Part:
        col = {c: t[c].to_numpy()[keep] for c in t.column_names}
        data = Interactions(col["user"], col["item"], col["rating"], self.user_ids, self.item_ids)
        return Part(data, col.get("alpha"))


def _by_reference(
    root, user_cuts, item_cuts, n_users: int, n_items: int, n_interactions: int, with_alpha: bool, key: str
) -> Partitions:
    user_ids, item_ids = _ids_of(str(root), key, n_users, n_items)
    return Partitions(root, user_cuts, item_cuts, user_ids, item_ids, n_interactions, with_alpha, key)


@functools.lru_cache(maxsize=2)  # a run's stores: the positives' and the training table's
def _ids_of(root: str, key: str, n_users: int, n_items: int) -> tuple[pa.Array, pa.Array]:
    """A store's id lists, read once per process and data (``key``): a worker's tasks share them."""
    from .interactions import read_id_column

    ids = tuple(read_id_column(join(root, f"{side}_ids.parquet")) for side in ("user", "item"))
    if (len(ids[0]), len(ids[1])) != (n_users, n_items):
        raise RuntimeError(
            f"{root}: its id lists hold {len(ids[0])} users and {len(ids[1])} items, the parts "
            f"{n_users} and {n_items}: the store was rewritten under a running job"
        )
    return ids


def _write_ids(root: Location, user_ids: pa.Array, item_ids: pa.Array, replace: bool = True) -> None:
    """The id lists beside the parts (before the index: a complete store has them); kept if there and not
    ``replace`` (a reused store)."""
    for side, ids in (("user", user_ids), ("item", item_ids)):
        if replace or not exists(join(root, f"{side}_ids.parquet")):
            fs, path = filesystem(root)
            fs.makedirs(path, exist_ok=True)
            _write(join(root, f"{side}_ids.parquet"), {"id": ids})


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


def write_partitions(root: Location, data: Interactions, rows_per_part: int | None = None) -> Partitions:
    """Write (or reuse, when ``root`` already holds this exact data) the by-user and by-item parts of ``data``.

    Each file is written atomically and the index last, so a crash leaves no store a reader would trust.
    """
    key = data.fingerprint()
    index = _reusable(join(root, "index.json"), key)
    if index is None:
        # The module's value read at call time (None), so a test can set smaller parts for a whole flow.
        n_parts = max(1, -(-len(data) // max(1, rows_per_part or ROWS_PER_PART)))
        user_cuts, item_cuts = equal_cuts(data.user_indptr, n_parts), equal_cuts(data.item_indptr, n_parts)

        def columns(rows):
            return {"user": data.user[rows], "item": data.item[rows], "rating": data.rating[rows]}

        _write_parts(root, data, user_cuts, item_cuts, columns)
        _write_ids(root, data.user_ids, data.item_ids)
        index = {
            "key": key,
            "n_interactions": len(data),
            "n_users": data.n_users,
            "n_items": data.n_items,
            "user_cuts": user_cuts.tolist(),
            "item_cuts": item_cuts.tolist(),
        }
        write_text_atomic(join(root, "index.json"), json.dumps(index))
    else:
        _write_ids(root, data.user_ids, data.item_ids, replace=False)  # a store from before they were kept
    return Partitions(
        root,
        np.asarray(index["user_cuts"], np.int64),
        np.asarray(index["item_cuts"], np.int64),
        data.user_ids,
        data.item_ids,
        int(index["n_interactions"]),
        key=key,
    )


def write_alpha(parts: Partitions, data: Interactions, alpha: np.ndarray, key: str) -> Partitions:
    """Write (or reuse, for the same ``key``) α beside the parts, in their row order; parts that read it back."""
    if len(alpha) != len(data) or len(data) != parts.n_interactions:
        raise ValueError(
            f"alpha has {len(alpha)} values for {len(data)} interactions in a store of {parts.n_interactions}"
        )
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
        # Reused: say so by a write, which ``runs.prune`` sees as the store being in use.
        write_text_atomic(join(str(index_loc).rsplit("/", 1)[0], ".last-used"), f"{time.time()}\n")
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
        rows = np.sort(data.item_order[data.item_indptr[a] : data.item_indptr[b]])  # back to (user, item) order
        _write(join(root, "item", _name(p)), columns(rows))


def _write(loc: Location, columns: dict) -> None:
    with atomic_file(loc) as fh:
        pq.write_table(pa.table(columns), fh, compression="lz4")  # read many times per run: lz4 decodes fastest


# ---- streaming: a table partitioned by tasks, never whole in one process ------------------------------

Chunk = tuple  # (file Location, row group indices): what one streaming task reads


def source_chunks(path: Location, rows_per_chunk: int = ROWS_PER_CHUNK) -> list[Chunk]:
    """The row groups of a Parquet file (or of a folder's files, in name order) in chunks of about
    ``rows_per_chunk`` rows; only footers are read."""
    from .interactions import parquet_files

    fs, p = filesystem(path)
    chunks = []
    for f in parquet_files(path):
        loc = join(path, f[len(p) :].lstrip("/")) if fs.isdir(p) else path
        with fs.open(f, "rb") as fh:
            meta = pq.ParquetFile(fh).metadata
        groups, rows = [], 0
        for g in range(meta.num_row_groups):
            groups.append(g)
            rows += meta.row_group(g).num_rows
            if rows >= rows_per_chunk:
                chunks.append((loc, tuple(groups)))
                groups, rows = [], 0
        if groups:
            chunks.append((loc, tuple(groups)))
    return chunks


def _read_chunk(chunk: Chunk, user_ids: pa.Array, item_ids: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user, item, rating) of one chunk as indices into the id lists, validated where data enters."""
    from .interactions import _ratings, index_of

    loc, groups = chunk
    fs, path = filesystem(loc)
    with fs.open(path, "rb") as fh:
        t = pq.ParquetFile(fh).read_row_groups(list(groups), columns=["user", "item", "rating"])
    source = f"{loc} (row groups {groups[0]}–{groups[-1]})"
    for c in ("user", "item"):
        if t.column(c).null_count:
            raise InputError(f"{source}: {t.column(c).null_count} row(s) have no {c} id; drop or fill them")
    y = _ratings(t, source)
    missing = (
        "{n} row(s) name {what}(s) missing from the dataset's users.parquet/items.parquet, e.g. {examples}; "
        "re-create the dataset with `dxplain datasets import`"
    )
    u = index_of(t.column("user"), user_ids, "user", source, missing)
    i = index_of(t.column("item"), item_ids, "item", source, missing)
    return u, i, y


def scan_chunk(chunk: Chunk, user_ids: pa.Array, item_ids: pa.Array) -> RowStats:
    return RowStats.of(*_read_chunk(chunk, user_ids, item_ids), len(user_ids), len(item_ids), compact=True)


def scan_source(
    mapper, path: Location, user_ids: pa.Array, item_ids: pa.Array, rows_per_chunk: int = ROWS_PER_CHUNK
) -> TableSummary:
    """Validate a prepared dataset's interactions by tasks over chunks of its row groups and summarise
    them (``TableSummary``): the flow holds O(users + items). ``user_ids`` and ``item_ids`` are the
    dataset's users.parquet and items.parquet ids, which must be sorted and each have an interaction."""
    folder = str(path).rsplit("/", 1)[0]  # the dataset: its users.parquet and items.parquet are named below
    for what, ids in (("users", user_ids), ("items", item_ids)):
        if len(ids) > 1 and not pc.all(pc.greater(ids[1:], ids[:-1])).as_py():
            raise InputError(
                f"{folder}: {what}.parquet does not list its ids in sorted order without repeats; "
                "re-create the dataset with `dxplain datasets import`"
            )
    chunks = source_chunks(path, rows_per_chunk)
    if not chunks:
        raise InputError(f"{path}: the table has no rows; it needs at least one interaction")
    users_h, items_h = mapper.put(user_ids, broadcast=True), mapper.put(item_ids, broadcast=True)
    # Summed as they finish: the flow holds one chunk's counts at a time.
    stats = RowStats.total(
        c for _, c in mapper.imap(scan_chunk, [(chunk, users_h, items_h) for chunk in chunks], name="load-scan")
    )
    if stats is None or not stats.user_counts.sum():
        raise InputError(f"{path}: the table has no rows; it needs at least one interaction")
    for what, counts, ids in (("user", stats.user_counts, user_ids), ("item", stats.item_counts, item_ids)):
        if not counts.all():
            raise InputError(
                f"{folder}: {what}s.parquet lists {int((counts == 0).sum())} {what}(s) with no interaction, "
                f"e.g. {ids[int(np.argmin(counts))].as_py()!r}; re-create the dataset with "
                "`dxplain datasets import`"
            )
    return TableSummary(user_ids, item_ids, stats)


def bucket_chunk(
    chunk: Chunk,
    c: int,
    user_ids: pa.Array,
    item_ids: pa.Array,
    root: Location,
    user_cuts: np.ndarray,
    item_cuts: np.ndarray,
) -> np.ndarray:
    """Write chunk c's rows into one bucket file per part they belong to, for each side; the rows'
    digest, which the caller checks against the scan's (the source must not change in between)."""
    u, i, y = _read_chunk(chunk, user_ids, item_ids)
    for side, key, cuts in (("user", u, user_cuts), ("item", i, item_cuts)):
        part = np.searchsorted(cuts, key, side="right") - 1
        order = stable_id_order(part)
        edges = np.searchsorted(part[order], np.arange(len(cuts)))
        for p in np.flatnonzero(np.diff(edges)):
            rows = order[edges[p] : edges[p + 1]]
            _write(
                join(root, "_buckets", side, f"{p:05d}", f"{c:05d}.parquet"),
                {"user": u[rows], "item": i[rows], "rating": y[rows]},
            )
    return row_digest(u, i, y)


def assemble_part(root: Location, side: str, p: int, user_ids: pa.Array, item_ids: pa.Array, source: str) -> int:
    """Part p of one side from its buckets: rows in (user, item) order, a repeated pair refused by name.
    The buckets stay (``stream_partitions`` removes them all at the end), so a rerun of this task, after a
    lost worker, rebuilds the same part; only finished bucket files are read, not an interrupted write's."""
    folder = join(root, "_buckets", side, f"{p:05d}")
    fs, path = filesystem(folder)
    names = sorted(f.rsplit("/", 1)[-1] for f in fs.ls(path, detail=False)) if fs.exists(path) else []
    tables = [_read_table(join(folder, n)) for n in names if n.endswith(".parquet") and not n.startswith(".")]
    t = pa.concat_tables(tables) if tables else _empty(False)
    u, i, y = (t[c].to_numpy() for c in ("user", "item", "rating"))
    key = u.astype(np.int64) * len(item_ids) + i
    order = np.argsort(key)
    key = key[order]
    dup = np.flatnonzero(key[1:] == key[:-1])
    if len(dup):
        row = order[dup[0]]
        raise InputError(
            f"{source}: {len(dup)} duplicate (user, item) pair(s), e.g. user="
            f"{user_ids[int(u[row])].as_py()!r}, item={item_ids[int(i[row])].as_py()!r}; keep one rating "
            "per pair (e.g. the latest) before importing"
        )
    _write(join(root, side, _name(p)), {"user": u[order], "item": i[order], "rating": y[order]})
    return len(order)


def stream_partitions(
    mapper,
    path: Location,
    summary: TableSummary,
    root: Location,
    rows_per_part: int | None = None,
    rows_per_chunk: int = ROWS_PER_CHUNK,
) -> Partitions:
    """Write (or reuse) the by-user and by-item parts of the table at ``path`` by tasks (``bucket_chunk``,
    then ``assemble_part``), its rows never in this process: the same files ``write_partitions`` writes
    for the table read whole. On an error nothing is left that a reader would trust, nor any bucket."""
    key = summary.fingerprint()
    index = _reusable(join(root, "index.json"), key)
    if index is None:
        n = len(summary)
        n_parts = max(1, -(-n // max(1, rows_per_part or ROWS_PER_PART)))
        user_cuts, item_cuts = (
            equal_cuts(np.concatenate([[0], np.cumsum(counts)]), n_parts)
            for counts in (summary.user_degree(), summary.item_degree())
        )
        users_h, items_h = mapper.put(summary.user_ids, broadcast=True), mapper.put(summary.item_ids, broadcast=True)
        fs, root_path = filesystem(root)
        if fs.exists(f"{root_path}/_buckets"):  # an interrupted run's: its chunks may have been cut otherwise
            fs.rm(f"{root_path}/_buckets", recursive=True)
        try:
            digests = mapper.map(
                bucket_chunk,
                [
                    (chunk, c, users_h, items_h, root, user_cuts, item_cuts)
                    for c, chunk in enumerate(source_chunks(path, rows_per_chunk))
                ],
                name="load-bucket",
            )
            with np.errstate(over="ignore"):
                digest = np.sum(digests, axis=0, dtype=np.uint64)
            if not np.array_equal(digest, summary.stats.digest):
                raise InputError(
                    f"{path}: the interactions changed while they were read (their digest differs "
                    "from the scan's); run again once the dataset is no longer being written"
                )
            counts = mapper.map(
                assemble_part,
                [
                    (root, side, p, users_h, items_h, str(path))
                    for side, cuts in (("user", user_cuts), ("item", item_cuts))
                    for p in range(len(cuts) - 1)
                ],
                name="load-assemble",
            )
            if sum(counts) != 2 * n:
                raise InputError(
                    f"{path}: the parts hold {sum(counts)} rows for 2 × {n} interactions; the "
                    "interactions changed while they were read; run again"
                )
        except BaseException:
            if fs.exists(root_path):
                fs.rm(root_path, recursive=True)
            raise
        if fs.exists(f"{root_path}/_buckets"):
            fs.rm(f"{root_path}/_buckets", recursive=True)
        _write_ids(root, summary.user_ids, summary.item_ids)
        index = {
            "key": key,
            "n_interactions": n,
            "n_users": summary.n_users,
            "n_items": summary.n_items,
            "user_cuts": user_cuts.tolist(),
            "item_cuts": item_cuts.tolist(),
        }
        write_text_atomic(join(root, "index.json"), json.dumps(index))
    else:
        _write_ids(root, summary.user_ids, summary.item_ids, replace=False)
    return Partitions(
        root,
        np.asarray(index["user_cuts"], np.int64),
        np.asarray(index["item_cuts"], np.int64),
        summary.user_ids,
        summary.item_ids,
        int(index["n_interactions"]),
        key=key,
    )
