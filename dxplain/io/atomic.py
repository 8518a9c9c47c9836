"""Write-then-rename helpers: a reader never sees a partial file or folder."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary sibling of ``path``; on success rename it over ``path``, else remove it.

    Works for files and folders alike. The rename is atomic on POSIX file systems because the
    temporary lives in the same folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path)
    try:
        yield tmp
        if path.is_dir() and tmp.is_dir():
            # os.replace cannot replace a non-empty folder: move the old one aside first.
            old = _tmp_sibling(path)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


def write_result_folder(out: str | os.PathLike, kind: str, tables: dict[str, pa.Table], summary: dict,
                        now: dt.datetime | None = None, files: dict[str, str | bytes] | None = None) -> Path:
    """``<out>/<kind>/<UTC timestamp>-<id>/`` holding ``<name>.parquet`` per table, any other ``files``
    (name → text or bytes) and ``summary.json``, written whole in a temporary folder and renamed into
    place: a crashed run leaves nothing behind."""
    now = now or dt.datetime.now(dt.timezone.utc)
    path = Path(out) / kind / f"{now:%Y-%m-%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    with atomic_path(path) as tmp:
        tmp.mkdir(parents=True)
        for name, table in tables.items():
            pq.write_table(table, tmp / f"{name}.parquet")
        for name, content in (files or {}).items():
            (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        (tmp / "summary.json").write_text(json.dumps({**summary, "folder": str(path)}, indent=2, default=str))
    return path
