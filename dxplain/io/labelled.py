"""Labelled tables: a Parquet or CSV file whose numeric columns are features and one column is the label
(the pairwise models' data; ``io.features`` reads the per-user and per-item feature tables of GAMMLI)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import InputError, raise_if_nonfinite
from .atomic import Location
from .tables import read_table


@dataclass
class LabelledTable:
    X: np.ndarray  # (n, D) float64
    y: np.ndarray  # (n,) the label column as read
    features: list[str]  # the D feature names, in file order
    source: str


def read_labelled(path: Location, label: str) -> LabelledTable:
    """Features = every numeric (int, float, bool) column but ``label``; other columns are left out.

    Refused with ``InputError``: a missing label column, no numeric feature, a label with missing
    values, and any NaN, infinite or missing feature value (named by column and row).
    """
    table = read_table(path)
    if label not in table.column_names:
        raise InputError(
            f"{path}: no label column {label!r}; its columns are {table.column_names}; give --label with one of them"
        )
    names = [
        c
        for c in table.column_names
        if c != label
        and (
            pa.types.is_integer(table.schema.field(c).type)
            or pa.types.is_floating(table.schema.field(c).type)
            or pa.types.is_boolean(table.schema.field(c).type)
        )
    ]
    if not names:
        raise InputError(
            f"{path}: no numeric feature column besides {label!r} (columns {table.column_names}); "
            "give a table with numeric features"
        )
    y_col = table.column(label)
    if y_col.null_count:
        raise InputError(f"{path}: label column {label!r} has {y_col.null_count} missing values; drop those rows")
    X = np.column_stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.float64) for c in names])
    raise_if_nonfinite(
        X,
        lambda n, r, c: (
            f"{path}: {n} NaN, infinite or missing feature values (first: column "
            f"{names[c]!r}, row {r}, value {X[r, c]}); drop or impute them before explaining"
        ),
    )
    return LabelledTable(X, y_col.to_numpy(zero_copy_only=False), names, str(path))
