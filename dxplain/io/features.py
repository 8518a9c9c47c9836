"""Read and validate user and item feature tables (Parquet or CSV).

A feature table has a key column (``user`` or ``item``) and one column per feature. A column is
categorical when its type says so (Arrow dictionary or boolean: pandas ``category``/``bool``) or when it
is listed in ``--categorical``; every other column must be numeric. Checks happen here, where the data
enters: a missing key column, duplicate keys, NaN/inf or missing values, and a text column not declared
categorical are ``InputError``s naming the column and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .tables import read_table
from .validation import non_finite

ML100K_GENRES = (
    "unknown",
    "action",
    "adventure",
    "animation",
    "children",
    "comedy",
    "crime",
    "documentary",
    "drama",
    "fantasy",
    "film_noir",
    "horror",
    "musical",
    "mystery",
    "romance",
    "scifi",
    "thriller",
    "war",
    "western",
)


def _is_categorical_type(t: pa.DataType) -> bool:
    return pa.types.is_dictionary(t) or pa.types.is_boolean(t)


def features_from_table(
    table: pa.Table, side: str, categorical: tuple[str, ...] = (), source: str = ""
) -> FeatureTable:
    """Validate a feature table and split it into numeric and categorical columns (names in ``categorical``
    that are not columns of this table are left to the caller: they may be the other side's)."""
    source = source or f"{side} features"
    if side not in table.column_names:
        raise InputError(f"{source}: no {side!r} column (found {table.column_names}); name the key column {side!r}")
    if table.num_rows == 0:
        raise InputError(f"{source}: the table has no rows; give one row per {side}")
    ids = table.column(side).combine_chunks()
    if ids.null_count:
        raise InputError(f"{source}: {ids.null_count} row(s) have no {side} id; drop or fill them")
    if len(pc.unique(ids)) != len(ids):
        raise InputError(f"{source}: duplicate {side} ids; give one row per {side}")
    numeric, cats = {}, {}
    for name in table.column_names:
        if name == side:
            continue
        col = table.column(name).combine_chunks()
        t = col.type
        if name in categorical or _is_categorical_type(t):
            if col.null_count:
                raise InputError(
                    f"{source}: column {name!r} has {col.null_count} missing value(s); fill them "
                    "(e.g. with a level 'unknown')"
                )
            cats[name] = np.array([str(v) for v in col.to_pylist()], dtype=object)
            continue
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise InputError(
                f"{source}: column {name!r} has type {t}, which is not numeric; declare it with "
                f"--categorical {name} or convert it to numbers"
            )
        x = col.to_numpy(zero_copy_only=False).astype(np.float64)
        n_bad, first = non_finite(x)
        if n_bad:
            raise InputError(
                f"{source}: column {name!r} has {n_bad} NaN, infinite or missing value(s) "
                f"(first for {side} {ids[first].as_py()!r}); fill or drop them"
            )
        numeric[name] = x
    if not numeric and not cats:
        raise InputError(f"{source}: no feature columns besides {side!r}; give at least one")
    return FeatureTable(side, ids, numeric, cats)


def read_features(path: str, side: str, categorical: tuple[str, ...] = ()) -> FeatureTable:
    """Read ``path`` (Parquet or CSV) as the ``side`` ('user' or 'item') feature table."""
    return features_from_table(read_table(path), side, categorical, source=str(path))


def rows_of(ft: FeatureTable, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row of each id in the feature table ``ft``, −1 where it has none."""
    if not ft.ids.type.equals(ids.type):
        try:
            ids = ids.cast(ft.ids.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InputError(
                f"{ft.side} ids of type {ids.type} do not match the {ft.side} feature table's "
                f"{ft.ids.type}; use the same id type in both files"
            ) from exc
    idx = pc.index_in(ids, value_set=ft.ids)
    return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def movielens_feature_tables(src: str | Path) -> tuple[pa.Table, pa.Table, pa.Table]:
    """ml-100k in GroupLens layout (u.user, u.item, u.data) as (users, items, ratings) tables.

    users: user, age, gender, occupation (the last two dictionary-encoded: categorical by dtype);
    items: item, year (of release; the one item without a date gets the median year), 19 genre flags.
    """
    src = Path(src)
    missing = [f for f in ("u.user", "u.item", "u.data") if not (src / f).exists()]
    if missing:
        raise InputError(f"{src}: missing {missing}; give the GroupLens ml-100k folder (u.user, u.item, u.data)")
    users = [ln.split("|") for ln in (src / "u.user").read_text(encoding="latin-1").splitlines() if ln]
    user_table = pa.table(
        {
            "user": [int(r[0]) for r in users],
            "age": [float(r[1]) for r in users],
            "gender": pa.array([r[2] for r in users]).dictionary_encode(),
            "occupation": pa.array([r[3] for r in users]).dictionary_encode(),
        }
    )
    items = [ln.split("|") for ln in (src / "u.item").read_text(encoding="latin-1").splitlines() if ln]
    year = np.array([float(r[2][-4:]) if r[2] else np.nan for r in items])
    year[np.isnan(year)] = np.nanmedian(year)
    cols = {"item": [int(r[0]) for r in items], "year": year}
    cols.update({g: [int(r[5 + k]) for r in items] for k, g in enumerate(ML100K_GENRES)})
    d = np.loadtxt(src / "u.data", dtype=np.int64)
    ratings = pa.table({"user": d[:, 0], "item": d[:, 1], "rating": d[:, 2].astype(float)})
    return user_table, pa.table(cols), ratings


@dataclass(frozen=True)
class FeatureTable:
    """One side's features: ``ids`` in row order, numeric columns as float64, categorical ones as strings."""

    side: str
    ids: pa.Array
    numeric: dict[str, np.ndarray]
    categorical: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.ids)

    def to_table(self) -> pa.Table:
        cols = {self.side: self.ids}
        cols.update({f"{k}": pa.array(v) for k, v in self.numeric.items()})
        cols.update({f"{k}": pa.array(v).dictionary_encode() for k, v in self.categorical.items()})
        return pa.table(cols)
