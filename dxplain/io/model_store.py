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
from ..models.mf import MFModel
from .atomic import Location, atomic_dir, exists as _exists, join
from .interactions import index_of

ROW_CHUNK = 65536


def _ids_to_zarr(ids: pa.Array) -> np.ndarray:
    if pa.types.is_integer(ids.type):
        return ids.to_numpy(zero_copy_only=False).astype(np.int64)
    # Variable-length UTF-8 has a Zarr v3 spec; fixed-width numpy unicode does not.
    return np.array(ids.to_pylist(), dtype=np.dtypes.StringDType())


def _ids_from_zarr(arr) -> pa.Array:
    values = arr[:]
    return pa.array(values.astype(np.int64) if values.dtype.kind in "iu" else [str(v) for v in values])


def model_path(out: Location, dataset: str, fingerprint: str, k: int, lam: float, seed: int,
               max_sweeps: int | None = None, polish_iters: int | None = None) -> Location:
    """Where the refresh keeps the model it trained on this exact data: reused while the data is unchanged.

    A training budget is part of the name, so a capped model is never reused by an uncapped run.
    """
    budget = "".join(f"-{tag}{v}" for tag, v in (("sweeps", max_sweeps), ("newton", polish_iters)) if v is not None)
    return join(out, "models", f"{dataset}-{fingerprint}-k{k}-lam{lam:g}-s{seed}{budget}.zarr")


def exists(path: Location) -> bool:
    """Whether a model store is at ``path`` (a local folder or an fsspec URL)."""
    return _exists(join(path, "zarr.json"))


def save_model(path: Location, model: MFModel, data: Interactions) -> Location:
    """Write ``model`` atomically (local folder or fsspec URL); its attributes tie it to ``data`` by fingerprint."""
    path = join(path)
    with atomic_dir(path) as tmp:
        g = zarr.open_group(str(tmp), mode="w")
        chunk = (min(ROW_CHUNK, max(1, len(model.U))), model.k)
        g.create_array("user_factors", data=model.U, chunks=chunk)
        g.create_array("item_factors", data=model.V, chunks=(min(ROW_CHUNK, max(1, len(model.V))), model.k))
        g.create_array("user_ids", data=_ids_to_zarr(data.user_ids))
        g.create_array("item_ids", data=_ids_to_zarr(data.item_ids))
        g.attrs.update({
            "kind": model.kind, "loss": model.loss, "lam": model.lam, "k": model.k, "n_train": model.n_train,
            "objective_scaling": getattr(model, "objective_scaling",
                                         "(1/|D|) Σ (y − μ − ⟨U_i,V_j⟩)² + (λ/2)(‖U‖² + ‖V‖²)"),
            "mu": model.mu, "grad_norm": model.grad_norm, "fingerprint": data.fingerprint(),
            "dxplain_version": __version__, "info": model.info,
        })
    return path


def model_attrs(path: Location) -> dict:
    path = join(path)
    if not exists(path):
        raise InputError(f"{path}: not a dxplain model store (no zarr.json); train one with `dxplain train` "
                         "or create one with `dxplain import-embeddings`")
    return dict(zarr.open_group(str(path), mode="r").attrs)


def load_model(path: Location, data: Interactions | None = None) -> MFModel:
    """Read a model; with ``data``, check that it was fitted on exactly these interactions and ids."""
    attrs = model_attrs(path)
    g = zarr.open_group(str(path), mode="r")
    if data is not None:
        if attrs.get("fingerprint") not in (None, data.fingerprint()):
            raise InputError(f"{path}: the model was fitted on other data (fingerprint {attrs['fingerprint']}, "
                             f"dataset has {data.fingerprint()}); retrain it, or drop --model to train afresh")
        for side, ids in (("user", data.user_ids), ("item", data.item_ids)):
            stored = _ids_from_zarr(g[f"{side}_ids"])
            if not stored.cast(pa.string()).equals(ids.cast(pa.string())):
                raise InputError(f"{path}: its {side} ids differ from the dataset's; re-import the embeddings "
                                 "against this dataset")
    return MFModel(U=g["user_factors"][:], V=g["item_factors"][:], mu=float(attrs.get("mu", 0.0)),
                   lam=attrs.get("lam"), n_train=int(attrs.get("n_train", 0)), loss=attrs.get("loss", "squared"),
                   kind=attrs.get("kind", "imported"), grad_norm=attrs.get("grad_norm"), info=attrs.get("info", {}))


# --- import of factors trained elsewhere ------------------------------------------------------------

def _read_ids(path: Path) -> pa.Array:
    if path.suffix in (".parquet", ".pq"):
        t = pq.read_table(path)
        if "id" not in t.column_names:
            raise InputError(f"{path}: an id list needs a column 'id'; found {t.column_names}")
        return t.column("id").combine_chunks()
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    return pa.array([int(x) for x in lines]) if all(x.lstrip("-").isdigit() for x in lines) else pa.array(lines)


def read_factor_file(path: str | Path, ids_path: str | Path | None) -> tuple[np.ndarray, pa.Array]:
    """Factors and their ids from .npy (+ id list), Parquet (``id`` + ``embedding`` or numeric columns) or Zarr."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    ids = None
    if path.suffix == ".npy":
        F = np.load(path, allow_pickle=False)  # never unpickle user-supplied files
    elif path.suffix in (".parquet", ".pq"):
        t = pq.read_table(path)
        if "id" not in t.column_names:
            raise InputError(f"{path}: needs a column 'id' next to the factors; found {t.column_names}")
        ids = t.column("id").combine_chunks()
        if "embedding" in t.column_names:
            F = np.asarray(t.column("embedding").to_pylist(), dtype=np.float64)
        else:
            F = np.column_stack([t.column(c).to_numpy() for c in t.column_names if c != "id"]).astype(np.float64)
    elif path.suffix == ".zarr" or path.is_dir():
        F = zarr.open_array(str(path), mode="r")[:]
    else:
        raise InputError(f"{path}: unknown factor format; use .npy, .parquet or .zarr")
    if ids is None:
        if ids_path is None:
            raise InputError(f"{path}: .npy/.zarr factors need their id list (--user-ids/--item-ids: "
                             "Parquet with column 'id', or a text file with one id per line)")
        ids = _read_ids(Path(ids_path))
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
    pos = index_of(wanted, ids, side, source, missing="{n} dataset {what}(s) have no embedding, e.g. {examples}; "
                   "export embeddings for every user and item of the training data")
    return F[pos]


def import_embeddings(out: str | Path, data: Interactions, user_factors, item_factors, user_ids=None,
                      item_ids=None, lam: float | None = None, mu: float = 0.0) -> Path:
    """Store external factors as a dxplain model aligned to ``data``'s ids (λ unknown unless given)."""
    U, uids = read_factor_file(user_factors, user_ids)
    V, iids = read_factor_file(item_factors, item_ids)
    if U.shape[1] != V.shape[1]:
        raise InputError(f"user factors have k={U.shape[1]} columns but item factors k={V.shape[1]}; "
                         "both towers must end in the same embedding size")
    U = align_factors(U, uids, data.user_ids, "user", str(user_factors))
    V = align_factors(V, iids, data.item_ids, "item", str(item_factors))
    model = MFModel(U, V, mu=mu, lam=lam, n_train=len(data), kind="imported", grad_norm=None,
                    info={"source": [str(user_factors), str(item_factors)]})
    return save_model(out, model, data)
