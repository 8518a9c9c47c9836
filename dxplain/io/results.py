"""Result folders of every flow other than the refresh (whose run folders are ``io.runs``).

    <out>/<kind>/<UTC timestamp>-<id>/<name>.parquet   one file per table
    <out>/<kind>/<...>/<file>                          any other file (Markdown, CSV, PNG, JSON)
    <out>/<kind>/<...>/summary.json                    what was run and what it found

Kinds and their tables:

* ``prototypes``: ``prototypes.parquet`` (rank, user, item, rating, weight, objective) and
  ``targets.parquet`` (the predictions being explained);
* ``negatives``: ``flagged.parquet`` (user, item, score, rank, method) and, in sampled mode,
  ``cleaned-negatives.parquet`` (the negatives minus the flagged ones);
* ``evaluations``: ``deletions.csv`` (trial, target, method, side, fraction, k, delta), ``auc_del.md``
  (AUC-DEL± per method with 95% CIs), ``deletion_curves.png``; finished trials are cached by Prefect
  under ``<out>/evaluations/.cache`` so an interrupted evaluation resumes where it stopped.

Every folder is written whole in a temporary folder and renamed into place: a crashed run leaves nothing
behind.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import atomic_path, is_local


def write_results(
    out: str | os.PathLike,
    kind: str,
    tables: dict[str, pa.Table],
    summary: dict,
    files: dict[str, str | bytes] | None = None,
    now: dt.datetime | None = None,
) -> Path:
    """``<out>/<kind>/<UTC timestamp>-<id>/``: ``<name>.parquet`` per table, any other ``files``
    (name → text or bytes) and ``summary.json``, written whole and renamed into place."""
    with staged_results(out, kind, now) as (tmp, path):
        finish_results(tmp, path, tables, summary, files)
    return path


def require_local_out(out: str | os.PathLike) -> None:
    """Result folders (``write_results``, ``write_folder``) are written and renamed on a local disk; an fsspec
    URL there would otherwise fail deep in a writer after all the work (issue 56)."""
    if not is_local(out):
        raise InputError(
            f"--out {out}: this command writes its results to a local folder; give a local path (refresh takes "
            "s3:// and other fsspec URLs)"
        )


@contextlib.contextmanager
def staged_results(out: str | os.PathLike, kind: str, now: dt.datetime | None = None):
    """``write_results``'s folder, staged for outputs that tasks write too (a Parquet folder, one file per
    task): yields (temporary folder, final path); ``finish_results`` adds the tables and the summary. The
    folder is renamed into place when the ``with`` ends without error, and removed otherwise."""
    require_local_out(out)
    now = now or dt.datetime.now(dt.UTC)
    path = Path(out) / kind / f"{now:%Y-%m-%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    with atomic_path(path) as tmp:
        tmp.mkdir(parents=True)
        yield tmp, path


def finish_results(
    tmp: Path, path: Path, tables: dict[str, pa.Table], summary: dict, files: dict[str, str | bytes] | None = None
) -> None:
    write_into(tmp, tables, files)
    (tmp / "summary.json").write_text(json.dumps({**summary, "folder": str(path)}, indent=2, default=str))


def csv_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    return buf.getvalue()


def evaluation_cache(out: str | Path) -> Path:
    """Where Prefect keeps an evaluation's finished trials (keys), beside the outputs."""
    return Path(out) / "evaluations" / ".cache"


def write_folder(
    path: str | os.PathLike,
    tables: dict[str, pa.Table] | None = None,
    files: dict[str, str | bytes] | None = None,
    force: bool = False,
) -> Path:
    """A result folder at a fixed path (a CLI contract's ``--out``): ``<name>.parquet`` per table and any
    other ``files`` (relative name → text or bytes, sub-folders allowed), written whole in a temporary
    sibling and renamed into place, so a failed run leaves nothing at ``path``.

    An existing folder with anything in it is refused (``InputError``) unless ``force``, which replaces it.
    """
    with staged_folder(path, force) as tmp:
        write_into(tmp, tables, files)
    return Path(path)


@contextlib.contextmanager
def staged_folder(path: str | os.PathLike, force: bool = False):
    """``write_folder``'s temporary sibling, for outputs that tasks write too (e.g. one file per task): yields
    its path, renamed to ``path`` when the ``with`` ends without error and removed otherwise."""
    path = Path(path)
    check_out_folder(path, force)
    with atomic_path(path) as tmp:
        tmp.mkdir(parents=True)
        yield tmp


def write_into(
    folder: Path, tables: dict[str, pa.Table] | None = None, files: dict[str, str | bytes] | None = None
) -> None:
    """``tables`` and ``files`` as ``write_folder`` lays them out, into an existing (staged) folder."""
    for name, table in (tables or {}).items():
        pq.write_table(table, folder / f"{name}.parquet")
    for name, content in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())


def check_out_folder(path: str | os.PathLike, force: bool = False) -> None:
    """Refuse an ``--out`` that ``write_folder`` would refuse, before any work is done."""
    require_local_out(path)
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"--out {path}: is a file; give a folder path (it is created)")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise InputError(
            f"--out {path}: the folder exists and is not empty; give a new folder, or --force to replace it"
        )
