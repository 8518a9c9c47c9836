"""A prepared dataset's interactions partitioned by tasks on a mapper, never whole in one process.

Each task reads a chunk of the interactions file's row groups (``io.tables.parquet_chunks``); the flow
keeps only a ``TableSummary`` (ids, degrees, rating statistics, fingerprint), O(users + items)::

    scan      chunk → validated counts, rating sum, digest            (one task per chunk)
    bucket    chunk → <root>/_buckets/{user,item}/<part>/<chunk>      (one task per chunk)
    assemble  a part's buckets → sorted, checked, the part's file     (one task per part and side)

The result is the store ``io.partitions.write_partitions`` writes for the table read whole, file for file.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import InputError
from .forgotten import Forgotten
from .interactions import RowStats, TableSummary, row_digest, stable_id_order
from .io import partitions
from .io.atomic import Location
from .io.dataset_folders import RECREATE
from .io.tables import TableChunk, parquet_chunks, read_row_groups
from .io.validation import check_ids_present, checked_ratings, sorted_pair_order
from .mapper import Mapper
from .vocabulary import Vocabulary

ROWS_PER_CHUNK = 4_000_000  # rows a task reads at once (whole row groups): ~100 MB of columns
MISSING_FROM_CATALOGUE = (
    "{n} row(s) name {what}(s) missing from the dataset's users.parquet/items.parquet, e.g. {examples}; " + RECREATE
)


def _read_chunk(
    chunk: TableChunk, users: Vocabulary, items: Vocabulary, forgotten: Forgotten | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user, item, rating) of one chunk as indices into the id lists, validated where data enters; without the
    rows of ``forgotten`` ids."""
    t = read_row_groups(chunk, ["user", "item", "rating"])
    if forgotten:
        t = t.filter(pa.array(forgotten.kept_rows(t.column("user"), t.column("item"))))
    source = chunk.describe()
    check_ids_present(t, source)
    y = checked_ratings(t, source)
    u = users.index_of(t.column("user"), "user", source, MISSING_FROM_CATALOGUE)
    i = items.index_of(t.column("item"), "item", source, MISSING_FROM_CATALOGUE)
    return u, i, y


def _stream_parts(
    mapper: Mapper,
    path: Location,
    rows_per_chunk: int,
    summary: TableSummary,
    root: Location,
    user_cuts: np.ndarray,
    item_cuts: np.ndarray,
    forgotten: Forgotten | None = None,
) -> None:
    """Every part of both sides from the chunks of ``path`` by tasks: buckets, their digest checked against the scan's
    (the source must not change in between), then the parts. On an error the store is removed."""
    n, source = len(summary), str(path)
    users_h = mapper.put(Vocabulary(summary.user_ids), broadcast=True)
    items_h = mapper.put(Vocabulary(summary.item_ids), broadcast=True)
    partitions.remove_buckets(root)  # an interrupted run's: its chunks may have been cut otherwise
    try:
        digests = mapper.map(
            bucket_chunk,
            [
                (chunk, c, users_h, items_h, root, user_cuts, item_cuts, forgotten)
                for c, chunk in enumerate(parquet_chunks(path, rows_per_chunk))
            ],
            name="load-bucket",
        )
        with np.errstate(over="ignore"):
            digest = np.sum(digests, axis=0, dtype=np.uint64)
        if not np.array_equal(digest, summary.stats.digest):
            raise InputError(
                f"{source}: the interactions changed while they were read (their digest differs "
                "from the scan's); run again once the dataset is no longer being written"
            )
        counts = mapper.map(
            assemble_part,
            [
                (root, side, p, users_h, items_h, source)
                for side, cuts in (("user", user_cuts), ("item", item_cuts))
                for p in range(len(cuts) - 1)
            ],
            name="load-assemble",
        )
        if sum(counts) != 2 * n:
            raise InputError(
                f"{source}: the parts hold {sum(counts)} rows for 2 × {n} interactions; the "
                "interactions changed while they were read; run again"
            )
    except BaseException:
        partitions.remove_store(root)
        raise
    partitions.remove_buckets(root)


def scan_chunk(chunk: TableChunk, users: Vocabulary, items: Vocabulary, forgotten: Forgotten | None = None) -> RowStats:
    """One chunk's ``RowStats`` over the range of ids it holds (``compact``), validated."""
    return RowStats.of(*_read_chunk(chunk, users, items, forgotten), len(users), len(items), compact=True)


def bucket_chunk(
    chunk: TableChunk,
    c: int,
    users: Vocabulary,
    items: Vocabulary,
    root: Location,
    user_cuts: np.ndarray,
    item_cuts: np.ndarray,
    forgotten: Forgotten | None = None,
) -> np.ndarray:
    """Write chunk c's rows into one bucket file per part they belong to, for each side; the rows'
    ``row_digest``, (2,) uint64, which the caller checks against the scan's."""
    u, i, y = _read_chunk(chunk, users, items, forgotten)
    for side, key, cuts in (("user", u, user_cuts), ("item", i, item_cuts)):
        part = np.searchsorted(cuts, key, side="right") - 1
        order = stable_id_order(part)
        edges = np.searchsorted(part[order], np.arange(len(cuts)))
        for p in np.flatnonzero(np.diff(edges)):
            rows = order[edges[p] : edges[p + 1]]
            partitions.write_bucket(root, side, p, c, {"user": u[rows], "item": i[rows], "rating": y[rows]})
    return row_digest(u, i, y)


