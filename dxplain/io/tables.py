"""Reading and writing tables of interactions: Parquet files or folders, delimited text, and the row groups
of Parquet files in chunks that one task reads at a time.

A Parquet *folder* is read as ``pq.read_table`` reads it: its ``.parquet``/``.pq`` files in name order,
none under a name starting with ``_`` or ``.`` (``_temporary/``, ``.crc``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pyarrow.fs import FSSpecHandler, PyFileSystem

from ..errors import InputError
from .atomic import Location, atomic_file, filesystem, is_local, join

PARQUET_SUFFIXES = (".parquet", ".pq")


def read_table(path: Location, columns: dict[str, str] | None = None, delimiter: str | None = None) -> pa.Table:
    """Read a Parquet file/folder or a delimited text file, renaming columns by ``columns``.

    ``columns`` maps dxplain's names to the file's, e.g. ``{"user": "reviewerID", "item": "asin"}``.
    """
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise InputError(f"{path}: no such file or folder; check the path")
    # Local files go to pyarrow by path (its own multi-threaded readers); URLs through fsspec.
    arrow_fs = None if is_local(path) else PyFileSystem(FSSpecHandler(fs))
    try:
        if fs.isdir(p) or PurePosixPath(p).suffix in PARQUET_SUFFIXES:
            table = pq.read_table(p, filesystem=arrow_fs)
        else:
            if fs.size(p) == 0:
                raise InputError(f"{path}: the file is empty; it needs a header and at least one interaction")
            suffix = PurePosixPath(p).suffix
            delim = delimiter or ("\t" if suffix in (".tsv", ".inter", ".data") else ",")
            # Only empty cells are missing: "nan"/"inf" must reach the rating check as numbers.
            table = pacsv.read_csv(
                p if arrow_fs is None else arrow_fs.open_input_stream(p),
                parse_options=pacsv.ParseOptions(delimiter=delim),
                convert_options=pacsv.ConvertOptions(null_values=[""]),
            )
    except InputError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(
            f"{path}: cannot be read as a table ({exc}); give a Parquet file or a CSV with a header"
        ) from exc
    if columns:
        missing = [src for src in columns.values() if src not in table.column_names]
        if missing:
            raise InputError(
                f"{path}: column mapping names {missing}, which the file lacks; its columns are {table.column_names}"
            )
        rename = {src: dst for dst, src in columns.items()}
        table = table.rename_columns([rename.get(c, c) for c in table.column_names])
    return table


def read_parquet(loc: Location) -> pa.Table:
    """One Parquet file, local or a URL, through fsspec."""
    fs, path = filesystem(loc)
    with fs.open(path, "rb") as fh:
        return pq.read_table(fh)


def parquet_metadata(loc: Location) -> pq.FileMetaData:
    """The footer of one Parquet file (row groups, row counts, schema): the file's rows are not read."""
    fs, path = filesystem(loc)
    with fs.open(path, "rb") as fh:
        return pq.ParquetFile(fh).metadata


def parquet_files(path: Location) -> list[Location]:
    """The Parquet files of a file or folder, as ``pq.read_table`` reads them (module docstring), in name
    order: ``path`` itself for a file, else locations under it."""
    fs, p = filesystem(path)
    if not fs.isdir(p):
        return [path]
    root = p.rstrip("/")
    names = sorted(
        f[len(root) :].strip("/")
        for f in fs.find(p)
        if f.endswith(PARQUET_SUFFIXES)
        and not any(name.startswith(("_", ".")) for name in f[len(root) :].strip("/").split("/"))
    )
    return [join(path, *n.split("/")) for n in names]


def parquet_shape(path: Location) -> tuple[pa.Schema, int]:
    """The schema and row count of a Parquet file, or of a folder of them, from their footers."""
    schema, rows = None, 0
    for f in parquet_files(path):
        meta = parquet_metadata(f)
        schema, rows = schema or meta.schema.to_arrow_schema(), rows + meta.num_rows
    if schema is None:
        raise InputError(f"{path}: holds no Parquet file; it needs the interactions")
    return schema, rows


