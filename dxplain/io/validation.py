"""Checks on interaction tables where they enter: columns, types, rows, ratings, ids and repeated pairs.

Wrong columns, empty tables, NaN or infinite ratings, duplicate (user, item) pairs and null ids are
refused with an ``InputError`` whose message names the bad value and the fix.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..interactions import Interactions
from ..vocabulary import UNKNOWN_IDS, Vocabulary

REQUIRED = ("user", "item", "rating")

# Words that name a column's role in common exports (RecBole's user_id:token, Amazon's reviewerID/asin/overall).
_ROLE_WORDS = {
    "user": ("user", "reviewer", "customer"),
    "item": ("item", "asin", "movie", "product", "book"),
    "rating": ("rating", "overall", "score", "stars"),
}


def _sorted_unique(col: pa.ChunkedArray) -> pa.Array:
    uniq = pc.unique(col)
    return uniq.take(pc.sort_indices(uniq))


def suggest_columns(names: list[str]) -> str:
    """A ``--columns`` mapping for a file's column names: each role's first column whose name holds one of
    its words (case-insensitive), else Amazon's names as the example."""
    guess = {}
    for role, words in _ROLE_WORDS.items():
        found = [n for n in names if n not in guess.values() and any(w in n.lower() for w in words)]
        guess[role] = found[0] if found else None
    if None in guess.values():
        guess = {"user": "reviewerID", "item": "asin", "rating": "overall"}
    return ",".join(f"{role}={name}" for role, name in guess.items())


def non_finite(x: np.ndarray) -> tuple[int, int]:
    """How many values of ``x`` are NaN or infinite, and the first one's position (−1 if none)."""
    bad = ~np.isfinite(x)
    return (int(bad.sum()), int(np.flatnonzero(bad)[0])) if bad.any() else (0, -1)


def check_schema(schema: pa.Schema, rows: int, source: str) -> None:
    """The columns user, item and rating, ids of integer or string type, and at least one row."""
    missing = [c for c in REQUIRED if c not in schema.names]
    if missing:
        raise InputError(
            f"{source}: missing column(s) {missing}; found {schema.names}. Rename them, or "
            "import the file with a mapping: dxplain datasets import FILE --out DIR "
            f"--columns {suggest_columns(schema.names)}"
        )
    if rows == 0:
        raise InputError(f"{source}: the table has no rows; it needs at least one interaction")
    for c in ("user", "item"):
        t = schema.field(c).type
        if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise InputError(f"{source}: column {c!r} has type {t}; ids must be integers or strings")


def check_ids_present(table: pa.Table, source: str) -> None:
    """Every row has a user id and an item id."""
    for c in ("user", "item"):
        nulls = table.column(c).null_count
        if nulls:
            raise InputError(f"{source}: {nulls} row(s) have no {c} id; drop or fill them")


def check_columns(table: pa.Table, source: str) -> None:
    """``check_schema`` on a table read whole, and ``check_ids_present``."""
    check_schema(table.schema, table.num_rows, source)
    check_ids_present(table, source)


def checked_ratings(table: pa.Table, source: str) -> np.ndarray:
    """The rating column as float64, refused when it is not numeric or holds a missing, NaN or infinite value
    (the first named by its row, user and item)."""
    col = table.column("rating")
    if pa.types.is_null(col.type):
        raise InputError(f"{source}: every rating is missing; the rating column must hold numbers")
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise InputError(f"{source}: column 'rating' has type {col.type}; ratings must be numbers")
    if col.null_count:
        raise InputError(f"{source}: {col.null_count} rating(s) are missing; drop or fill them")
    y = col.to_numpy().astype(np.float64)
    n_bad, first = non_finite(y)
    if n_bad:
        raise InputError(
            f"{source}: {n_bad} rating(s) are NaN or infinite (first at row {first}: "
            f"user={table.column('user')[first].as_py()!r}, item={table.column('item')[first].as_py()!r}, "
            f"rating={y[first]}); drop or fix them"
        )
    return y


def check_unrated(rows: int, n_users: int, n_items: int, source) -> None:
    """Refuse data in which every user rated every item: there is nothing to recommend."""
    if rows >= n_users * n_items:
        raise InputError(
            f"{source}: its {n_users} user(s) rated all {n_items} item(s), so there is nothing "
            "to recommend and explain; give a dataset with unrated pairs, or --targets"
        )


def index_of(
    ids: pa.ChunkedArray | pa.Array, vocabulary: pa.Array, what: str, source: str, missing: str = UNKNOWN_IDS
) -> np.ndarray:
    """Map original ids to indices in ``vocabulary``; ids not in it are an error naming them (``missing``).
    One lookup: many against the same ids go through one ``Vocabulary``, which makes its search keys once."""
    return Vocabulary(vocabulary).index_of(ids, what, source, missing)


def sorted_pair_order(
    user: np.ndarray, item: np.ndarray, user_ids: pa.Array, item_ids: pa.Array, source: str, kind: str | None = None
) -> np.ndarray:
    """The order that sorts rows by (user, item), indices into ``user_ids`` and ``item_ids``; a repeated
    pair is an ``InputError`` naming it by its ids. ``kind`` is numpy's sort: the keys are distinct once
    checked, so any kind gives the same order (a stable sort is fastest on rows mostly in order already)."""
    key = user.astype(np.int64) * len(item_ids) + item
    order = np.argsort(key, kind=kind)
    key = key[order]
    dup = np.flatnonzero(key[1:] == key[:-1])
    del key  # one |D|-sized temporary at a time: loading is a flow's largest peak
    if len(dup):
        row = int(order[dup[0]])
        raise InputError(
            f"{source}: {len(dup)} duplicate (user, item) pair(s), e.g. user="
            f"{user_ids[int(user[row])].as_py()!r}, item={item_ids[int(item[row])].as_py()!r}; "
            "keep one rating per pair (e.g. the latest) before importing"
        )
    return order


def interactions_from_table(table: pa.Table, source: str = "interactions") -> tuple[Interactions, pa.Array, pa.Array]:
    """Validate a (user, item, rating[, timestamp]) table and map ids to contiguous indices (ids sorted).

    Returns
    -------
    interactions : Interactions
        The rows sorted by (user, item).
    user_ids, item_ids : pa.Array
        The sorted distinct ids, (n_users,) and (n_items,).
    """
    check_columns(table, source)
    y = checked_ratings(table, source)
    user_ids = _sorted_unique(table.column("user"))
    item_ids = _sorted_unique(table.column("item"))
    u = index_of(table.column("user"), user_ids, "user", source)
    i = index_of(table.column("item"), item_ids, "item", source)
    # Stable: a table written in (user, item) order is sorted in one pass.
    order = sorted_pair_order(u, i, user_ids, item_ids, source, kind="stable")
    ts = table.column("timestamp").to_numpy().astype(np.int64)[order] if "timestamp" in table.column_names else None
    inter = Interactions(u[order], i[order], y[order], user_ids, item_ids, ts)
    return inter, user_ids, item_ids
