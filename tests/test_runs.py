"""Run folders: atomic shards, verified resume, temporaries cleaned, LATEST moved last."""

import json

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from dxplain.errors import InputError
from dxplain.io import runs


def test_resume_keeps_only_verified_shards_and_finish_cleans_up(tmp_path):
    plan = {"data": "abc", "shards": 2}
    run, resumed = runs.start_run(tmp_path, plan)
    assert not resumed
    e0 = runs.write_shard(run, 0, pa.table({"x": [1, 2]}), {"users": 2})
    assert runs.completed_shard(run, 0) == e0
    assert runs.completed_shard(run, 1) is None
    # Same plan resumes the same folder; another plan starts a new one.
    assert runs.start_run(tmp_path, plan) == (run, True)
    other, resumed = runs.start_run(tmp_path, {"data": "xyz", "shards": 2})
    assert other != run and not resumed
    # A shard file changed after its entry was recorded is not trusted.
    (run / "part-00000.parquet").write_bytes(b"not the recorded file")
    assert runs.completed_shard(run, 0) is None
    e0 = runs.write_shard(run, 0, pa.table({"x": [1, 2]}), {"users": 2})
    e1 = runs.write_shard(run, 1, pa.table({"x": [3]}), {"users": 1})
    (run / ".part-00001.parquet.tmp-deadbeef").write_bytes(b"left by a killed writer")
    assert not (tmp_path / runs.LATEST).exists()
    runs.finish_run(tmp_path, run, {"shards": [e0, e1]})
    assert runs.resolve_run(tmp_path) == run
    assert not list(run.glob(".*")) and not list(run.glob("_meta/.*"))
    assert runs.open_run(run).to_table().column("x").to_pylist() == [1, 2, 3]
    # The run folder is one clean Parquet dataset: its metadata sits in _meta/, which readers skip.
    assert sorted(p.name for p in run.iterdir()) == ["_meta", "part-00000.parquet", "part-00001.parquet"]
    assert sorted(ds.dataset(run, format="parquet").to_table().column("x").to_pylist()) == [1, 2, 3]
    # A completed run is never resumed: the same plan now starts afresh.
    assert runs.start_run(tmp_path, plan)[1] is False


def test_run_folder_on_an_fsspec_url_resumes_verifies_and_publishes():
    import uuid

    import fsspec

    fs = fsspec.filesystem("memory")
    out = f"memory://runs-test-{uuid.uuid4().hex[:8]}"
    plan = {"data": "abc", "shards": 2}
    run, resumed = runs.start_run(out, plan)
    assert isinstance(run, str) and run.startswith(out + "/runs/") and not resumed
    e0 = runs.write_shard(run, 0, pa.table({"x": [1, 2]}), {"users": 2})
    assert runs.completed_shard(run, 0) == e0 and runs.completed_shard(run, 1) is None
    assert runs.start_run(out, plan) == (run, True)
    path = run.removeprefix("memory://")
    fs.pipe_file(f"{path}/part-00000.parquet", b"not the recorded file")  # tampered after its entry
    assert runs.completed_shard(run, 0) is None
    e0 = runs.write_shard(run, 0, pa.table({"x": [1, 2]}), {"users": 2})
    e1 = runs.write_shard(run, 1, pa.table({"x": [3]}), {"users": 1})
    fs.pipe_file(f"{path}/.part-00001.parquet.tmp-deadbeef", b"left by a killed writer")
    assert not fs.exists(out.removeprefix("memory://") + "/" + runs.LATEST)
    with pytest.raises(InputError, match="no _meta/manifest.json"):
        runs.read_manifest(run)
    runs.finish_run(out, run, {"shards": [e0, e1]})
    assert runs.resolve_run(out) == run
    assert not fs.glob(f"{path}/.*")
    assert runs.open_run(run).to_table().column("x").to_pylist() == [1, 2, 3]
    assert runs.start_run(out, plan)[1] is False


def test_a_run_written_before_the_meta_folder_is_still_read(tmp_path):
    run = tmp_path / "runs" / "old"
    run.mkdir(parents=True)
    entry = runs.write_shard(run, 0, pa.table({"x": [7]}))
    (run / "manifest.json").write_text(json.dumps({"shards": [entry], "summary": {"dataset": "d"}}))
    assert runs.resolve_run(run) == run and runs.read_manifest(run)["summary"] == {"dataset": "d"}
    assert runs.open_run(run).to_table().column("x").to_pylist() == [7]


def test_keep_deletes_the_oldest_complete_runs_but_never_latest_or_an_unfinished_run(tmp_path):
    import datetime as dt

    def run_at(hour, plan, complete=True):
        run, _ = runs.start_run(tmp_path, plan, now=dt.datetime(2026, 1, 1, hour, tzinfo=dt.UTC))
        if complete:
            e = runs.write_shard(run, 0, pa.table({"x": [hour]}))
            runs.write_manifest(run, {"shards": [e]})
        return run

    unfinished = run_at(0, {"p": 0}, complete=False)
    old, mid, new = (run_at(h, {"p": h}) for h in (1, 2, 3))
    runs.publish_latest(tmp_path, mid)  # LATEST need not be the newest (e.g. a newer run was refused)
    assert runs.prune_runs(tmp_path, keep=1) == [old.name]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [unfinished.name, mid.name, new.name]
    assert runs.prune_runs(tmp_path, keep=2) == []


