"""The Zarr v3 model store: one group per model with row-chunked factors and descriptive attributes.

    <model>.zarr/
        user_factors   (n_users, k) float64, chunked by rows
        item_factors   (n_items, k) float64, chunked by rows
        user_ids, item_ids   the original ids, in row order
        attrs: kind, loss, lam, k, n_train, objective, mu, grad_norm, fingerprint, dxplain_version, ...

Factors trained elsewhere (e.g. a two-tower model's final embeddings) come in through
``import_embeddings``; .npy files are read with ``allow_pickle=False``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr

from .. import __version__
from ..errors import InputError
from ..interactions import Interactions
from .atomic import Location, atomic_dir, filesystem, join
from .atomic import exists as _exists
from .tables import read_id_column
from .validation import index_of

ROW_CHUNK = 65536


def _ids_to_zarr(ids: pa.Array) -> np.ndarray:
    if pa.types.is_integer(ids.type):
        return ids.to_numpy(zero_copy_only=False).astype(np.int64)
    # Variable-length UTF-8 has a Zarr v3 spec; fixed-width numpy unicode does not.
    return np.array(ids.to_pylist(), dtype=np.dtypes.StringDType())


def _ids_from_zarr(arr) -> pa.Array:
    return _ids_from_values(arr[:])


def _ids_from_values(values: np.ndarray) -> pa.Array:
    return pa.array(values.astype(np.int64) if values.dtype.kind in "iu" else [str(v) for v in values])


IDS_SLICE = 1 << 20  # ids compared at once: 9.8M string ids read whole took 290 MB of the flow at 50M


def _same_ids(arr, ids) -> bool:
    """Whether the stored id array ``arr`` lists ``ids`` in the same order, read a slice at a time."""
    if arr.shape[0] != len(ids):
        return False
    for a in range(0, len(ids), IDS_SLICE):
        mine = ids.slice(a, IDS_SLICE)
        mine = mine.combine_chunks() if isinstance(mine, pa.ChunkedArray) else mine
        if not _ids_from_values(arr[a : a + IDS_SLICE]).cast(pa.string()).equals(mine.cast(pa.string())):
            return False
    return True


def model_path(out: Location, dataset: str, fingerprint: str, **tags) -> Location:
    """Where a flow keeps the model it trained on this exact data: reused while the data and every
    hyperparameter in ``tags`` are unchanged (``None`` tags are left out), e.g.
    ``models/ml-100k-<fingerprint>-k32-lam0.0003-s0.zarr``. A training budget is one of the tags, so a
    capped model is never reused by an uncapped run."""
    parts = [f"{tag}{v:g}" if isinstance(v, float) else f"{tag}{v}" for tag, v in tags.items() if v is not None]
    return join(out, "models", "-".join([dataset, fingerprint, *parts]) + ".zarr")


def exists(path: Location) -> bool:
    """Whether a model store is at ``path`` (a local folder or an fsspec URL)."""
    return _exists(join(path, "zarr.json"))


def write_model(path: Location, U: np.ndarray, V: np.ndarray, meta: dict, data: Interactions) -> Location:
    """Write factors held here and their attributes atomically (local folder or fsspec URL); the attributes
    tie them to ``data`` by fingerprint. ``meta`` holds at least ``kind``, ``loss`` and ``lam``."""
    return write_model_rows(path, (U.shape, U.dtype, [(0, U)]), (V.shape, V.dtype, [(0, V)]), meta, data)


def write_model_rows(path: Location, user: tuple, item: tuple, meta: dict, data: Interactions) -> Location:
    """``write_model`` for factors given as (shape, dtype, row blocks): the blocks are (first row, block)
    pairs in row order (``models.factor_rows.FactorRows.rows``), written one at a time, so factors kept in
    row-block files are never whole here."""
    path = join(path)
    with atomic_dir(path) as tmp:
        g = zarr.open_group(str(tmp), mode="w")
        for name, (shape, dtype, blocks) in (("user_factors", user), ("item_factors", item)):
            z = g.create_array(name, shape=shape, dtype=dtype, chunks=(min(ROW_CHUNK, max(1, shape[0])), shape[1]))
            for a, block in blocks:  # in row order, one writer: a chunk two blocks share is written whole
                z[a : a + len(block)] = block
        g.create_array("user_ids", data=_ids_to_zarr(data.user_ids))
        g.create_array("item_ids", data=_ids_to_zarr(data.item_ids))
        g.attrs.update(
            {**meta, "k": int(user[0][1]), "fingerprint": data.fingerprint(), "dxplain_version": __version__}
        )
    return path


def read_factor_rows(path: Location, side: str, a: int, b: int) -> np.ndarray:
    """Rows a:b of a stored model's user (``side="user"``) or item factors: a task's rows."""
    return zarr.open_group(str(join(path)), mode="r")[f"{side}_factors"][a:b]


def read_model_ids(path: Location) -> tuple[pa.Array, pa.Array]:
    """The original user and item ids a stored model's rows belong to, in row order."""
    g = zarr.open_group(str(join(path)), mode="r")
    return _ids_from_zarr(g["user_ids"]), _ids_from_zarr(g["item_ids"])


def model_attrs(path: Location) -> dict:
    path = join(path)
    if not exists(path):
        raise InputError(
            f"{path}: not a dxplain model store (no zarr.json); train one with `dxplain train` "
            "or create one with `dxplain import-embeddings`"
        )
    return dict(zarr.open_group(str(path), mode="r").attrs)


