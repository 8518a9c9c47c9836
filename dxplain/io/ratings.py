"""Ratings files read as (user ids, item ids, ratings) arrays, validated: whole, or in chunks of row groups
that one task reads at a time (GAMMLI's fit)."""

from __future__ import annotations

from pathlib import PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import filesystem
from .tables import PARQUET_SUFFIXES, TableChunk, parquet_files, parquet_metadata, read_table, row_group_runs
from .validation import check_columns, checked_ratings

# Rows a ratings chunk holds (whole Parquet row groups are added until a chunk reaches it): what one task
# reads and indexes at once, so the table is never read whole by any one process.
ROWS_PER_CHUNK = 1 << 20


def read_ratings(path: str, what: str = "--dataset") -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(user ids, item ids, ratings) of a (user, item, rating) Parquet/CSV file, validated."""
    table = read_table(path)
    check_columns(table, f"{what} {path}")
    y = checked_ratings(table, f"{what} {path}")
    return table.column("user").combine_chunks(), table.column("item").combine_chunks(), y


def ratings_chunks(path: str, what: str = "--dataset", rows: int = ROWS_PER_CHUNK) -> list[TableChunk]:
    """The chunks of a ratings file or folder, in the order ``read_table`` reads its rows; only Parquet
    footers are read here. A CSV is one chunk (it has no row groups to seek to)."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise InputError(f"{what} {path}: no such file or folder; check the path")
    if fs.isdir(p):
        files = [str(f) for f in parquet_files(path)]
        if not files:
            raise InputError(f"{what} {path}: the folder holds no Parquet file; give a Parquet file or folder")
    elif PurePosixPath(p).suffix in PARQUET_SUFFIXES:
        files = [str(path)]
    else:
        return [TableChunk(str(path), None)]
    chunks = []
    for f in files:
        try:
            meta = parquet_metadata(f)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{what} {f}: cannot be read as Parquet ({exc}); give a Parquet file or a CSV") from exc
        runs = row_group_runs(meta, rows)
        if not runs and not chunks:  # a first file without row groups: the table still has a chunk
            runs = [()]
        chunks += [TableChunk(f, groups) for groups in runs]
    return chunks


def read_ratings_chunk(chunk: TableChunk, what: str = "--dataset") -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(user ids, item ids, ratings) of one chunk, validated like ``read_ratings``; an empty chunk (a file
    with no rows among others) gives empty arrays, and the caller checks that the whole table has rows."""
    if chunk.row_groups is None:
        return read_ratings(chunk.path, what)
    fs, p = filesystem(chunk.path)
    with fs.open(p, "rb") as fh:
        f = pq.ParquetFile(fh)
        missing = [c for c in ("user", "item", "rating") if c not in f.schema_arrow.names]
        if missing or not chunk.row_groups:
            table = f.schema_arrow.empty_table()
        else:
            table = f.read_row_groups(list(chunk.row_groups), columns=["user", "item", "rating"])
    source = chunk.describe(f"{what} ")
    if missing or table.num_rows:
        check_columns(table, source)
        y = checked_ratings(table, source)
    else:
        y = np.zeros(0)
        table = pa.table({c: table.column(c) for c in ("user", "item")})
    return table.column("user").combine_chunks(), table.column("item").combine_chunks(), y


def check_labels(y: np.ndarray, source: str) -> None:
    """Classification labels must be 0 or 1."""
    bad = (y != 0) & (y != 1)
    if bad.any():
        raise InputError(
            f"{source}: {int(bad.sum())} label(s) are not 0 or 1 (first: {y[np.flatnonzero(bad)[0]]:g}) "
            "but --task classification needs 0/1 labels; binarise the ratings or use --task regression"
        )