def assemble_part(root: Location, side: str, p: int, users: Vocabulary, items: Vocabulary, source: str) -> int:
    """Part p of one side from its buckets: rows in (user, item) order, a repeated pair refused by name; its
    row count. The buckets stay (``stream_partitions`` removes them all at the end), so a rerun of this
    task, after a lost worker, rebuilds the same part."""
    t = partitions.read_buckets(root, side, p)
    u, i, y = (t[c].to_numpy() for c in ("user", "item", "rating"))
    order = sorted_pair_order(u, i, users.ids, items.ids, source)
    partitions.write_part(root, side, p, {"user": u[order], "item": i[order], "rating": y[order]})
    return len(order)


def scan_source(
    mapper: Mapper,
    path: Location,
    user_ids: pa.Array,
    item_ids: pa.Array,
    rows_per_chunk: int = ROWS_PER_CHUNK,
    forgotten: Forgotten | None = None,
) -> TableSummary:
    """Validate a prepared dataset's interactions by tasks over chunks of its row groups and summarise
    them: the flow holds O(users + items).

    Parameters
    ----------
    path : Location
        The dataset's interactions.parquet (a file or a folder of files).
    user_ids, item_ids : pa.Array
        The dataset's users.parquet and items.parquet ids, (n_users,) and (n_items,): sorted without
        repeats, each with an interaction.
    forgotten : Forgotten, optional
        Ids whose rows are left out (``dxplain forget``); ids left without a row leave the id lists (a second scan
        over the shorter lists, on the nights that forgetting empties an id).
    """
    folder = str(path).rsplit("/", 1)[0]  # the dataset: its users.parquet and items.parquet are named below
    for what, ids in (("users", user_ids), ("items", item_ids)):
        if len(ids) > 1 and not pc.all(pc.greater(ids[1:], ids[:-1])).as_py():
            raise InputError(
                f"{folder}: {what}.parquet does not list its ids in sorted order without repeats; {RECREATE}"
            )
    chunks = parquet_chunks(path, rows_per_chunk)
    if not chunks:
        raise InputError(f"{path}: the table has no rows; it needs at least one interaction")
    if forgotten:
        user_ids = user_ids.filter(pa.array(~forgotten.forgets(user_ids, "user")))
        item_ids = item_ids.filter(pa.array(~forgotten.forgets(item_ids, "item")))
    users_h = mapper.put(Vocabulary(user_ids), broadcast=True)
    items_h = mapper.put(Vocabulary(item_ids), broadcast=True)
    # Summed as they finish: the flow holds one chunk's counts at a time.
    stats = RowStats.total(
        c
        for _, c in mapper.imap(
            scan_chunk, [(chunk, users_h, items_h, forgotten) for chunk in chunks], name="load-scan"
        )
    )
    if stats is None or not stats.user_counts.sum():
        raise InputError(f"{path}: the table has no rows; it needs at least one interaction")
    if forgotten and not (stats.user_counts.all() and stats.item_counts.all()):
        return scan_source(
            mapper,
            path,
            user_ids.filter(pa.array(stats.user_counts > 0)),
            item_ids.filter(pa.array(stats.item_counts > 0)),
            rows_per_chunk,
            forgotten,
        )
    for what, counts, ids in (("user", stats.user_counts, user_ids), ("item", stats.item_counts, item_ids)):
        if not counts.all():
            raise InputError(
                f"{folder}: {what}s.parquet lists {int((counts == 0).sum())} {what}(s) with no interaction, "
                f"e.g. {ids[int(np.argmin(counts))].as_py()!r}; {RECREATE}"
            )
    return TableSummary(user_ids, item_ids, stats)


def stream_partitions(
    mapper: Mapper,
    path: Location,
    summary: TableSummary,
    root: Location,
    rows_per_part: int | None = None,
    rows_per_chunk: int = ROWS_PER_CHUNK,
    forgotten: Forgotten | None = None,
) -> partitions.Partitions:
    """Write (or reuse) the by-user and by-item parts of the table at ``path`` by tasks (``bucket_chunk``,
    then ``assemble_part``), its rows never in this process: the same files ``write_partitions`` writes
    for the table read whole. On an error nothing is left that a reader would trust, nor any bucket."""
    return partitions.build_store(
        root,
        summary,
        lambda user_cuts, item_cuts: _stream_parts(
            mapper, path, rows_per_chunk, summary, root, user_cuts, item_cuts, forgotten
        ),
        rows_per_part,
    )
