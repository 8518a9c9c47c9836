"""Run folders: atomic shards, verified resume, temporaries cleaned, LATEST moved last."""

import pyarrow as pa
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
    assert not list(run.glob(".*"))
    assert runs.open_run(run).to_table().column("x").to_pylist() == [1, 2, 3]
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
    with pytest.raises(InputError, match="no manifest.json"):
        runs.read_manifest(run)
    runs.finish_run(out, run, {"shards": [e0, e1]})
    assert runs.resolve_run(out) == run
    assert not fs.glob(f"{path}/.*")
    assert runs.open_run(run).to_table().column("x").to_pylist() == [1, 2, 3]
    assert runs.start_run(out, plan)[1] is False
