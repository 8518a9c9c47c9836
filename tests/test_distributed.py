"""The Dask path on a real LocalCluster (2 worker processes) equals its in-memory twin."""

import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import random_interactions

from dxplain.config import Settings
from dxplain.distributed.cluster import blas_threads, connect
from dxplain.distributed.mapper import DaskMapper
from dxplain.explain.representer import Preprocessed
from dxplain.io.partitions import write_partitions
from dxplain.io.row_blocks import call_loaded
from dxplain.mapper import LocalMapper
from dxplain.models.als.trainer import ALSMF
from dxplain.refresh import RefreshJob, alpha_from_table, run_passes, shard_users

pytestmark = pytest.mark.distributed

NUMBA_THREADS_HERE = os.environ.get("NUMBA_NUM_THREADS")


@pytest.fixture(scope="module")
def client():
    with connect(Settings(workers=2, threads_per_worker=1, blas_threads=1)) as c:
        yield c


def test_workers_have_capped_blas_threads(client):
    threads = blas_threads(client)
    assert len(threads) == 2 and set(threads.values()) == {1}


def test_workers_cap_numba_threads_like_blas(client):
    def numba_threads():
        import numba

        return numba.config.NUMBA_NUM_THREADS

    assert set(client.run(numba_threads).values()) == {1}


def test_the_workers_numba_setting_stays_out_of_this_process(client):
    """numba here rereads NUMBA_NUM_THREADS at each compile and refuses a value its threads did not start with: a
    worker's (re)start must not leave the workers' value in this process's environment."""
    client.restart()
    assert os.environ.get("NUMBA_NUM_THREADS") == NUMBA_THREADS_HERE


def test_workers_keep_glibc_dynamic_mmap_threshold(client):
    # Dask's default MALLOC_TRIM_THRESHOLD_ makes every numpy temporary a fresh, page-faulted mmap.
    import os

    assert set(client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values()) == {None}


def test_workers_do_not_inherit_a_trim_threshold_left_by_an_earlier_cluster(monkeypatch):
    import os

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")  # what any default-config nanny leaves behind
    with connect(Settings(workers=1, threads_per_worker=1, blas_threads=1)) as c:
        assert list(c.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values()) == [None]


def test_worker_peak_memory_is_its_own_not_the_flows():
    # A worker is forked from the flow's process and exec'd; ru_maxrss would report the flow's peak.
    held = np.ones(80_000_000)  # 610 MiB in this process before the workers start
    with connect(Settings(workers=1, threads_per_worker=1, blas_threads=1)) as c:
        memory = DaskMapper(c).peak_rss_mib()
    assert memory["flow"] > 610 and held[-1] == 1.0
    assert all(v < 500 for v in memory["workers"].values()), memory


def test_release_memory_gives_the_workers_freed_heap_back(client):
    """Workers run without a trim threshold, so heap memory a stage freed stays resident under a live
    allocation above it; ``release_memory`` (between training and the explanation) returns it."""

    def fragment():
        import builtins

        blocks = [bytearray(64 * 1024) for _ in range(2048)]  # 128 MiB of heap, below the mmap threshold
        builtins.dxplain_test_pin = bytearray(64 * 1024)  # allocated last and kept: free() cannot trim below it
        del blocks

    def rss_mib():
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024

    client.run(fragment)
    before = client.run(rss_mib)
    DaskMapper(client).release_memory()
    after = client.run(rss_mib)
    assert all(before[w] - after[w] > 64 for w in before), (before, after)


def test_cluster_output_equals_in_memory(client, tmp_path):
    d = random_interactions(80, 60, 0.2, seed=11)
    m = ALSMF(k=5, lam=3e-3).fit(d)
    # Small parts: each shard reads its users from several by-user parts; several item parts make the user side.
    job = RefreshJob(
        *alpha_from_table(d, Preprocessed.from_model(m, d), write_partitions(tmp_path / "parts", d, 150)),
        d.item_degree(),
        top_n=5,
        top_k=3,
    )
    assert len(job.parts.user_cuts) > 4 and len(job.parts.item_cuts) > 4
    shards = shard_users(d, 6)
    assert sum(len(s) for s in shards) == d.n_users
    (tmp_path / "mem").mkdir()
    (tmp_path / "dask").mkdir()
    mem_passes = run_passes(LocalMapper(), job, shards, str(tmp_path / "mem"))
    passes = run_passes(DaskMapper(client), job, shards, str(tmp_path / "dask"))
    mem, dsk = mem_passes.entries, passes.entries
    # The same user-side tasks on both; none spans two item parts.
    assert len(passes.user_side) == len(mem_passes.user_side) >= len(job.parts.item_cuts) - 1
    assert sum(c["rows"] for c in passes.user_side) == sum(c["rows"] for c in mem_passes.user_side) > 0
    assert [e["rows"] for e in mem] == [e["rows"] for e in dsk]
    assert sum(e["targets"] for e in dsk) == 5 * d.n_users
    for a, b in zip(mem, dsk):
        ta, tb = pq.read_table(tmp_path / "mem" / a["file"]), pq.read_table(tmp_path / "dask" / b["file"])
        assert ta.equals(tb), f"shard {a['shard']} differs"
        assert a["sha256"] == b["sha256"]
    written = sorted(p.name for p in (tmp_path / "dask").iterdir())
    assert written == sorted([e["file"] for e in dsk] + ["_meta"])
    assert sorted(p.name for p in (tmp_path / "dask" / "_meta").iterdir()) == sorted(
        [
            *(e["file"].replace(".parquet", ".json") for e in dsk),
            *(e["file"].replace("part", "users") for e in dsk),
            "targets.parquet",
        ]
    )  # each shard's entry and its user index (``runs.write_user_index``)


