"""Read and validate user and item feature tables (Parquet or CSV), and GAMMLI's model folder.

A feature table has a key column (``user`` or ``item``) and one column per feature. A column is
categorical when its type says so (Arrow dictionary or boolean: pandas ``category``/``bool``) or when it
is listed in ``--categorical``; every other column must be numeric. Checks happen here, where the data
enters: a missing key column, duplicate keys, NaN/inf or missing values, and a text column not declared
categorical are ``InputError``s naming the column and the fix.

Model folder (``gammli fit --out O`` writes ``O/model/``)::

    arrays.npz        every array of the fitted model (no pickles)
    train/part-*.parquet   the latent term's training residuals (u, i, e), one file per fitting task
    meta.json         scalars, term names, feature encodings
    user_features.parquet, item_features.parquet   the feature tables the model was fitted with
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import atomic_file, filesystem
from .tables import PARQUET_SUFFIXES, TableChunk, parquet_files, parquet_metadata, read_table, row_group_runs
from .validation import check_columns, checked_ratings, non_finite


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


def read_pairs(path: str) -> pa.Table:
    """A table of (user, item[, rating]) pairs to explain or score."""
    table = read_table(path)
    missing = [c for c in ("user", "item") if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; a pairs file needs 'user' and 'item' columns")
    if table.num_rows == 0:
        raise InputError(f"{path}: the table has no rows; give at least one (user, item) pair")
    return table


def save_model(
    path: str | Path, arrays: dict[str, np.ndarray], meta: dict, users: FeatureTable, items: FeatureTable
) -> dict[str, bytes]:
    """The model folder's files as name → bytes (written whole with the rest of ``--out``)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    files = {f"{path}/arrays.npz": buf.getvalue(), f"{path}/meta.json": json.dumps(meta, indent=1).encode()}
    for ft in (users, items):
        files[f"{path}/{ft.side}_features.parquet"] = parquet_bytes(ft.to_table())
    return files


def write_residuals_file(folder: str | Path, n: int, u: np.ndarray, i: np.ndarray, e: np.ndarray) -> str:
    """File ``n`` of a model's training residuals (``<model>/train/part-NNNNN.parquet``), written by the task
    that holds those rows: the fit's own process never gathers the table-sized residuals. Atomic per file."""
    loc = Path(folder) / "train" / f"part-{n:05d}.parquet"
    with atomic_file(loc) as fh:
        pq.write_table(pa.table({"u": u.astype(np.int64), "i": i.astype(np.int64), "e": e}), fh)
    return str(loc)


def load_model(path: str | Path) -> tuple[dict[str, np.ndarray], dict, FeatureTable, FeatureTable]:
    """(arrays, meta, user features, item features) of a model folder written by ``save_model``. The
    training residuals are not read here (``read_training_rows`` reads those a set of pairs needs), except
    when the model kept them in its arrays (``train_u``, ``train_i``, ``train_e``)."""
    path = Path(path)
    if not (path / "meta.json").exists() or not (path / "arrays.npz").exists():
        raise InputError(
            f"--model {path}: not a GAMMLI model folder (no meta.json/arrays.npz); give the "
            "model/ folder that `dxplain gammli fit --out O` wrote (O/model)"
        )
    meta = json.loads((path / "meta.json").read_text())
    with np.load(path / "arrays.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if "train_u" not in arrays:
        files = _training_files(path)
        if len(files) != meta.get("train_parts"):
            raise InputError(
                f"--model {path}: train/ holds {len(files)} residual files, the model has "
                f"{meta.get('train_parts')}; the folder is incomplete, fit it again"
            )
    fts = [
        features_from_table(pq.read_table(path / f"{s}_features.parquet"), s, tuple(meta["categorical"][s]))
        for s in ("user", "item")
    ]
    return arrays, meta, fts[0], fts[1]


def _training_files(path: Path) -> list[Path]:
    return sorted((path / "train").glob("part-*.parquet"))


def read_training_rows(path: str | Path, arrays: dict, users: np.ndarray, items: np.ndarray) -> dict:
    """The training residuals (u, i, e) of the given users' and items' rows, sorted by (user, item): every
    row the latent attributions of pairs of these users and items sum over, and no other. The files are
    scanned row group by row group with the filter applied as they are read, so explaining a few pairs of a
    large model holds a few users' and items' rows, not the table."""
    if "train_u" in arrays:
        u, i, e = arrays["train_u"], arrays["train_i"], arrays["train_e"]
        keep = np.isin(u, users) | np.isin(i, items)
        u, i, e = u[keep], i[keep], e[keep]
    else:
        wanted = pc.field("u").isin(pa.array(users, pa.int64())) | pc.field("i").isin(pa.array(items, pa.int64()))
        t = pads.dataset([str(f) for f in _training_files(Path(path))], format="parquet").to_table(filter=wanted)
        u, i, e = (t[k].to_numpy() for k in ("u", "i", "e"))
    order = np.lexsort((i, u))  # stable: the fit's own order (files in user order, rows by (user, item))
    return {"u": u[order], "i": i[order], "e": e[order]}


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


def read_ratings(path: str, what: str = "--dataset") -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(user ids, item ids, ratings) of a (user, item, rating) Parquet/CSV file, validated."""
    table = read_table(path)
    check_columns(table, f"{what} {path}")
    y = checked_ratings(table, f"{what} {path}")
    return table.column("user").combine_chunks(), table.column("item").combine_chunks(), y


# Rows a ratings chunk holds (whole Parquet row groups are added until a chunk reaches it): what one task
# reads and indexes at once, so the table is never read whole by any one process.
ROWS_PER_CHUNK = 1 << 20


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


def parquet_bytes(table: pa.Table) -> bytes:
    """A table as Parquet bytes (for a file in a sub-folder of a ``write_folder`` result)."""
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()
