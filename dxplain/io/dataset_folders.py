"""Prepared dataset folders: written once by an import, read by every command.

A *prepared dataset* is a folder::

    interactions.parquet   user, item, rating[, timestamp] with the original ids (file or folder of files)
    users.parquet          column ``id`` in index order (+ optional user features)
    items.parquet          column ``id`` in index order (+ optional item features: title, year, genres)

Nothing is written unless the whole input passed ``io.validation``'s checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from ..interactions import Interactions
from .atomic import Location, atomic_path, filesystem, join
from .tables import parquet_shape, read_id_column, read_table
from .validation import REQUIRED, check_columns, check_schema, check_unrated, checked_ratings, interactions_from_table

PREPARED_FILES = ("interactions.parquet", "users.parquet", "items.parquet")
RECREATE = "re-create the dataset with `dxplain datasets import`"


def _has_interactions(fs, p: str) -> bool:
    return fs.isdir(p) and fs.exists(f"{p}/interactions.parquet")


def _id_table(ids: pa.Array, features: pa.Table | None) -> pa.Table:
    base = pa.table({"id": ids})
    if features is None:
        return base
    # Features are keyed by id; align them to index order.
    pos = pc.index_in(ids, value_set=features.column("id").cast(ids.type))
    feats = features.drop_columns(["id"])
    aligned = feats.take(pos)
    for name in aligned.column_names:
        base = base.append_column(name, aligned.column(name))
    return base


def check_interactions(path: Location, need_unrated: bool = False) -> None:
    """The checks a command runs on a dataset path before any flow starts: columns, types, rows, ratings
    (a prepared dataset's ratings and ids are checked by the tasks that scan it, as the flow starts).

    ``need_unrated``: also refuse data in which every user rated every item (a one-row file is the
    smallest case), where there is nothing to recommend. Duplicate pairs are left to the full load.
    """
    fs, p = filesystem(path)
    if fs.isdir(p) and all(fs.exists(f"{p}/{f}") for f in PREPARED_FILES):
        # A prepared dataset: its footers only. Its rows are checked by the tasks that read them
        # (``ingest.scan_source``), so no command reads a large table whole just to check it.
        source = join(path, "interactions.parquet")
        schema, rows = parquet_shape(source)
        check_schema(schema, rows, str(source))
        if need_unrated:
            n_users, n_items = (parquet_shape(join(path, f"{w}.parquet"))[1] for w in ("users", "items"))
            check_unrated(rows, n_users, n_items, source)
        return
    source = join(path, "interactions.parquet") if _has_interactions(fs, p) else path
    table = read_table(source)
    check_columns(table, str(source))
    checked_ratings(table, str(source))
    if need_unrated:
        check_unrated(table.num_rows, *(pc.count_distinct(table.column(c)).as_py() for c in ("user", "item")), source)


def write_dataset(
    folder: str | Path,
    table: pa.Table,
    user_features: pa.Table | None = None,
    item_features: pa.Table | None = None,
    source: str = "interactions",
) -> Dataset:
    """Validate ``table`` and write a prepared dataset folder atomically."""
    inter, user_ids, item_ids = interactions_from_table(table, source)
    users = _id_table(user_ids, user_features)
    items = _id_table(item_ids, item_features)
    folder = Path(folder)
    with atomic_path(folder) as tmp:
        tmp.mkdir(parents=True)
        pq.write_table(
            table.select([c for c in (*REQUIRED, "timestamp") if c in table.column_names]), tmp / "interactions.parquet"
        )
        pq.write_table(users, tmp / "users.parquet")
        pq.write_table(items, tmp / "items.parquet")
    return Dataset(inter, users, items, folder.name)


def read_dataset(path: Location, columns: dict[str, str] | None = None) -> Dataset:
    """Load a prepared dataset folder, or a bare interactions file (Parquet/CSV); local or an fsspec URL."""
    fs, p = filesystem(path)
    name = PurePosixPath(p).name
    if _has_interactions(fs, p):
        table = read_table(join(path, "interactions.parquet"), columns)
        inter, user_ids, item_ids = interactions_from_table(table, str(join(path, "interactions.parquet")))
        users = (
            read_table(join(path, "users.parquet")) if fs.exists(f"{p}/users.parquet") else pa.table({"id": user_ids})
        )
        items = (
            read_table(join(path, "items.parquet")) if fs.exists(f"{p}/items.parquet") else pa.table({"id": item_ids})
        )
        if not users.column("id").combine_chunks().equals(user_ids) or not items.column("id").combine_chunks().equals(
            item_ids
        ):
            raise InputError(
                f"{path}: users.parquet/items.parquet do not list the ids of interactions.parquet in "
                f"sorted order; {RECREATE}"
            )
        return Dataset(inter, users, items, name)
    table = read_table(path, columns)
    inter, user_ids, item_ids = interactions_from_table(table, str(path))
    return Dataset(inter, pa.table({"id": user_ids}), pa.table({"id": item_ids}), PurePosixPath(p).stem)


def read_catalogue(path: Location) -> tuple[pa.Table | None, pa.Table | None]:
    """The user and item tables of a prepared dataset folder (ids in sorted order, titles and features),
    without reading its interactions: what showing one explanation needs, O(users + items). A bare
    interactions file has none: (None, None)."""
    fs, p = filesystem(path)
    if not _has_interactions(fs, p):
        return None, None
    return tuple(
        read_table(join(path, f"{what}.parquet")) if fs.exists(f"{p}/{what}.parquet") else None
        for what in ("users", "items")
    )


def read_catalogue_ids(folder: Location) -> tuple[pa.Array, pa.Array]:
    """The ids of a prepared dataset folder's users.parquet and items.parquet (``read_id_column``): what
    loading its interactions needs of the catalogue."""
    return read_id_column(join(folder, "users.parquet"), RECREATE), read_id_column(
        join(folder, "items.parquet"), RECREATE
    )


@dataclass(frozen=True)
class Dataset:
    """Interactions plus the user and item tables (ids in index order, optional features)."""

    interactions: Interactions
    users: pa.Table
    items: pa.Table
    name: str = "dataset"