def _job(root, seed=11, n_users=80, n_items=60, top_k=3):
    d = random_interactions(n_users, n_items, 0.2, seed=seed)
    m = ALSMF(k=5, lam=3e-3).fit(d)
    return d, RefreshJob(
        *alpha_from_table(d, Preprocessed.from_model(m, d), write_partitions(root, d, 300)),
        d.item_degree(),
        top_n=5,
        top_k=top_k,
    )


def _same_files(a_dir, a, b_dir, b):
    assert [e["sha256"] for e in a] == [e["sha256"] for e in b]
    for ea, eb in zip(a, b):
        assert pq.read_table(a_dir / ea["file"]).equals(pq.read_table(b_dir / eb["file"]))


def test_tls_cluster_with_certificates_made_here(tmp_path):
    from distributed.security import Security

    security = Security.temporary()  # self-signed CA and certificates, generated inside the test
    d, job = _job(tmp_path / "parts")
    shards = shard_users(d, 4)
    for sub in ("mem", "tls"):
        (tmp_path / sub).mkdir()
    mem = run_passes(LocalMapper(), job, shards, str(tmp_path / "mem")).entries
    with connect(Settings(workers=2, blas_threads=1), security=security) as c:
        assert c.scheduler.address.startswith("tls://")
        assert all(addr.startswith("tls://") for addr in c.scheduler_info()["workers"])
        got = run_passes(DaskMapper(c), job, shards, str(tmp_path / "tls")).entries
    _same_files(tmp_path / "mem", mem, tmp_path / "tls", got)


def test_incomplete_tls_settings_are_refused():
    from dxplain.errors import InputError

    with pytest.raises(InputError, match="missing \\['tls_key'\\]"):
        Settings(tls_ca_file="ca.pem", tls_cert="cert.pem").tls_files()


def test_killed_worker_loses_nothing(tmp_path):
    """SIGKILL one worker process mid-run: the run completes and equals the in-memory twin."""
    import os
    import signal
    import threading
    import time

    d, job = _job(tmp_path / "parts", seed=3, n_users=300, n_items=200, top_k=0)
    shards = shard_users(d, 40)
    for sub in ("mem", "kill"):
        (tmp_path / sub).mkdir()
    mem = run_passes(LocalMapper(), job, shards, str(tmp_path / "mem")).entries
    with connect(Settings(workers=2, blas_threads=1)) as c:
        pids = c.run(os.getpid)
        result = {}
        runner = threading.Thread(
            target=lambda: result.update(entries=run_passes(DaskMapper(c), job, shards, str(tmp_path / "kill")).entries)
        )
        runner.start()
        deadline = time.time() + 60
        while not list((tmp_path / "kill").glob("_meta/part-*.json")) and time.time() < deadline:
            time.sleep(0.005)
        victim = sorted(pids.values())[0]
        os.kill(victim, signal.SIGKILL)
        killed_mid_run = len(list((tmp_path / "kill").glob("_meta/part-*.json"))) < len(shards)
        runner.join(timeout=120)
        assert not runner.is_alive()
        assert victim not in c.run(os.getpid).values()  # the nanny replaced the killed process
    assert killed_mid_run, "the run finished before the kill; the test did not exercise a failure"
    _same_files(tmp_path / "mem", mem, tmp_path / "kill", result["entries"])
    # The kill may interrupt a write, leaving a dot-temporary (finish_run removes those); real files are complete.
    real = sorted(p.name for p in (tmp_path / "kill").iterdir() if not p.name.startswith("."))
    assert real == sorted([e["file"] for e in mem] + ["_meta"])
    real = sorted(p.name for p in (tmp_path / "kill" / "_meta").iterdir() if not p.name.startswith("."))
    assert real == sorted(
        [
            *(e["file"].replace(".parquet", ".json") for e in mem),
            *(e["file"].replace("part", "users") for e in mem),
            "targets.parquet",
        ]
    )


