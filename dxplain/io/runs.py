"""Run folders: one Parquet file per shard written atomically, a manifest, and a ``LATEST`` pointer.

    <out>/runs/<UTC timestamp>-<id>/part-00000.parquet ...     one per shard (temp file, then rename)
    <out>/runs/<...>/_meta/plan.json                           what the run computes (its plan key)
    <out>/runs/<...>/_meta/part-00000.json ...                 the shard's entry: rows, sha256, stats
    <out>/runs/<...>/_meta/users-00000.parquet ...             which row groups hold each user (``dxplain serve``)
    <out>/runs/<...>/_meta/manifest.json                       all shards and the summary: the run is complete
    <out>/runs/<...>/_meta/stage/…                             intermediate files between a run's passes
    <out>/LATEST                                               the complete run's folder name

The run folder itself holds only the attribution Parquet files, so it is one clean dataset:
``pyarrow.dataset.dataset(run, format="parquet")``, DuckDB's ``read_parquet('run/*.parquet')``, pandas,
Spark and Polars read it in one call (readers skip ``_``- and ``.``-prefixed entries). What the resume
needs lives in ``_meta/``.

``LATEST`` moves only after every shard of a run is written and the manifest lists them all, so a
reader that follows it never sees an incomplete run. A run that was interrupted has no manifest;
rerunning the same plan resumes it, keeping every shard whose file still matches its recorded hash.

``<out>`` is a local folder or any fsspec URL (``memory://`` in tests, ``s3://bucket/prefix`` with the
``s3`` extra). Locations come back as ``Path`` for local folders and as URL strings otherwise, so a
shard task on another machine writes to the same place. On object stores a write is a whole-object
PUT and the rename a copy: a reader still never trusts a file that its sidecar hash and the manifest
do not vouch for.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from pathlib import PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..errors import InputError
from .atomic import Location, atomic_file, exists, filesystem, is_local, join, read_text, write_text_atomic

LATEST = "LATEST"
META = "_meta"
STAGE = f"{META}/stage"


def meta(run: Location, name: str) -> Location:
    """Where the run keeps its metadata file ``name`` (plan, shard entries, manifest)."""
    return join(run, META, name)


def plan_key(plan: dict) -> str:
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()[:20]


def check_shared(out: Location) -> None:
    """Refuse an output location that worker processes cannot reach (memory:// lives in one process)."""
    if str(out).startswith("memory://"):
        raise InputError(
            f"--out {out}: memory:// is private to one process, so shards written by Dask workers "
            "would be lost; use --in-memory with memory://, or a shared location (a local or "
            "network folder, s3://…) with a cluster"
        )


def start_run(out: Location, plan: dict, now: dt.datetime | None = None) -> tuple[Location, bool]:
    """The incomplete run with this plan to resume, or a new dated run folder; (folder, resumed)."""
    key = plan_key(plan)
    root = join(out, "runs")
    fs, root_path = filesystem(root)
    if fs.isdir(root_path):
        for name in sorted((PurePosixPath(p).name for p in fs.ls(root_path, detail=False)), reverse=True):
            run = join(root, name)
            if (
                exists(meta(run, "plan.json"))
                and not exists(meta(run, "manifest.json"))
                and json.loads(read_text(meta(run, "plan.json"))).get("key") == key
            ):
                return run, True
    now = now or dt.datetime.now(dt.UTC)
    run = join(root, f"{now:%Y-%m-%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}")
    fs.makedirs(filesystem(run)[1], exist_ok=True)
    write_text_atomic(meta(run, "plan.json"), json.dumps({"key": key, "plan": plan}, indent=2, default=str))
    return run, False


def shard_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


def sha256_file(loc: Location) -> str:
    fs, path = filesystem(loc)
    h = hashlib.sha256()
    with fs.open(path, "rb") as fh:
        for piece in iter(lambda: fh.read(1 << 20), b""):
            h.update(piece)
    return h.hexdigest()


def write_shard(run: Location, shard: int, table: pa.Table, stats: dict | None = None) -> dict:
    """Write one shard's rows, then its user index (``index_name``), then its entry (each atomically); return the
    entry.

    The entry is written last, so a shard interrupted before it is simply recomputed.
    """
    path = join(run, shard_name(shard))
    with atomic_file(path) as fh:
        pq.write_table(table, fh, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    if "user" in table.column_names:  # an attribution table (every run's); the tests' toy tables have none
        write_user_index(run, shard, table.column("user"))
    entry = {
        "shard": shard,
        "file": shard_name(shard),
        "rows": table.num_rows,
        "sha256": sha256_file(path),
        **(stats or {}),
    }
    write_text_atomic(meta(run, f"part-{shard:05d}.json"), json.dumps(entry))
    return entry


ROW_GROUP_ROWS = 65_536  # a lookup reads whole row groups: small ones keep it to a user's neighbourhood


def index_name(shard: int) -> str:
    return f"{META}/users-{shard:05d}.parquet"


def user_row_groups(users: pa.Array, row_group_rows: int = ROW_GROUP_ROWS) -> pa.Table:
    """(user, row_group) for every user present in each row group of a column written in groups of
    ``row_group_rows``."""
    out_users, out_groups = [], []
    for g, start in enumerate(range(0, len(users), row_group_rows)):
        present = pc.unique(users.slice(start, row_group_rows))
        out_users.append(present)
        out_groups.append(np.full(len(present), g, np.int32))
    if not out_users:
        return pa.table({"user": pa.array([], users.type), "row_group": pa.array([], pa.int32())})
    return pa.table({"user": pa.concat_arrays(out_users), "row_group": np.concatenate(out_groups)})


def write_user_index(run: Location, shard: int, users: pa.ChunkedArray | pa.Array) -> None:
    users = users.combine_chunks() if isinstance(users, pa.ChunkedArray) else users
    with atomic_file(join(run, index_name(shard))) as fh:
        pq.write_table(user_row_groups(users), fh)


def completed_shard(run: Location, shard: int) -> dict | None:
    """The recorded entry of a shard whose file is present and still matches its hash, else None."""
    path, side = join(run, shard_name(shard)), meta(run, f"part-{shard:05d}.json")
    if not (exists(path) and exists(side)):
        return None
    entry = json.loads(read_text(side))
    return entry if sha256_file(path) == entry.get("sha256") else None


def write_stage(run: Location, name: str, table: pa.Table) -> None:
    """Keep an intermediate table of the run (atomically) under ``_meta/stage/<name>.parquet``.

    The stage carries work from one pass of the refresh to the next (a shard's targets, the user-side
    rows a task computed for a shard), so a resumed run reuses what an interrupted one staged.
    """
    with atomic_file(join(run, STAGE, f"{name}.parquet")) as fh:
        pq.write_table(table, fh, compression="lz4")  # read back once, soon: speed over size


def read_stage(run: Location, name: str) -> pa.Table | None:
    """A staged table, or None if it was never (completely) written."""
    loc = join(run, STAGE, f"{name}.parquet")
    if not exists(loc):
        return None
    fs, path = filesystem(loc)
    with fs.open(path, "rb") as fh:
        return pq.read_table(fh)


def staged(run: Location, name: str) -> bool:
    return exists(join(run, STAGE, f"{name}.parquet"))


def clear_stage(run: Location) -> None:
    """Remove the run's intermediate files (once every shard is written; they are not part of the output)."""
    fs, path = filesystem(join(run, STAGE))
    if fs.exists(path):
        fs.rm(path, recursive=True)


# Beside a run's shards: its targets in original ids (what the next run and ``dxplain diff`` compare), and what
# changed since the run before it.
TARGETS = "targets.parquet"
CHANGES = "changes.parquet"


def write_meta_table(run: Location, name: str, table: pa.Table) -> None:
    """``table`` as ``_meta/<name>`` of the run, atomically."""
    with atomic_file(meta(run, name)) as fh:
        pq.write_table(table, fh)


def read_meta_table(run: Location, name: str) -> pa.Table | None:
    """``_meta/<name>`` of the run, or None for a run written without it."""
    loc = meta(run, name)
    if not exists(loc):
        return None
    fs, path = filesystem(loc)
    with fs.open(path, "rb") as fh:
        return pq.read_table(fh)


def latest_run(out: Location) -> Location | None:
    """The run ``out``'s LATEST names, or None before the first publish."""
    return join(out, "runs", read_text(join(out, LATEST)).strip()) if exists(join(out, LATEST)) else None


def write_manifest(run: Location, manifest: dict) -> None:
    write_text_atomic(meta(run, "manifest.json"), json.dumps(manifest, indent=2, default=str))


def manifest_path(run: Location) -> Location | None:
    """The run's manifest, or None if it did not complete. Runs written before the ``_meta/`` layout kept
    it beside the Parquet files; they are still read."""
    for path in (meta(run, "manifest.json"), join(run, "manifest.json")):
        if exists(path):
            return path
    return None


def read_manifest(run: Location) -> dict:
    path = manifest_path(run)
    if path is None:
        raise InputError(f"{run}: no {META}/manifest.json; the run did not complete (use a run that LATEST points to)")
    return json.loads(read_text(path))


def finish_run(out: Location, run: Location, manifest: dict) -> None:
    """Complete a run: drop temporaries of writers that died mid-write and the stage, write the manifest,
    move LATEST."""
    fs, path = filesystem(run)
    for stray in fs.glob(f"{path}/.*.tmp-*") + fs.glob(f"{path}/{META}/.*.tmp-*"):
        fs.rm(stray)
    clear_stage(run)
    write_manifest(run, manifest)
    publish_latest(out, run)


def publish_latest(out: Location, run: Location) -> None:
    """Point ``LATEST`` at ``run`` — call only after the manifest lists every shard."""
    write_text_atomic(join(out, LATEST), PurePosixPath(str(run)).name + "\n")


def prune_runs(out: Location, keep: int) -> list[str]:
    """Delete all but the ``keep`` newest complete runs under ``out/runs``; return the deleted names.

    Run names start with their UTC start time, so name order is age order. The run LATEST names is
    always kept, and incomplete runs are left alone: a rerun of the same plan resumes them.
    """
    root = join(out, "runs")
    fs, root_path = filesystem(root)
    if not fs.isdir(root_path):
        return []
    latest = read_text(join(out, LATEST)).strip() if exists(join(out, LATEST)) else None
    names = sorted(PurePosixPath(p).name for p in fs.ls(root_path, detail=False))
    complete = [n for n in names if manifest_path(join(root, n)) is not None]
    doomed = [n for n in complete[: max(len(complete) - keep, 0)] if n != latest]
    for name in doomed:
        fs.rm(filesystem(join(root, name))[1], recursive=True)
    return doomed


# A store written this long before the pruning run began still counts as in use: file times may be coarse
# (1–2 s on some filesystems) and an object store's clock may be a little off.
CLOCK_SLACK = 5.0


def record_stores(run: Location, stores: list) -> None:
    """Note the part stores and model ``run`` reads (``prune`` deletes exactly those when the run goes)."""
    write_text_atomic(meta(run, "stores.json"), json.dumps([str(s) for s in stores if s is not None]))


def prune(out: Location, keep: int, dataset: str, since: float) -> tuple[list[str], list[str], list[str]]:
    """``prune_runs``, then the stores (under ``<out>/partitions`` and ``<out>/models``) that the deleted runs
    used and no remaining run uses; (runs deleted, stores deleted, stores that could not be, with why).

    A run's stores are those it recorded (``record_stores``: its part store, an implicit dataset's positives,
    its model); a run from before they were recorded is taken to use its model, if under ``<out>/models``
    (one imported or stored elsewhere is never touched), and ``partitions/<dataset>-<fingerprint>``, the
    dataset's name being the model name's prefix, else ``dataset``. Remaining runs are listed again after
    the deletions, so a run started meanwhile counts. A deleted run's stores are kept together if any of
    them holds a file modified after ``since`` − ``CLOCK_SLACK`` (POSIX seconds; ``since`` is when the
    pruning run began): another refresh may be using them before its run folder exists, and reusing a
    part store writes its ``.last-used``. Nothing is deleted while a remaining run's plan cannot be read.
    """
    before = _runs(out)
    pruned = prune_runs(out, keep)
    remaining = _runs(out)
    if any(plan is None for plan, _ in remaining.values()):
        return pruned, [], []
    in_use = set().union(*(_stores_of(out, dataset, *run) for run in remaining.values()))
    deleted, failed = [], []
    for name in pruned:
        group = sorted(_stores_of(out, dataset, *before[name]) - in_use)
        found = [(rel, filesystem(join(out, rel))) for rel in group]
        found = [(rel, fs, path) for rel, (fs, path) in found if fs.exists(path)]
        if any(_written_since(fs, path, since - CLOCK_SLACK) for _, fs, path in found):
            continue
        for rel, fs, path in found:
            try:
                fs.rm(path, recursive=True)
                deleted.append(rel)
            except OSError as e:  # the run is published already: a store that stays is no reason to fail it
                failed.append(f"{rel}: {e}")
    return pruned, deleted, failed


def _runs(out: Location) -> dict[str, tuple[dict | None, list | None]]:
    """Each run folder's (plan, recorded stores); None where one cannot be read (a run from before)."""
    root = join(out, "runs")
    fs, root_path = filesystem(root)
    runs = {}
    for p in fs.ls(root_path, detail=False) if fs.isdir(root_path) else []:
        name = PurePosixPath(p).name
        found = []
        for file, field in (("plan.json", "plan"), ("stores.json", None)):
            try:
                value = json.loads(read_text(meta(join(root, name), file)))
                found.append(value[field] if field else value)
            except (OSError, ValueError, KeyError, TypeError):
                found.append(None)
        runs[name] = tuple(found)
    return runs


def _stores_of(out: Location, dataset: str, plan: dict | None, stores: list | None) -> set[str]:
    """The stores a run uses, as ``partitions/<name>`` or ``models/<name>`` under ``out`` (see ``prune``)."""
    if plan is None:
        return set()
    roots = {folder: str(join(out, folder)) + "/" for folder in ("partitions", "models")}
    if stores is None:  # a run from before stores were recorded: its model, and its data's part store
        fingerprint, model = plan.get("data"), str(plan.get("model"))
        name = model.rpartition("/")[2]
        stored = model.startswith(roots["models"]) and f"-{fingerprint}-" in name
        owner = name.split(f"-{fingerprint}-")[0] if stored else dataset
        stores = [model, roots["partitions"] + f"{owner}-{fingerprint}"] if isinstance(fingerprint, str) else [model]
    found = set()
    for store in map(str, stores):
        for folder, root in roots.items():
            if store.startswith(root):
                found.add(f"{folder}/{store[len(root) :].split('/')[0]}")
    return found


def _written_since(fs, path: str, since: float) -> bool:
    """Whether anything under ``path`` was modified at or after ``since``, or is a file with no time to tell
    (object stores and ``memory://`` keep no folder times)."""
    for info in [fs.info(path), *fs.find(path, withdirs=True, detail=True).values()]:
        t = info.get("mtime", info.get("LastModified", info.get("created")))
        if isinstance(t, dt.datetime):
            t = t.timestamp()
        if (t is None and info.get("type") != "directory") or (t is not None and t >= since):
            return True
    return False


def resolve_run(path: Location) -> Location:
    """A run folder, or an output root whose LATEST names one."""
    path = join(path)
    if exists(join(path, LATEST)):
        return join(path, "runs", read_text(join(path, LATEST)).strip())
    if manifest_path(path) is not None:
        return path
    raise InputError(
        f"{path}: neither a run folder ({META}/manifest.json) nor an output folder with {LATEST}; "
        "pass the --out folder of a finished refresh"
    )


def first_target(run: Location) -> dict | None:
    """(user, item) of the run's first row, or None for a run without rows: the first row group's two id
    columns of its first non-empty file. ``open_run(run).head(1)`` read ahead over several files' row
    groups, every column: 1.2 GB at 5M interactions."""
    fs, root = filesystem(run)
    for shard in read_manifest(run)["shards"]:
        with fs.open(f"{root}/{shard['file']}", "rb") as fh:
            f = pq.ParquetFile(fh)
            if f.metadata.num_rows:
                return f.read_row_group(0, columns=["user", "item"]).slice(0, 1).to_pylist()[0]
    return None


def open_run(run: Location) -> pads.Dataset:
    """The run's attributions as a pyarrow dataset over its manifest's files (filter before reading)."""
    files = [s["file"] for s in read_manifest(run)["shards"]]
    if is_local(run):
        return pads.dataset([str(join(run, f)) for f in files], format="parquet")
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs, root = filesystem(run)
    return pads.dataset([f"{root}/{f}" for f in files], format="parquet", filesystem=PyFileSystem(FSSpecHandler(fs)))
