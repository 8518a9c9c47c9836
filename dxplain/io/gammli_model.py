"""GAMMLI's model folder (``gammli fit --out O`` writes ``O/model/``)::

    arrays.npz             every array of the fitted model (no pickles)
    train/part-*.parquet   the latent term's training residuals (u, i, e), one file per fitting task
    meta.json              scalars, term names, feature encodings
    user_features.parquet, item_features.parquet   the feature tables the model was fitted with

The residuals are read a set of pairs at a time (``read_training_rows``), never whole.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import atomic_file, join
from .features import FeatureTable, features_from_table
from .tables import parquet_bytes


def _training_files(path: Path) -> list[Path]:
    return sorted((path / "train").glob("part-*.parquet"))


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
    loc = join(folder, "train", f"part-{n:05d}.parquet")
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