@pytest.mark.slow  # 30 s; the parts and block-file cases below cover the same mapper calls in the default run
def test_distributed_als_equals_in_memory_als(client, tmp_path):
    from functools import partial

    from dxplain.models.als.part_half_steps import PartHalfSteps

    d = random_interactions(120, 90, 0.15, seed=21)
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 5 + 1)  # the workers read 5 parts per side
    made = []
    half = lambda *a, **kw: made.append(PartHalfSteps(DaskMapper(client), parts, *a, **kw)) or made[-1]  # noqa: E731
    for polish in (0, 20):  # sweeps alone, and sweeps followed by the Newton polish (on the parts too)
        model = ALSMF(k=6, lam=2e-3, max_sweeps=12, newton_steps=polish, seed=4)  # the default collapses here
        mem, dsk = model.fit(d), model.fit(d, half_steps=half)
        assert mem.info["sweeps"] == dsk.info["sweeps"]
        assert mem.info["newton_iters"] == dsk.info["newton_iters"] and (dsk.info["newton_iters"] > 0) == (polish > 0)
        np.testing.assert_allclose(dsk.U, mem.U, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(dsk.V, mem.V, rtol=1e-9, atol=1e-12)
        assert dsk.grad_norm == pytest.approx(mem.grad_norm, rel=1e-6, abs=1e-13)
    assert len(made) == 2 and len(made[0].parts["user"]) == 5 and len(made[0].parts["item"]) == 5
    assert partial(PartHalfSteps, DaskMapper(client), parts)  # the form the flow uses


def test_bce_trained_over_parts_on_the_cluster_equals_in_process_and_is_stationary(client, tmp_path):
    """Implicit feedback with sampled negatives, trained by alternating BCE half-steps where the training
    table's parts are: the same factors on the cluster as on a LocalMapper, stationary to rtol·λ, with
    the objective of the whole-table L-BFGS fit (the same optimum), and Newton's polish on the parts too."""
    from functools import partial

    from dxplain.models.als.part_half_steps import PartHalfSteps
    from dxplain.models.implicit_mf import ImplicitMF, positive_pairs, sample_negatives, terms_of, training_table

    P = positive_pairs(random_interactions(60, 45, 0.2, seed=31), 3)
    table = training_table(P, *sample_negatives(P, 4, seed=2))
    parts = write_partitions(tmp_path, table, rows_per_part=len(table) // 4 + 1)
    whole = ImplicitMF(k=4, rtol=1e-6).fit(terms_of(table, 0.05))
    for sweeps in (300, 3):  # to the stop on sweeps alone; then a short budget that the Newton polish finishes
        trainer = ImplicitMF(k=4, rtol=1e-6, max_sweeps=sweeps)
        mem = trainer.fit_alternating(table, partial(PartHalfSteps, LocalMapper(), parts))
        dsk = trainer.fit_alternating(table, partial(PartHalfSteps, DaskMapper(client), parts))
        assert mem.info["sweeps"] == dsk.info["sweeps"] and mem.info["newton_iters"] == dsk.info["newton_iters"]
        assert (dsk.info["newton_iters"] > 0) == (sweeps == 3)
        np.testing.assert_allclose(dsk.U, mem.U, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(dsk.V, mem.V, rtol=1e-9, atol=1e-12)
        assert (
            dsk.grad_norm <= 1e-6 * dsk.lam and dsk.negatives == "sampled" and dsk.info["n_neg"] == len(table) - len(P)
        )
        assert dsk.info["objective"] == pytest.approx(whole.info["objective"], rel=1e-9)
        np.testing.assert_allclose(dsk.U @ dsk.V.T, whole.U @ whole.V.T, atol=1e-4)


def test_factors_kept_in_block_files_train_as_arrays_do(client, tmp_path):
    """BlockHalfSteps keeps U and V in row-block files beside the parts, never whole in any process. From the
    same start it takes the sweeps PartHalfSteps takes with arrays here (ALS with Anderson, to rounding:
    only the sums' order differs); the cluster's blocks equal a LocalMapper's; only the model's blocks
    outlive training, and they go when it does."""
    from functools import partial

    from dxplain.models.als.block_half_steps import BlockHalfSteps
    from dxplain.models.als.part_half_steps import PartHalfSteps
    from dxplain.models.blocks import Blocks
    from dxplain.models.implicit_mf import ImplicitMF, positive_pairs, sample_negatives, training_table

    d = random_interactions(120, 90, 0.15, seed=21)
    parts = write_partitions(tmp_path / "als", d, rows_per_part=len(d) // 5 + 1)
    rng = np.random.default_rng(3)
    init = rng.normal(scale=0.1, size=(d.n_users, 6)), rng.normal(scale=0.1, size=(d.n_items, 6))
    trainer = ALSMF(k=6, lam=2e-3, max_sweeps=25, newton_steps=0, seed=4)  # the default collapses here
    arrays = trainer.fit(d, half_steps=partial(PartHalfSteps, LocalMapper(), parts), init=init)
    blocks = trainer.fit(d, half_steps=partial(BlockHalfSteps, DaskMapper(client), parts), init=init)
    assert isinstance(blocks.U, Blocks) and len(blocks.U.paths) == 5 and len(blocks.V.paths) == 5
    assert blocks.info["sweeps"] == arrays.info["sweeps"] > 10
    np.testing.assert_allclose(blocks.U.gather(), arrays.U, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(blocks.V.gather(), arrays.V, rtol=1e-7, atol=1e-10)
    assert blocks.grad_norm == pytest.approx(arrays.grad_norm, rel=1e-5)

    P = positive_pairs(random_interactions(60, 45, 0.2, seed=31), 3)
    table = training_table(P, *sample_negatives(P, 4, seed=2))
    parts = write_partitions(tmp_path / "bce", table, rows_per_part=len(table) // 4 + 1)
    bce = ImplicitMF(k=4, rtol=1e-6, max_sweeps=300)
    mem = bce.fit_alternating(table, partial(BlockHalfSteps, LocalMapper(), parts))
    dsk = bce.fit_alternating(table, partial(BlockHalfSteps, DaskMapper(client), parts))
    assert all(f.startswith(str(tmp_path / "bce" / ".dxplain-scratch-")) for f in dsk.U.paths + dsk.V.paths)
    assert len(list((tmp_path / "bce").glob(".dxplain-scratch-*/*.npy"))) == 2 * (
        len(parts.user_cuts) + len(parts.item_cuts) - 2
    )
    assert mem.info["sweeps"] == dsk.info["sweeps"] and dsk.grad_norm <= 1e-6 * dsk.lam
    np.testing.assert_array_equal(dsk.U.gather(), mem.U.gather())
    np.testing.assert_array_equal(dsk.V.gather(), mem.V.gather())
    arrays = bce.fit_alternating(table, partial(PartHalfSteps, LocalMapper(), parts))
    assert dsk.info["objective"] == pytest.approx(arrays.info["objective"], rel=1e-9)  # another start, one optimum
    del mem, dsk, blocks
    assert not list((tmp_path / "bce").glob(".dxplain-scratch-*")) and not list(
        (tmp_path / "als").glob(".dxplain-scratch-*")
    )


def test_items_half_step_measures_its_side_on_the_way(client, tmp_path):
    """``items(U, measure=λ)`` on block files: each by-item task also returns its part's stationarity triple
    from the rows of U it read for the solve, and the measure at (U, V_new) then maps the by-user parts only.
    Its numbers equal a measure that reads both sides (arrays over the parts), in memory and on the cluster;
    with the identity bound asked for, or at another V, both sides are read again."""
    from dxplain.models.als.block_half_steps import BlockHalfSteps
    from dxplain.models.als.losses import BCERows
    from dxplain.models.als.part_half_steps import PartHalfSteps
    from dxplain.models.blocks import Blocks
    from dxplain.models.implicit_mf import positive_pairs, sample_negatives, training_table

    P = positive_pairs(random_interactions(70, 50, 0.2, seed=32), 3)
    table = training_table(P, *sample_negatives(P, 4, seed=5))
    parts = write_partitions(tmp_path, table, rows_per_part=len(table) // 4 + 1)
    n_user, n_item = len(parts.user_cuts) - 1, len(parts.item_cuts) - 1
    loss, lam, ridge = BCERows(0.3), 1e-3, 0.5
    rng = np.random.default_rng(7)
    U, V0 = rng.normal(scale=0.3, size=(table.n_users, 4)), rng.normal(scale=0.3, size=(table.n_items, 4))

    class Counting(LocalMapper):
        calls: list = []

        def map(self, fn, args, name="task", **kw):
            self.calls.append((name, len(args)))
            return super().map(fn, args, name=name, **kw)

    arrays = PartHalfSteps(LocalMapper(), parts, table, 0.0, ridge, loss=loss)
    V_want = arrays.items(U, V0)
    want = arrays.stationarity(U, V_want, lam, bound=True)
    for mapper in (Counting(), DaskMapper(client)):
        half = BlockHalfSteps(mapper, parts, table, 0.0, ridge, loss=loss)
        U_b, V0_b = (Blocks.split(mapper, half.scratch, F, half.cuts[s]) for F, s in ((U, "user"), (V0, "item")))
        V_b = half.items(U_b, V0_b, measure=lam)
        np.testing.assert_array_equal(V_b.gather(), V_want)
        Counting.calls.clear()
        got = half.stationarity(U_b, V_b, lam, bound=False)
        assert got[0] == pytest.approx(want[0], rel=1e-12) and got[1] == pytest.approx(want[1], rel=1e-12)
        assert got[2] is None
        if isinstance(mapper, Counting):
            assert [c for c in mapper.calls if c[0] == "als-stationarity"] == [("als-stationarity", n_user)]
            mapper.calls.clear()
        rss, gsq, bound = half.stationarity(U_b, V_b, lam, bound=True)
        assert (rss, gsq, *bound) == pytest.approx((want[0], want[1], *want[2]), rel=1e-12)
        U2_b = Blocks.split(mapper, half.scratch, U + 0.01, half.cuts["user"])
        for (U_x, V_x, lam_x), (U_a, V_a) in (
            ((U_b, V0_b, lam), (U, V0)),
            ((U_b, V_b, 2 * lam), (U, V_want)),
            ((U2_b, V_b, lam), (U + 0.01, V_want)),
        ):
            assert half.stationarity(U_x, V_x, lam_x, bound=False)[:2] == pytest.approx(
                arrays.stationarity(U_a, V_a, lam_x, bound=False)[:2], rel=1e-12
            )
        if isinstance(mapper, Counting):
            full = ("als-stationarity", n_user + n_item)
            assert [c for c in mapper.calls if c[0] == "als-stationarity"] == [full] * 4
        half.close()


def test_measure_after_an_exact_items_half_step_takes_its_gradient(client, tmp_path):
    """The squared loss's items' half-step solves exactly and returns ∇_V f at its solution from its Grams
    (``SquaredRows.solve_with_gradient``). The measure of (U, V = items(U)) then reads the by-user parts
    only, in this process, over parts in memory and on the cluster, and on block files (where ∇_V f is kept
    in files beside V's blocks); its numbers equal a measure that reads both sides. At another V or λ it
    reads both."""
    from dxplain.models.als.block_half_steps import BlockHalfSteps
    from dxplain.models.als.half_steps import HalfSteps, LocalHalfSteps
    from dxplain.models.als.part_half_steps import PartHalfSteps
    from dxplain.models.blocks import Blocks

    d = random_interactions(90, 70, 0.2, seed=35)
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 4 + 1)
    n_user, n_item = len(parts.user_cuts) - 1, len(parts.item_cuts) - 1
    mu, lam = float(d.rating.mean()), 0.02
    ridge = lam * len(d) / 2
    U = np.random.default_rng(8).normal(scale=0.5, size=(d.n_users, 4))

    class Counting(LocalMapper):
        calls: list = []

        def map(self, fn, args, name="task", **kw):  # a block task's own function is its first argument
            self.calls.append((name, len(args) if fn is not call_loaded else sorted(a[0].__name__ for a in args)))
            return super().map(fn, args, name=name, **kw)

    local = LocalHalfSteps(d, mu, ridge)
    V = local.items(U)
    want = HalfSteps.stationarity(local, U, V, lam, bound=True)  # both sides' passes
    assert local._known_items_gradient(U, V, lam) is not None
    got = local.stationarity(U, V, lam, bound=True)
    assert got[0] == pytest.approx(want[0], rel=1e-12) and got[1] == pytest.approx(want[1], rel=1e-9)
    assert got[2] == pytest.approx(want[2], rel=1e-9)
    assert local._known_items_gradient(U, V, 2 * lam) is None and local._known_items_gradient(U, V.copy(), lam) is None
    for mapper in (Counting(), DaskMapper(client)):
        Counting.calls.clear()
        half = PartHalfSteps(mapper, parts, d, mu, ridge)
        V_p = half.items(U)
        np.testing.assert_allclose(V_p, V, rtol=1e-12, atol=1e-15)
        for bound in (True, False):
            rss, gsq, eps = half.stationarity(U, V_p, lam, bound=bound)
            assert rss == pytest.approx(want[0], rel=1e-12) and gsq == pytest.approx(want[1], rel=1e-9)
            assert eps == (pytest.approx(want[2], rel=1e-9) if bound else None)
        other = half.stationarity(U, V_p + 0.01, lam, bound=True)  # not the half-step's V: both sides read
        assert other[2] == pytest.approx(HalfSteps.stationarity(local, U, V + 0.01, lam, bound=True)[2], rel=1e-9)
        blocks = BlockHalfSteps(mapper, parts, d, mu, ridge)
        U_b = Blocks.split(mapper, blocks.scratch, U, blocks.cuts["user"])
        V_b = blocks.items(U_b, measure=lam)
        np.testing.assert_allclose(V_b.gather(), V, rtol=1e-12, atol=1e-15)
        for bound in (True, False):
            rss, gsq, eps = blocks.stationarity(U_b, V_b, lam, bound=bound)
            assert rss == pytest.approx(want[0], rel=1e-12) and gsq == pytest.approx(want[1], rel=1e-9)
            assert eps == (pytest.approx(want[2], rel=1e-9) if bound else None)
        if isinstance(mapper, Counting):
            light = ["_gradient_block_triple"] * n_item + ["_stationarity_compact"] * n_user
            assert [c for c in mapper.calls if c[0] == "als-stationarity"] == [
                ("als-stationarity", n_user),
                ("als-stationarity", n_user),
                ("als-stationarity", n_user + n_item),
                ("als-stationarity", light),
                ("als-stationarity", light),
            ]
        blocks.close()


def test_training_measures_the_items_side_with_the_items_half_step(tmp_path):
    """Training on block files passes λ to the items' half-step, so each sweep's measure reads the by-user
    parts only: for BCE (whose half-step is not exact) when the measure is bound-free, from the triples the
    items' tasks returned; for ALS also with an identity target, from the ∇_V f files its exact half-step
    wrote beside V's blocks."""
    from functools import partial

    from dxplain.models.als.block_half_steps import BlockHalfSteps
    from dxplain.models.implicit_mf import ImplicitMF, positive_pairs, sample_negatives, training_table

    class Counting(LocalMapper):
        calls: list = []

        def map(self, fn, args, name="task", **kw):  # a block task's own function is its first argument
            self.calls.append((name, len(args) if fn is not call_loaded else sorted(a[0].__name__ for a in args)))
            return super().map(fn, args, name=name, **kw)

    P = positive_pairs(random_interactions(60, 45, 0.2, seed=33), 3)
    table = training_table(P, *sample_negatives(P, 4, seed=6))
    parts = write_partitions(tmp_path / "bce", table, rows_per_part=len(table) // 4 + 1)
    n_user = len(parts.user_cuts) - 1
    m = ImplicitMF(k=3, max_sweeps=3, newton_steps=0).fit_alternating(table, partial(BlockHalfSteps, Counting(), parts))
    assert m.info["sweeps"] == 3
    assert [c for c in Counting.calls if c[0] == "als-stationarity"] == [
        ("als-stationarity", ["_stationarity_compact"] * n_user)
    ] * 3

    d = random_interactions(80, 60, 0.2, seed=34)
    parts = write_partitions(tmp_path / "als", d, rows_per_part=len(d) // 4 + 1)
    Counting.calls.clear()
    ALSMF(k=3, max_sweeps=3, newton_steps=0, identity_tol=1e-12).fit(
        d, half_steps=partial(BlockHalfSteps, Counting(), parts)
    )
    n_user, n_item = len(parts.user_cuts) - 1, len(parts.item_cuts) - 1
    light = ["_gradient_block_triple"] * n_item + ["_stationarity_compact"] * n_user
    assert [c for c in Counting.calls if c[0] == "als-stationarity"] == [("als-stationarity", light)] * 3


def test_gradient_over_parts_equals_the_whole_table_gradient(client, tmp_path):
    """Training measures itself (Σ r² and ∇f, from which the identity bound follows) and the Newton polish
    takes its Hessian products and blocks with tasks over the parts: equal to the whole-table passes in this
    process, in memory and on the cluster, at an arbitrary (U, V)."""
    from dxplain.kernels.als import identity_bound
    from dxplain.mapper import LocalMapper
    from dxplain.models.als.half_steps import LocalHalfSteps
    from dxplain.models.als.part_half_steps import PartHalfSteps

    d = random_interactions(130, 70, 0.2, seed=23)
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 4 + 1)
    mu, lam = float(d.rating.mean()), 0.03
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(d.n_users, 5)), rng.normal(size=(d.n_items, 5))
    want = LocalHalfSteps(d, mu, 1.0).gradient(U, V, lam)
    r = (d.rating - mu) - np.einsum("nk,nk->n", U[d.user], V[d.item])  # an independent residual
    assert want[0] == pytest.approx(float(r @ r), rel=1e-12)
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)
    local = LocalHalfSteps(d, mu, 1.0)
    want_h, want_c = local.hessian_vector(U, V, dU, dV, lam), local.curvature_grams(U, V)
    eps = 1e-6  # the Hessian product is the gradient's derivative: an independent check of both
    g_plus, g_minus = local.gradient(U + eps * dU, V + eps * dV, lam), local.gradient(U - eps * dU, V - eps * dV, lam)
    np.testing.assert_allclose(want_h[0], (g_plus[1] - g_minus[1]) / (2 * eps), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(want_h[1], (g_plus[2] - g_minus[2]) / (2 * eps), rtol=1e-5, atol=1e-9)
    for mapper in (LocalMapper(), DaskMapper(client)):
        half = PartHalfSteps(mapper, parts, d, mu, 1.0)
        got = half.gradient(U, V, lam)
        assert got[0] == pytest.approx(want[0], rel=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-10, atol=1e-14)
        for a, b in zip(half.hessian_vector(U, V, dU, dV, lam), want_h):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
        for a, b in zip(half.curvature_grams(U, V), want_c):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
        # What a sweep is judged by, reduced on the parts: Σ r², ‖∇f‖² and the identity bound per side.
        rss, gsq, bound = half.stationarity(U, V, lam, bound=True)
        assert rss == pytest.approx(want[0], rel=1e-12)
        assert gsq == pytest.approx(np.sum(want[1] ** 2) + np.sum(want[2] ** 2), rel=1e-12)
        assert bound == pytest.approx(identity_bound(U, V, want[1], want[2], lam), rel=1e-12)
        assert half.stationarity(U, V, lam, bound=False)[2] is None


def test_alpha_pass_on_the_cluster_equals_the_whole_table(client, tmp_path):
    from test_partitions import check_alpha_pass_equals_alpha_from_table

    d = random_interactions(110, 80, 0.2, seed=24)
    check_alpha_pass_equals_alpha_from_table(d, ALSMF(k=5, lam=3e-3).fit(d), tmp_path, DaskMapper(client))


def test_worker_killed_mid_training_loses_nothing(tmp_path):
    """SIGKILL a worker between sweeps: its parts are re-read from storage elsewhere, and factors kept in block
    files are read from them again; the model is unchanged."""
    import os
    import signal
    from functools import partial

    from dxplain.models.als.block_half_steps import BlockHalfSteps
    from dxplain.models.als.part_half_steps import PartHalfSteps

    d = random_interactions(120, 90, 0.15, seed=22)
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 4 + 1)
    model = ALSMF(k=6, max_sweeps=6, newton_steps=0, seed=1)
    for half_steps in (PartHalfSteps, BlockHalfSteps):
        with connect(Settings(workers=2, blas_threads=1)) as c:
            victim = sorted(c.run(os.getpid).values())[0]

            class KillAfterTwoSweeps(half_steps):
                calls = 0

                def users(self, V, U0=None):
                    KillAfterTwoSweeps.calls += 1
                    if KillAfterTwoSweeps.calls == 3:
                        os.kill(victim, signal.SIGKILL)
                    return super().users(V, U0)

            got = model.fit(d, half_steps=lambda *a, **kw: KillAfterTwoSweeps(DaskMapper(c), parts, *a, **kw))
            assert victim not in c.run(os.getpid).values()
        assert KillAfterTwoSweeps.calls == 6
        want = model.fit(d, half_steps=partial(half_steps, LocalMapper(), parts))
        for a, b in ((got.U, want.U), (got.V, want.V)):
            np.testing.assert_allclose(
                *(x if isinstance(x, np.ndarray) else x.gather() for x in (a, b)), rtol=1e-9, atol=1e-12
            )


@pytest.mark.parametrize("method", ["representer", "random"])
def test_negative_scan_on_cluster_equals_in_memory(client, method):
    from dxplain.explain import negatives as N
    from dxplain.models.implicit_mf import ImplicitMF, dense_terms, positive_pairs

    P = positive_pairs(random_interactions(60, 45, 0.2, seed=13), 4)
    terms = dense_terms(P, 0.05)
    m = ImplicitMF(k=4, lam=0.3 / terms.n_terms).fit(terms)
    score = N.negative_score(method, m, terms, P, seed=2)
    K = N.flag_count(terms, 5)
    ranges = N.shard_ranges(terms.n_users, 7, 4)
    assert len(ranges) == 4 and ranges[0][0] == 0 and ranges[-1][1] == terms.n_users
    assert all(a % 7 == 0 for a, _ in ranges)
    want = N.scan(score, terms, K, tile_rows=7)
    got = N.select_lowest(score, terms, 5, DaskMapper(client), n_shards=4, tile_rows=7)
    assert len(want[0]) == K
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("sparse", [False, True])
def test_exact_distributed_sbq_selects_the_same_points_as_centralised(client, sparse):
    import scipy.sparse as sp

    from dxplain.explain.prototypes import select
    from dxplain.kernels.sbq import greedy, mean_embedding

    rng = np.random.default_rng(21)
    Phi = rng.normal(size=(500, 24)) * rng.gamma(2.0, size=(500, 1))
    T = rng.normal(size=(40, 24)) + 0.3
    if sparse:
        Phi, T = sp.csr_array(Phi * (rng.random(Phi.shape) < 0.3)), sp.csr_array(T)
    mu = mean_embedding(T)
    central = greedy(Phi, mu, 20)
    dist = select(Phi, mu, 20, "greedy", n_shards=5, mapper=DaskMapper(client))
    np.testing.assert_array_equal(dist.index, central.index)
    np.testing.assert_allclose(dist.weights, central.weights, rtol=1e-10)
    np.testing.assert_allclose(dist.objective, central.objective, rtol=1e-10, atol=1e-14)


def test_block_sbq_on_cluster_equals_in_memory(client):
    from dxplain.explain.prototypes import mf_fisher_rows, select
    from dxplain.interactions import Targets
    from dxplain.kernels.sbq import greedy, mean_embedding

    d = random_interactions(80, 50, 0.25, seed=23)
    model = ALSMF(k=5, lam=1e-2, seed=0).fit(d)
    R, R_T = mf_fisher_rows(model, d, Targets.from_pairs(np.array([1, 1, 4, 9]), np.array([0, 3, 5, 7])))
    mu = mean_embedding(R_T)
    central = greedy(R, mu, 20)
    dist = select(R, mu, 20, "greedy", n_shards=4, mapper=DaskMapper(client))
    np.testing.assert_array_equal(dist.index, central.index)
    np.testing.assert_allclose(dist.weights, central.weights, rtol=1e-10)


def test_sbq_over_parts_on_cluster_equals_in_process(client, tmp_path):
    from dxplain.explain.prototypes_parts import select_from_parts
    from dxplain.interactions import Targets

    d = random_interactions(90, 60, 0.25, seed=24)
    model = ALSMF(k=5, lam=1e-2, seed=0).fit(d)
    parts = write_partitions(str(tmp_path / "parts"), d, rows_per_part=len(d) // 5)
    T = Targets.from_pairs(np.array([2, 2, 8, 30]), np.array([1, 4, 6, 9]))
    local = select_from_parts(LocalMapper(), parts, model, T, 20)
    dist = select_from_parts(DaskMapper(client), parts, model, T, 20)
    np.testing.assert_array_equal(dist.index, local.index)
    np.testing.assert_allclose(dist.weights, local.weights, rtol=1e-12)


def test_sbq_part_states_stay_on_their_workers(client, tmp_path):
    """Each step runs where its part's state is (``near_first``): a moved state is a copy of the part's
    rows (26 MB at 50M) and of the item blocks it holds. Without it, 27 transfers in 30 steps here."""
    from distributed import wait

    from dxplain.explain.prototypes_parts import PartShards
    from dxplain.interactions import Targets
    from dxplain.kernels.sbq import greedy_select

    d = random_interactions(300, 200, 0.2, seed=24)
    model = ALSMF(k=5, lam=1e-3, seed=0).fit(d)  # 1e-2 outweighs these random ratings
    parts = write_partitions(str(tmp_path / "parts"), d, rows_per_part=len(d) // 10)
    shards = PartShards(DaskMapper(client), parts, model, "empirical", 1e-3, parts.user_part_offsets())
    c = shards.start(Targets.from_pairs(np.array([2, 2, 8, 30]), np.array([1, 4, 6, 9])), 30)

    def where():
        wait(shards.states)
        held = client.who_has(shards.states)
        return [tuple(sorted(held[f.key])) for f in shards.states]

    first, seen, add = where(), [], shards.add
    assert len(set(first)) == 2  # both workers hold states

    def add_and_look(*step):  # where every state is after every step, not only at the end
        add(*step)
        seen.append(where())

    shards.add = add_and_look
    sel = greedy_select(shards, 30, c)
    assert len(sel.index) == len(seen) == 30 and all(w == first for w in seen)


def test_sampled_negatives_in_parts_on_cluster_equal_in_process(client, tmp_path):
    import pyarrow.parquet as pq

    from dxplain.explain import negatives as N
    from dxplain.explain import negatives_parts as NP
    from dxplain.kernels.bce import SparseTerms
    from dxplain.models.implicit_mf import ImplicitMF, positive_pairs, sample_negatives, training_table

    P = positive_pairs(random_interactions(50, 30, 0.2, seed=25), 3)
    nu, ni = sample_negatives(P, 2, seed=0)
    terms = SparseTerms.from_pairs(P.n_users, P.n_items, P.user, P.item, nu, ni, 0.05)
    score = N.negative_score("representer", ImplicitMF(k=3).fit(terms), terms, P)
    table = training_table(P, nu, ni)
    parts = write_partitions(str(tmp_path / "parts"), table, rows_per_part=len(table) // 4)
    local = NP.select_lowest_parts(score, parts, terms.n_neg, 5, LocalMapper(), tmp_path / "a.parquet")
    dist = NP.select_lowest_parts(score, parts, terms.n_neg, 5, DaskMapper(client), tmp_path / "b.parquet")
    for a, b in zip(dist, local):
        np.testing.assert_array_equal(a, b)
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


def test_greedi_on_cluster_equals_in_memory_greedi(client):
    from dxplain.explain.prototypes import select
    from dxplain.kernels.sbq import greedi, mean_embedding

    rng = np.random.default_rng(22)
    Phi = rng.normal(size=(600, 30))
    mu = mean_embedding(rng.normal(size=(30, 30)) + 0.2)
    mem = greedi(Phi, mu, 12, n_parts=4, seed=5)
    dist = select(Phi, mu, 12, "greedi", n_shards=4, seed=5, mapper=DaskMapper(client))
    np.testing.assert_array_equal(dist.index, mem.index)
    np.testing.assert_allclose(dist.objective, mem.objective, rtol=1e-12)


def test_case_deletion_on_cluster_equals_sequential(client):
    from dxplain.datasets.tabular import load_tabular
    from dxplain.evaluation.deletion import deletion_curves
    from dxplain.evaluation.faithfulness import plan, trial_case

    case = trial_case(*load_tabular("synthetic-small"), trial=3, n_targets=3)
    jobs, _ = plan(case, seed=3)
    base = [case.prediction(t) for t in range(3)]
    assert deletion_curves(DaskMapper(client), case, jobs, base) == deletion_curves(LocalMapper(), case, jobs, base)


def test_streamed_partitions_on_the_cluster_equal_the_local_ones(client, tmp_path):
    from test_partitions import scan, streamed_folder

    from dxplain import ingest

    d = random_interactions(90, 70, 0.2, seed=5)
    folder = streamed_folder(tmp_path, d)
    local, dask = scan(folder), scan(folder, DaskMapper(client))
    assert local.fingerprint() == dask.fingerprint() == d.fingerprint()
    np.testing.assert_array_equal(local.user_degree(), dask.user_degree())
    for name, mapper, summary in (("local", LocalMapper(), local), ("dask", DaskMapper(client), dask)):
        ingest.stream_partitions(
            mapper, folder / "interactions.parquet", summary, tmp_path / name, rows_per_part=200, rows_per_chunk=200
        )
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.parquet"))
    assert len(files) > 6
    for f in files:
        assert pq.read_table(tmp_path / "local" / f).equals(pq.read_table(tmp_path / "dask" / f)), f


def test_tasks_get_aligned_arrays_whatever_the_wire_gives(client):
    """distributed reads a message's first array into its header's allocation, unaligned (numpy's slow
    paths: 150× on np.take); every task argument's arrays arrive aligned, an object's in place."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Box:
        a: np.ndarray
        b: np.ndarray

    def aligned_flags(x):
        arrays = [x] if isinstance(x, np.ndarray) else [v for v in vars(x).values() if isinstance(v, np.ndarray)]
        return [bool(a.flags.aligned) for a in arrays], [float(a.sum()) for a in arrays]

    def copies():
        from dxplain.distributed import mapper

        return next(mapper.copies_made)  # a counter: reading it adds one

    before = client.run(copies)
    mapper = DaskMapper(client)
    rng = np.random.default_rng(3)
    for obj in (rng.normal(size=(500, 16)), Box(rng.normal(size=(500, 16)), rng.normal(size=(7, 3)))):
        for broadcast in (False, True):
            h = mapper.put(obj, broadcast=broadcast)
            for flags, sums in mapper.map(aligned_flags, [(h,)] * 4):
                assert all(flags)
                want = [obj.sum()] if isinstance(obj, np.ndarray) else [obj.a.sum(), obj.b.sum()]
                np.testing.assert_allclose(sums, want, rtol=1e-12)
    # What put sends arrives aligned as it is: no worker made a copy (the counter moved by our read only).
    assert client.run(copies) == {w: n + 1 for w, n in before.items()}

    # A handle inside a list reaches the task as the object, aligned.
    h = mapper.put(rng.normal(size=(300, 8)))
    [(flags, _)] = mapper.map(lambda xs: aligned_flags(xs[0]), [([h],)])
    assert flags == [True]


def test_aligned_copies_an_unaligned_array_once_and_fixes_objects_in_place():
    from dxplain.distributed.mapper import aligned

    raw = np.zeros(8 * 100 + 1, np.uint8)
    x = np.frombuffer(raw.data, dtype=np.float64, count=100, offset=1)  # 1 byte off: unaligned
    x_ok = np.arange(100.0)
    assert not x.flags.aligned
    a = aligned(x)
    assert a.flags.aligned and aligned(x) is a and aligned(x_ok) is x_ok
    np.testing.assert_array_equal(a, x)

    class Holder:
        pass

    h = Holder()
    h.U, h.parts = x, [x_ok, x]
    assert aligned(h) is h and h.U.flags.aligned and h.parts[0] is x_ok and h.parts[1].flags.aligned


def test_an_interrupted_map_cancels_its_queued_tasks(client):
    """Ctrl-C (here: a KeyboardInterrupt from the progress callback) stops the map's other tasks at once,
    even while the interrupt's traceback still holds the futures."""
    import time

    def slow(x):
        if x:
            time.sleep(2)  # short: a running task still runs to its end, and later tests share these workers
        return x

    def interrupt(done, result):
        raise KeyboardInterrupt

    def executed():
        return sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values())

    before = executed()
    with pytest.raises(KeyboardInterrupt) as caught:
        DaskMapper(client).map(slow, [(x,) for x in range(6)], name="interrupted", report=interrupt)

    def queued(dask_scheduler):  # the finished first task's result may stay: the traceback holds its future
        return sorted(
            str(k)
            for k, ts in dask_scheduler.tasks.items()
            if "interrupted" in str(k) and ts.state in ("waiting", "queued", "processing", "no-worker")
        )

    deadline = time.time() + 30  # a loaded machine may take a while; uncancelled, all six would have run by then
    while client.run_on_scheduler(queued) and time.time() < deadline:
        time.sleep(0.1)
    assert client.run_on_scheduler(queued) == [] and caught.traceback  # held, yet nothing left queued
    # the first task and at most the one running on each worker ran; the queued ones never did
    assert executed() - before <= 1 + len(client.scheduler_info()["workers"])


def test_ials_trained_over_parts_on_the_cluster_equals_in_process(client, tmp_path):
    """iALS's half-steps and measures as tasks on the workers' parts: the sweeps and factors of the whole table
    trained here (Spark's convention: per-row ridge weights computed where the parts are)."""
    from functools import partial

    from dxplain.models.ials import IALS
    from dxplain.models.ials_half_steps import IALSHalfSteps

    d = random_interactions(80, 60, 0.2, seed=23)
    parts = write_partitions(tmp_path, d, rows_per_part=len(d) // 4 + 1)
    trainer = IALS(k=5, convention="spark", alpha=0.5, max_sweeps=40)
    mem = trainer.fit(d)
    dsk = trainer.fit(d, half_steps=partial(IALSHalfSteps.over_parts, DaskMapper(client), parts))
    assert mem.info["sweeps"] == dsk.info["sweeps"] and len(parts.user_cuts) > 2
    np.testing.assert_allclose(dsk.U, mem.U, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dsk.V, mem.V, rtol=1e-9, atol=1e-12)
