"""Run folders: one Parquet file per shard written atomically, a manifest, and a ``LATEST`` pointer.

    <out>/runs/<UTC timestamp>-<id>/part-00000.parquet ...   one per shard (temp file, then rename)
    <out>/runs/<...>/manifest.json                             shards with rows and sha256, the summary
    <out>/LATEST                                               the complete run's folder name

``LATEST`` moves only after every shard of a run is written and the manifest lists them all, so a
reader that follows it never sees an incomplete run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import atomic_path, write_text_atomic

LATEST = "LATEST"


def new_run(out: str | Path, now: dt.datetime | None = None) -> Path:
    now = now or dt.datetime.now(dt.timezone.utc)
    run = Path(out) / "runs" / f"{now:%Y-%m-%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    run.mkdir(parents=True, exist_ok=False)
    return run


def shard_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_shard(run: str | Path, shard: int, table: pa.Table) -> dict:
    """Write one shard's rows atomically; return its manifest entry."""
    path = Path(run) / shard_name(shard)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return {"shard": shard, "file": path.name, "rows": table.num_rows, "sha256": sha256_file(path)}


def write_manifest(run: str | Path, manifest: dict) -> None:
    write_text_atomic(Path(run) / "manifest.json", json.dumps(manifest, indent=2, default=str))


def read_manifest(run: str | Path) -> dict:
    path = Path(run) / "manifest.json"
    if not path.exists():
        raise InputError(f"{run}: no manifest.json; the run did not complete (use a run that LATEST points to)")
    return json.loads(path.read_text())


def publish_latest(out: str | Path, run: str | Path) -> None:
    """Point ``LATEST`` at ``run`` — call only after the manifest lists every shard."""
    write_text_atomic(Path(out) / LATEST, Path(run).name + "\n")


def resolve_run(path: str | Path) -> Path:
    """A run folder, or an output root whose LATEST names one."""
    path = Path(path)
    if (path / LATEST).exists():
        return path / "runs" / (path / LATEST).read_text().strip()
    if (path / "manifest.json").exists():
        return path
    raise InputError(f"{path}: neither a run folder (manifest.json) nor an output folder with {LATEST}; "
                     "pass the --out folder of a finished refresh")


def open_run(run: str | Path) -> pads.Dataset:
    """The run's attributions as a pyarrow dataset over its manifest's files (filter before reading)."""
    run = Path(run)
    files = [str(run / s["file"]) for s in read_manifest(run)["shards"]]
    return pads.dataset(files, format="parquet")
