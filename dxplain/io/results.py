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
  (keys under ``<out>/evaluations/.cache``, or for a URL ``<out>`` under ``$DXPLAIN_HOME/evaluations/``) so an
  interrupted evaluation resumes where it stopped.

Every folder is written whole in a temporary folder and renamed into place: a crashed run leaves nothing
behind. ``<out>`` is a local folder or an fsspec URL (``s3://…``): there the temporary folder is a prefix beside the
result's, which tasks on workers that share no disk with the flow write to as well, published object by object
(``atomic.atomic_dir``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import Location, atomic_dir, filesystem, is_local, join


def write_results(
    out: str | os.PathLike,
    kind: str,
    tables: dict[str, pa.Table],
    summary: dict,
    files: dict[str, str | bytes] | None = None,
    now: dt.datetime | None = None,
) -> Location:
    """``<out>/<kind>/<UTC timestamp>-<id>/``: ``<name>.parquet`` per table, any other ``files``
    (name → text or bytes) and ``summary.json``, written whole and renamed into place."""
    with staged_results(out, kind, now) as (tmp, path):
        finish_results(tmp, path, tables, summary, files)
    return path


@contextlib.contextmanager
def staged_results(out: str | os.PathLike, kind: str, now: dt.datetime | None = None):
    """``write_results``'s folder, staged for outputs that tasks write too (a Parquet folder, one file per
    task): yields (temporary folder, final path); ``finish_results`` adds the tables and the summary. The
    folder is renamed into place when the ``with`` ends without error, and removed otherwise."""
    now = now or dt.datetime.now(dt.UTC)
    path = join(out, kind, f"{now:%Y-%m-%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}")
    with atomic_dir(path) as tmp:
        if is_local(tmp):
            Path(tmp).mkdir(parents=True)
        yield tmp, path


def finish_results(
    tmp: Location,
    path: Location,
    tables: dict[str, pa.Table],
    summary: dict,
    files: dict[str, str | bytes] | None = None,
) -> None:
    write_into(tmp, tables, files)
    write_bytes(join(tmp, "summary.json"), json.dumps({**summary, "folder": str(path)}, indent=2, default=str).encode())


def write_bytes(loc: Location, content: bytes) -> None:
    """One file of a staged folder (which is published whole later: no temporary of its own)."""
    fs, path = filesystem(loc)
    if is_local(loc):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with fs.open(path, "wb") as fh:
        fh.write(content)


def write_parquet(loc: Location, table: pa.Table) -> None:
    """A table as one Parquet file of a staged folder (a task's share, or the flow's)."""
    fs, path = filesystem(loc)
    if is_local(loc):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with fs.open(path, "wb") as fh:
        pq.write_table(table, fh)


def csv_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    return buf.getvalue()


def evaluation_cache(out: str | Path, home: str | Path) -> Path:
    """Where Prefect keeps an evaluation's finished trials (keys): beside the outputs, or for a URL ``out`` in a
    folder of ``home`` (dxplain's data home) named by the URL, since Prefect's result storage (the trials
    themselves) is local to the flow's host too and a resume runs there."""
    if is_local(out):
        return Path(out) / "evaluations" / ".cache"
    return Path(home) / "evaluations" / hashlib.sha256(str(out).encode()).hexdigest()[:16]


def write_folder(
    path: Location,
    tables: dict[str, pa.Table] | None = None,
    files: dict[str, str | bytes] | None = None,
    force: bool = False,
) -> Location:
    """A result folder at a fixed path (a CLI contract's ``--out``, local or a URL): ``<name>.parquet`` per table and
    any other ``files`` (relative name → text or bytes, sub-folders allowed), written whole in a temporary sibling
    and renamed (on object stores: published) into place, so a failed run leaves nothing at ``path``.

    An existing folder with anything in it is refused (``InputError``) unless ``force``, which replaces it.
    """
    with staged_folder(path, force) as tmp:
        write_into(tmp, tables, files)
    return join(path)


@contextlib.contextmanager
def staged_folder(path: Location, force: bool = False):
    """``write_folder``'s temporary sibling, for outputs that tasks write too (e.g. one file per task): yields
    its location, put in place of ``path`` when the ``with`` ends without error and removed otherwise."""
    check_out_folder(path, force)
    with atomic_dir(join(path)) as tmp:
        if is_local(tmp):
            Path(tmp).mkdir(parents=True)
        yield tmp


def write_into(
    folder: Location, tables: dict[str, pa.Table] | None = None, files: dict[str, str | bytes] | None = None
) -> None:
    """``tables`` and ``files`` as ``write_folder`` lays them out, into an existing (staged) folder."""
    for name, table in (tables or {}).items():
        write_parquet(join(folder, f"{name}.parquet"), table)
    for name, content in (files or {}).items():
        write_bytes(join(folder, *name.split("/")), content if isinstance(content, bytes) else content.encode())


def check_out_folder(path: Location, force: bool = False) -> None:
    """Refuse an ``--out`` that ``write_folder`` would refuse, before any work is done."""
    fs, p = filesystem(join(path))
    if fs.exists(p) and not fs.isdir(p):
        raise InputError(f"--out {path}: is a file; give a folder path (it is created)")
    if fs.isdir(p) and fs.ls(p, detail=False) and not force:
        raise InputError(
            f"--out {path}: the folder exists and is not empty; give a new folder, or --force to replace it"
        )