def read_model(path: Location, data: Interactions | None = None, factors: bool = True) -> tuple:
    """(U, V, attributes) of a stored model; with ``data``, check that it was fitted on exactly these
    interactions and ids. Stores written before the loss was recorded are squared-loss models. Without
    ``factors``, U and V are None: tasks read their rows (``read_factor_rows``)."""
    attrs = model_attrs(path)
    g = zarr.open_group(str(path), mode="r")
    if data is not None:
        if attrs.get("fingerprint") not in (None, data.fingerprint()):
            raise InputError(
                f"{path}: the model was fitted on other data (fingerprint {attrs['fingerprint']}, "
                f"dataset has {data.fingerprint()}); retrain it, or drop --model to train afresh"
            )
        for side, ids in (("user", data.user_ids), ("item", data.item_ids)):
            if not _same_ids(g[f"{side}_ids"], ids):
                raise InputError(
                    f"{path}: its {side} ids differ from the dataset's; re-import the embeddings against this dataset"
                )
    attrs = {"mu": 0.0, "loss": "squared", "kind": "imported", "info": {}, "settings": {}, **attrs}
    attrs["mu"], attrs["n_train"] = float(attrs["mu"]), int(attrs.get("n_train", 0))
    if not factors:
        return None, None, attrs
    return g["user_factors"][:], g["item_factors"][:], attrs


# --- import of factors trained elsewhere ------------------------------------------------------------


def _read_ids(path: Location) -> pa.Array:
    if str(path).endswith((".parquet", ".pq")):
        return read_id_column(path, "an id list is a Parquet file with a column 'id' or a text file of one id a line")
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise InputError(f"{path}: no such file")
    lines = [ln.strip() for ln in fs.cat_file(p).decode().splitlines() if ln.strip()]
    return pa.array([int(x) for x in lines]) if all(x.lstrip("-").isdigit() for x in lines) else pa.array(lines)


def read_factor_file(path: Location, ids_path: Location | None) -> tuple[np.ndarray, pa.Array]:
    """Factors and their ids from .npy (+ id list), Parquet (``id`` + ``embedding`` or numeric columns) or Zarr;
    local files or URLs."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise InputError(f"{path}: no such file")
    suffix = Path(p).suffix
    ids = None
    if suffix == ".npy":
        with fs.open(p, "rb") as fh:
            F = np.load(fh, allow_pickle=False)  # never unpickle user-supplied files
    elif suffix in (".parquet", ".pq"):
        with fs.open(p, "rb") as fh:
            t = pq.read_table(fh)
        if "id" not in t.column_names:
            raise InputError(f"{path}: needs a column 'id' next to the factors; found {t.column_names}")
        ids = t.column("id").combine_chunks()
        if "embedding" in t.column_names:
            F = np.asarray(t.column("embedding").to_pylist(), dtype=np.float64)
        else:
            F = np.column_stack([t.column(c).to_numpy() for c in t.column_names if c != "id"]).astype(np.float64)
    elif suffix == ".zarr" or fs.isdir(p):
        F = zarr.open_array(str(path), mode="r")[:]
    else:
        raise InputError(f"{path}: unknown factor format; use .npy, .parquet or .zarr")
    if ids is None:
        if ids_path is None:
            raise InputError(
                f"{path}: .npy/.zarr factors need their id list (--user-ids/--item-ids: "
                "Parquet with column 'id', or a text file with one id per line)"
            )
        ids = _read_ids(ids_path)
    if F.ndim != 2 or not np.issubdtype(F.dtype, np.number):
        raise InputError(f"{path}: factors must be a 2-D numeric array; got shape {F.shape}, dtype {F.dtype}")
    if len(ids) != F.shape[0]:
        raise InputError(f"{path}: {F.shape[0]} factor rows but {len(ids)} ids; the id list must name every row")
    if not np.all(np.isfinite(F)):
        raise InputError(f"{path}: factors hold NaN or infinite values")
    return F.astype(np.float64), ids


def align_factors(F: np.ndarray, ids: pa.Array, wanted: pa.Array, side: str, source: str) -> np.ndarray:
    """Rows of F in the dataset's index order; every dataset id must be present exactly once."""
    import pyarrow.compute as pc

    if len(pc.unique(ids)) != len(ids):
        raise InputError(f"{source}: the {side} id list has duplicates; each id must appear once")
    pos = index_of(
        wanted,
        ids,
        side,
        source,
        missing="{n} dataset {what}(s) have no embedding, e.g. {examples}; "
        "export embeddings for every user and item of the training data",
    )
    return F[pos]


def read_embeddings(data: Interactions, user_factors, item_factors, user_ids=None, item_ids=None) -> tuple:
    """External user and item factors (``read_factor_file``) in ``data``'s index order, of one width k."""
    U, uids = read_factor_file(user_factors, user_ids)
    V, iids = read_factor_file(item_factors, item_ids)
    if U.shape[1] != V.shape[1]:
        raise InputError(
            f"user factors have k={U.shape[1]} columns but item factors k={V.shape[1]}; "
            "both towers must end in the same embedding size"
        )
    U = align_factors(U, uids, data.user_ids, "user", str(user_factors))
    V = align_factors(V, iids, data.item_ids, "item", str(item_factors))
    return U, V


def import_embeddings(
    out: str | Path,
    data: Interactions,
    user_factors,
    item_factors,
    user_ids=None,
    item_ids=None,
    lam: float | None = None,
    mu: float = 0.0,
) -> Path:
    """Store external factors as a dxplain model aligned to ``data``'s ids (λ unknown unless given)."""
    U, V = read_embeddings(data, user_factors, item_factors, user_ids, item_ids)
    meta = {
        "kind": "imported",
        "loss": "squared",
        "lam": lam,
        "mu": mu,
        "n_train": len(data),
        "grad_norm": None,
        "info": {"source": [str(user_factors), str(item_factors)]},
    }
    return write_model(out, U, V, meta, data)
