"""Kolmogorov-model files: training data with or without ratings, a test split, the fit folder.

    <out>/metrics.json       rmse_stars, nrmse, train_objective (per BCD iteration), …
    <out>/rules.parquet      antecedent, consequent, support (+ titles where the data has them)
    <out>/influence.parquet  item, beta, maximal (+ title)
    <out>/model/             θ (user_factors) and ψ (item_factors) in the Zarr model store

The folder is written whole in a temporary sibling and renamed into place (``results.write_folder``'s
rule): a failed run leaves nothing at ``--out``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..interactions import Interactions
from .atomic import filesystem, join
from .dataset_folders import Dataset
from .model_store import write_model
from .results import staged_folder, write_into
from .tables import read_table
from .validation import index_of, interactions_from_table

UNSEEN = (
    "{n} test row(s) name {what}(s) absent from the training data, e.g. {examples}; a Kolmogorov model "
    "has no factor for them: drop those rows or pass --skip-unseen"
)


def read_table_for(path: str, feedback: str, like: float = 1.0) -> Dataset:
    """A dataset file or folder given by path, where implicit feedback may lack the rating column.

    Explicit mode needs ratings (p = rating / R_max); implicit mode treats every listed pair as a like and
    fills rating = 1 when the column is absent.
    """
    fs, p = filesystem(path)
    source = str(join(path, "interactions.parquet")) if fs.isdir(p) else str(path)
    table = read_table(source)
    if "rating" not in table.column_names:
        if feedback == "explicit":
            raise InputError(
                f"{source}: no 'rating' column (columns: {table.column_names}); explicit mode "
                "needs ratings: add a rating column, or pass --feedback implicit to read every "
                "pair as a like"
            )
        table = table.append_column("rating", pa.array(np.full(table.num_rows, float(like))))
    inter, user_ids, item_ids = interactions_from_table(table, source)
    items = pa.table({"id": item_ids})
    if fs.isdir(p) and fs.exists(f"{p}/items.parquet"):
        items = read_table(join(path, "items.parquet"))
    return Dataset(inter, pa.table({"id": user_ids}), items, Path(p).stem)


def check_ratings(y: np.ndarray, r_min: float, r_max: float, source: str) -> None:
    """Ratings must lie in [R_min, R_max]: p = rating / R_max must be a probability."""
    bad = (y < r_min) | (y > r_max)
    if bad.any():
        raise InputError(
            f"{source}: {int(bad.sum())} rating(s) outside [R_min, R_max] = [{r_min:g}, {r_max:g}] "
            f"(e.g. {y[bad][0]:g}); pass --r-min/--r-max that cover the scale, or fix the ratings"
        )


def read_test(path: str, train: Interactions, skip_unseen: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(user index, item index, rating, rows skipped) of a test file in the training data's ids.

    A user or item absent from training is an error naming it, unless ``skip_unseen`` drops those rows.
    """
    table = read_table(path)
    missing = [c for c in ("user", "item", "rating") if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: a test file needs columns user, item, rating; missing {missing}")
    if table.num_rows == 0:
        raise InputError(f"{path}: the test file has no rows; give at least one (user, item, rating)")
    skipped = 0
    if skip_unseen:
        keep = pc.and_(
            pc.is_in(table.column("user").cast(train.user_ids.type), value_set=train.user_ids),
            pc.is_in(table.column("item").cast(train.item_ids.type), value_set=train.item_ids),
        )
        skipped = table.num_rows - pc.sum(keep.cast(pa.int64())).as_py()
        table = table.filter(keep)
        if table.num_rows == 0:
            raise InputError(
                f"{path}: every test row names an unseen user or item; test on pairs of the training users and items"
            )
    u = index_of(table.column("user"), train.user_ids, "user", path, UNSEEN)
    i = index_of(table.column("item"), train.item_ids, "item", path, UNSEEN)
    key = u.astype(np.int64) * train.n_items + i
    if len(np.unique(key)) != len(key):
        raise InputError(f"{path}: the test file repeats (user, item) pairs; keep one rating per pair")
    y = table.column("rating").to_numpy().astype(np.float64)
    return u, i, y, skipped


def write_fit(
    out: str | os.PathLike,
    theta: np.ndarray,
    psi: np.ndarray,
    meta: dict,
    data: Interactions,
    tables: dict[str, pa.Table],
    metrics: dict,
    force: bool = False,
):
    """The fit folder (module docstring), written whole then put into place (a local folder or a URL)."""
    with staged_folder(out, force) as tmp:
        write_into(tmp, tables, {"metrics.json": json.dumps(metrics, indent=2, default=float)})
        write_model(join(tmp, "model"), theta, psi.astype(np.float64), meta, data)
    return join(out)
