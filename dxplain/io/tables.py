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
        if fs.isdir(p):
            table = read_parquet_folder(path, columns)
        elif PurePosixPath(p).suffix in PARQUET_SUFFIXES:
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


def read_parquet_folder(path: Location, columns: dict[str, str] | None = None) -> pa.Table:
    """A folder of Parquet files (e.g. one a day, appended to by a nightly export) as one table, in file-name order.

    Every file must have the first file's columns and types: a file that differs is named. When the files hold
    (user, item) pairs (after the ``columns`` renaming), a pair that an earlier row already holds is named by the
    file that repeats it, so an appended day that re-sends old pairs is refused before anything is read from it."""
    fs, p = filesystem(path)
    files = sorted(
        f
        for f in fs.ls(p, detail=False)
        if PurePosixPath(f).suffix in PARQUET_SUFFIXES and not PurePosixPath(f).name.startswith(("_", "."))
    )  # "_…" and ".…" names are not data, as for pyarrow's own reader (temporary and marker files)
    arrow_fs = None if is_local(path) else PyFileSystem(FSSpecHandler(fs))
    if not files:  # a partitioned dataset (key=value sub-folders), or nothing: pyarrow's reader says which
        return pq.read_table(p, filesystem=arrow_fs)
    tables = []
    for f in files:
        t = pq.read_table(f, filesystem=arrow_fs)
        if tables and not t.schema.equals(tables[0].schema):
            raise InputError(
                f"{f}: its columns ({_columns(t.schema)}) differ from {files[0]}'s ({_columns(tables[0].schema)}); "
                "every file of the folder needs the same columns and types: fix that file's export or move it out"
            )
        tables.append(t)
    rename = {src: dst for dst, src in (columns or {}).items()}
    names = [rename.get(c, c) for c in tables[0].column_names]
    if "user" in names and "item" in names:
        _refuse_repeated_pairs(tables, files, names)
    return pa.concat_tables(tables)


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _refuse_repeated_pairs(tables: list[pa.Table], files: list[str], names: list[str]) -> None:
    """InputError naming the first file (in order) with a (user, item) pair that an earlier row holds."""
    u_col, i_col = (tables[0].column_names[names.index(c)] for c in ("user", "item"))
    users = pa.chunked_array([t[u_col] for t in tables]).combine_chunks().dictionary_encode()
    items = pa.chunked_array([t[i_col] for t in tables]).combine_chunks().dictionary_encode()
    key = users.indices.to_numpy().astype(np.int64) * max(1, len(items.dictionary)) + items.indices.to_numpy()
    order = np.argsort(key, kind="stable")  # stable: a pair's first row comes first
    repeat = np.flatnonzero(key[order][1:] == key[order][:-1]) + 1
    if not len(repeat):
        return
    file_of = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
    rows = order[repeat]
    first_repeat = rows[np.argmin(file_of[rows] * len(key) + rows)]  # the earliest file, then row, that repeats
    earlier = order[np.searchsorted(key[order], key[first_repeat])]
    n = int((file_of[rows] == file_of[first_repeat]).sum())
    raise InputError(
        f"{files[file_of[first_repeat]]}: {n} (user, item) pair(s) already in the data, e.g. user="
        f"{users.dictionary[users.indices[first_repeat].as_py()].as_py()!r}, "
        f"item={items.dictionary[items.indices[first_repeat].as_py()].as_py()!r} (first in {files[file_of[earlier]]}); "
        "a day's file adds new pairs only: drop those rows from it (or keep one rating per pair) and run again"
    )


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
