"""GAMMLI on a real 2-worker LocalCluster equals its in-process twin, bit for bit."""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from dxplain.config import Settings
from dxplain.distributed.cluster import connect
from dxplain.distributed.mapper import DaskMapper
from dxplain.gammli.fit import Config, fit_gammli
from dxplain.gammli.synthetic import eq6
from dxplain.io.features import features_from_table
from dxplain.mapper import LocalMapper

pytestmark = pytest.mark.distributed


def test_dask_fit_equals_local_fit():
    d = eq6(60, 50, missing=0.7, seed=4)
    users, items = features_from_table(d["users"], "user"), features_from_table(d["items"], "item")
    # (K, L, λ) fixed and few sweeps: every stage runs on the cluster, in seconds rather than a minute
    cfg = Config(rank=2, K=3, L=4, lam=3.0, n_parts=3, max_pairs=3, max_sweeps=25)
    # The workers run one BLAS thread, and so does this process in both fits: a threaded BLAS splits the Gram
    # products and solves of the joint refit (~300 columns) differently, which changes the last bit.
    with threadpool_limits(1):
        a = fit_gammli(users, items, d["u"], d["i"], d["y"], cfg, LocalMapper(), log=lambda *_: None)
        with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as client:
            b = fit_gammli(users, items, d["u"], d["i"], d["y"], cfg, DaskMapper(client), log=lambda *_: None)
    assert (a.info["K"], a.info["L"], a.info["lam"]) == (b.info["K"], b.info["L"], b.info["lam"])
    assert a.info["stage1"]["kept"] == b.info["stage1"]["kept"] and a.info["stage2"]["kept"] == b.info["stage2"]["kept"]
    for x, y in zip(a.additive.coefs, b.additive.coefs):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.U, b.U)
    np.testing.assert_array_equal(a.V, b.V)
    np.testing.assert_array_equal(a.predict(d["u"], d["i"]), b.predict(d["u"], d["i"]))


def test_parts_built_on_the_cluster_from_file_chunks_equal_the_local_ones(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dxplain.gammli.fit import RatingsFile, build_parts
    from dxplain.io.ratings import ratings_chunks

    d = eq6(60, 50, missing=0.7, seed=4)
    users, items = features_from_table(d["users"], "user"), features_from_table(d["items"], "item")
    path = tmp_path / "r.parquet"
    pq.write_table(
        pa.table(
            {"user": users.ids.take(pa.array(d["u"])), "item": items.ids.take(pa.array(d["i"])), "rating": d["y"]}
        ),
        path,
        row_group_size=100,
    )
    chunks = ratings_chunks(str(path), rows=200)
    assert len(chunks) > 2
    args = (RatingsFile(users, items), chunks, len(users), len(items), 4, 0.2, 3)
    local, info_local = build_parts(LocalMapper(), *args)
    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as client:
        remote, info_remote = build_parts(DaskMapper(client), *args)
        remote = {side: [(client.gather(p), lo, hi) for p, lo, hi in ps] for side, ps in remote.items()}
    assert info_local["n"] == info_remote["n"] and info_local["n_val"] == info_remote["n_val"]
    for side in ("user", "item"):
        assert [(lo, hi) for _, lo, hi in local[side]] == [(lo, hi) for _, lo, hi in remote[side]]
        for (a, _, _), (b, _, _) in zip(local[side], remote[side]):
            for k in ("u", "i", "y", "val"):
                np.testing.assert_array_equal(a[k], b[k])
