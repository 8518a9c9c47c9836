"""Run folders: one Parquet file per shard written atomically, a manifest, and a ``LATEST`` pointer.

    <out>/runs/<UTC timestamp>-<id>/plan.json                  what the run computes (its plan key)
    <out>/runs/<...>/part-00000.parquet ...                    one per shard (temp file, then rename)
    <out>/runs/<...>/part-00000.json ...                       the shard's entry: rows, sha256, stats
    <out>/runs/<...>/manifest.json                             all shards and the summary: the run is complete
    <out>/LATEST                                               the complete run's folder name

``LATEST`` moves only after every shard of a run is written and the manifest lists them all, so a
reader that follows it never sees an incomplete run. A run that was interrupted has no manifest;
rerunning the same plan resumes it, keeping every shard whose file still matches its recorded hash.
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


def plan_key(plan: dict) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:20]


def start_run(out: str | Path, plan: dict, now: dt.datetime | None = None) -> tuple[Path, bool]:
    """The incomplete run with this plan to resume, or a new dated run folder; (folder, resumed)."""
    key = plan_key(plan)
    root = Path(out) / "runs"
    if root.is_dir():
        for run in sorted(root.iterdir(), reverse=True):
            plan_file = run / "plan.json"
            if plan_file.exists() and not (run / "manifest.json").exists() and \
                    json.loads(plan_file.read_text()).get("key") == key:
                return run, True
    now = now or dt.datetime.now(dt.timezone.utc)
    run = root / f"{now:%Y-%m-%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    run.mkdir(parents=True, exist_ok=False)
    write_text_atomic(run / "plan.json", json.dumps({"key": key, "plan": plan}, indent=2, default=str))
    return run, False


def shard_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_shard(run: str | Path, shard: int, table: pa.Table, stats: dict | None = None) -> dict:
    """Write one shard's rows, then its entry (both atomically); return the entry.

    The entry is written last, so a shard interrupted between the two is simply recomputed.
    """
    path = Path(run) / shard_name(shard)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    entry = {"shard": shard, "file": path.name, "rows": table.num_rows, "sha256": sha256_file(path), **(stats or {})}
    write_text_atomic(path.with_suffix(".json"), json.dumps(entry))
    return entry


def completed_shard(run: str | Path, shard: int) -> dict | None:
    """The recorded entry of a shard whose file is present and still matches its hash, else None."""
    path = Path(run) / shard_name(shard)
    side = path.with_suffix(".json")
    if not (path.exists() and side.exists()):
        return None
    entry = json.loads(side.read_text())
    return entry if sha256_file(path) == entry.get("sha256") else None


def write_manifest(run: str | Path, manifest: dict) -> None:
    write_text_atomic(Path(run) / "manifest.json", json.dumps(manifest, indent=2, default=str))


def read_manifest(run: str | Path) -> dict:
    path = Path(run) / "manifest.json"
    if not path.exists():
        raise InputError(f"{run}: no manifest.json; the run did not complete (use a run that LATEST points to)")
    return json.loads(path.read_text())


def finish_run(out: str | Path, run: str | Path, manifest: dict) -> None:
    """Complete a run: drop temporaries of writers that died mid-write, write the manifest, move LATEST."""
    for stray in Path(run).glob(".*.tmp-*"):
        stray.unlink(missing_ok=True)
    write_manifest(run, manifest)
    publish_latest(out, run)


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
