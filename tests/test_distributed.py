"""The Dask path on a real LocalCluster (2 worker processes) equals its in-memory twin."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from dxplain.config import Settings
from dxplain.distributed.cluster import blas_threads, connect
from dxplain.distributed.refresh import run_on_cluster
from dxplain.explain.representer import Preprocessed
from dxplain.explain.shards import RefreshJob, run_in_memory, shard_users
from dxplain.models.mf import ALSMF

from conftest import random_interactions

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def client():
    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as c:
        yield c


def test_workers_have_capped_blas_threads(client):
    threads = blas_threads(client)
    assert len(threads) == 2 and set(threads.values()) == {1}


def test_cluster_output_equals_in_memory(client, tmp_path):
    d = random_interactions(80, 60, 0.2, seed=11)
    m = ALSMF(k=5, lam=3e-3).fit(d)
    job = RefreshJob(d, Preprocessed.from_model(m, d), top_n=5, top_k=3)
    shards = shard_users(d, 6)
    assert sum(len(s) for s in shards) == d.n_users
    (tmp_path / "mem").mkdir()
    (tmp_path / "dask").mkdir()
    mem = run_in_memory(job, shards, str(tmp_path / "mem"))
    dsk = run_on_cluster(client, job, shards, str(tmp_path / "dask"))
    assert [e["rows"] for e in mem] == [e["rows"] for e in dsk]
    assert sum(e["targets"] for e in dsk) == 5 * d.n_users
    for a, b in zip(mem, dsk):
        ta, tb = pq.read_table(tmp_path / "mem" / a["file"]), pq.read_table(tmp_path / "dask" / b["file"])
        assert ta.equals(tb), f"shard {a['shard']} differs"
        assert a["sha256"] == b["sha256"]
    written = sorted(p.name for p in (tmp_path / "dask").iterdir())
    assert written == sorted([e["file"] for e in dsk] + [e["file"].replace(".parquet", ".json") for e in dsk])