def test_keep_deletes_the_stores_only_deleted_runs_used(tmp_path):
    """A pruned run's model under <out>/models and its data's part store go, unless a remaining run (kept
    or unfinished) uses them, or something in them was written after the pruning run began."""
    import datetime as dt
    import os
    import time

    def store(rel):
        f = tmp_path / rel / "part-0.parquet"
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")
        return tmp_path / rel

    def run_at(hour, fp, model, complete=True):
        plan = {"data": fp, "model": str(model)}
        run, _ = runs.start_run(tmp_path, plan, now=dt.datetime(2026, 1, 1, hour, tzinfo=dt.UTC))
        if complete:
            runs.write_manifest(run, {"shards": []})
        return run.name

    old, mid, new, pending = ("0123456789abcdef"[i] * 16 for i in range(4))
    model = {fp: store(f"models/ml-100k-{fp}-k32-lam0.0003-s0.zarr") for fp in (old, mid, new, pending)}
    parts = {fp: store(f"partitions/ml-100k-{fp}") for fp in (old, mid, new, pending)}
    imported = store("imported/model.zarr")  # a --model stored elsewhere: never touched
    other = store(f"models/ml-100k-{new}-k8-lam0.0003-s0.zarr")  # the same data, a model no run names
    names = [
        run_at(1, old, model[old]),
        run_at(2, mid, imported),
        run_at(3, new, model[new]),
        run_at(4, pending, model[pending], complete=False),
    ]
    now = time.time()
    for p in tmp_path.rglob("*"):
        os.utime(p, (now - 7200, now - 7200))
    os.utime(parts[mid] / "part-0.parquet")  # written after the pruning run began: another run may use it
    pruned_runs, pruned_stores, failed = runs.prune(tmp_path, 1, "ml-100k", since=now - 3600)
    assert pruned_runs == names[:2] and failed == []
    assert pruned_stores == [f"models/ml-100k-{old}-k32-lam0.0003-s0.zarr", f"partitions/ml-100k-{old}"]
    assert not model[old].exists() and not parts[old].exists() and parts[mid].exists() and imported.exists()
    assert all(model[fp].exists() and parts[fp].exists() for fp in (new, pending)) and other.exists()


def test_keep_deletes_no_store_while_a_remaining_runs_plan_cannot_be_read(tmp_path):
    import datetime as dt

    fp = "b" * 16
    store = tmp_path / "partitions" / f"ds-{fp}"
    store.mkdir(parents=True)
    names = []
    for hour, data in ((1, fp), (2, "c" * 16)):
        run, _ = runs.start_run(
            tmp_path, {"data": data, "model": "elsewhere"}, now=dt.datetime(2026, 1, 1, hour, tzinfo=dt.UTC)
        )
        runs.write_manifest(run, {"shards": []})
        names.append(run.name)
    legacy = tmp_path / "runs" / "2026-01-01T030000Z-legacy"  # the newest, from before plans were kept
    legacy.mkdir()
    (legacy / "manifest.json").write_text("{}")
    assert runs.prune(tmp_path, 2, "ds", since=1e12) == ([names[0]], [], []) and store.exists()
    assert runs.prune(tmp_path, 2, "ds", since=1e12) == ([], [], [])


def test_keep_deletes_the_stores_a_run_recorded_together_or_not_at_all(tmp_path, monkeypatch):
    """Recorded stores (an implicit dataset's positives too) go with their run; one recently written keeps
    its whole group; a store that cannot be deleted is reported, not raised (the run is published)."""
    import datetime as dt
    import os
    import time

    import fsspec.implementations.local as local

    def store(rel):
        f = tmp_path / rel / "part-0.parquet"
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")
        return tmp_path / rel

    def run_at(hour, stores):
        when = dt.datetime(2026, 1, 1, hour, tzinfo=dt.UTC)
        run, _ = runs.start_run(tmp_path, {"data": str(hour)}, now=when)
        runs.record_stores(run, [str(s) for s in stores])
        runs.write_manifest(run, {"shards": []})
        return run.name

    D1, P1, M1 = store("partitions/ds-d1"), store("partitions/ds-p1"), store("models/ds-d1-bce.zarr")
    D2, M2 = store("partitions/ds-d2"), store("models/ds-d2-bce.zarr")
    shared = store("partitions/ds-shared")  # used by a kept run too
    first = run_at(1, [D1, P1 / "sampled-m4-s0", M1, shared])
    second = run_at(2, [D2, M2, tmp_path / "elsewhere.zarr"])
    run_at(3, [shared])
    now = time.time()
    for p in tmp_path.rglob("*"):
        os.utime(p, (now - 7200, now - 7200))
    os.utime(D2 / "part-0.parquet")  # reused by a refresh still running: its model stays with it
    real_rm = local.LocalFileSystem.rm

    def rm(self, path, *a, **kw):
        if path.endswith("models/ds-d1-bce.zarr"):
            raise PermissionError("not allowed")
        return real_rm(self, path, *a, **kw)

    monkeypatch.setattr(local.LocalFileSystem, "rm", rm)
    pruned, deleted, failed = runs.prune(tmp_path, 1, "ds", since=now - 3600)
    assert pruned == [first, second]
    assert deleted == ["partitions/ds-d1", "partitions/ds-p1"] and not D1.exists() and not P1.exists()
    assert failed == ["models/ds-d1-bce.zarr: not allowed"] and M1.exists()
    assert D2.exists() and M2.exists() and shared.exists()