def row_group_runs(meta: pq.FileMetaData, rows_per_chunk: int) -> list[tuple[int, ...]]:
    """A file's row groups in consecutive runs, each closed once it holds ``rows_per_chunk`` rows or more
    (the last run may hold fewer); a file without row groups has none."""
    runs, groups, rows = [], [], 0
    for g in range(meta.num_row_groups):
        groups.append(g)
        rows += meta.row_group(g).num_rows
        if rows >= rows_per_chunk:
            runs.append(tuple(groups))
            groups, rows = [], 0
    if groups:
        runs.append(tuple(groups))
    return runs


def parquet_chunks(path: Location, rows_per_chunk: int) -> list[TableChunk]:
    """The row groups of a Parquet file (or of a folder's files, in name order) in chunks of about
    ``rows_per_chunk`` rows (``row_group_runs``); only footers are read."""
    return [
        TableChunk(f, groups)
        for f in parquet_files(path)
        for groups in row_group_runs(parquet_metadata(f), rows_per_chunk)
    ]


def read_row_groups(chunk: TableChunk, columns: list[str]) -> pa.Table:
    """The ``columns`` of a chunk's row groups."""
    fs, path = filesystem(chunk.path)
    with fs.open(path, "rb") as fh:
        return pq.ParquetFile(fh).read_row_groups(list(chunk.row_groups), columns=columns)


def read_id_column(path: Location, fix: str = "") -> pa.Array:
    """The ``id`` column of a Parquet file (local or a URL) as one array, read without the file's other
    columns (titles and features can be most of a catalogue). ``ParquetFile.read`` gives the column as
    one chunk, taken as it is; should it give several, they are combined and the memory Arrow's allocator
    keeps for reuse is handed back (else the process keeps about three times the ids' size)."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise InputError(f"{path}: no such file; {fix or 'check the path'}")
    try:
        with fs.open(p, "rb") as fh:
            f = pq.ParquetFile(fh)
            if "id" not in f.schema_arrow.names:
                raise InputError(
                    f"{path}: needs a column 'id'; found {f.schema_arrow.names}" + (f"; {fix}" if fix else "")
                )
            col = f.read(columns=["id"]).column("id")
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: cannot be read as Parquet ({exc}); {fix or 'give a Parquet file'}") from exc
    ids = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    del col
    pa.default_memory_pool().release_unused()
    return ids


def parquet_bytes(table: pa.Table) -> bytes:
    """A table as Parquet bytes (for a file in a sub-folder of a ``write_folder`` result)."""
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def remove_folder(folder: Location) -> None:
    """Remove a folder of Parquet files that tasks are about to write afresh: no file of an earlier,
    differently split run stays to be read with the new ones."""
    fs, path = filesystem(folder)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def write_pairs_file(
    folder: Location,
    n: int,
    user_ids: pa.Array,
    item_ids: pa.Array,
    u: np.ndarray,
    i: np.ndarray,
    rating: np.ndarray | None = None,
) -> None:
    """(user, item) pairs in original ids (and their ``rating``, when given) as ``<folder>/part-<n>.parquet``,
    file ``n`` of a Parquet folder that tasks write one file each (written whole, then moved into place)."""
    columns = {"user": user_ids.take(pa.array(u)), "item": item_ids.take(pa.array(i))}
    table = pa.table(columns if rating is None else {**columns, "rating": np.asarray(rating, np.float64)})
    fs, path = filesystem(folder)
    fs.makedirs(path, exist_ok=True)
    with atomic_file(join(folder, f"part-{n:05d}.parquet")) as fh:
        pq.write_table(table, fh)


@dataclass(frozen=True)
class TableChunk:
    """Whole row groups of one Parquet file, what one task reads; ``row_groups`` None: a whole
    delimited text file (it has no row groups to seek to)."""

    path: Location
    row_groups: tuple[int, ...] | None

    def describe(self, prefix: str = "") -> str:
        """How error messages name the chunk: its file, and its row groups when it has some."""
        where = f"{prefix}{self.path}"
        return f"{where} (row groups {self.row_groups[0]}–{self.row_groups[-1]})" if self.row_groups else where
