"""The refresh flow end to end (Prefect ephemeral mode): files, manifest, LATEST, summary, CLI explain."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.errors import InputError
from dxplain.flows.refresh import refresh
from dxplain.io import runs
from dxplain.io.dataset_folders import write_dataset

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data") / "small"
    write_dataset(folder, interactions_table(random_interactions(50, 40, 0.25, seed=2)))
    return folder


@pytest.mark.distributed
def test_refresh_on_local_cluster_publishes_a_complete_run(dataset, tmp_path):
    out = tmp_path / "out"
    s = refresh(dataset=str(dataset), out=str(out), workers=2, top_n=3, top_k=2, k=4, lam=5e-3, shards=5)
    run = runs.resolve_run(out)
    assert str(run) == s["run"]
    manifest = runs.read_manifest(run)
    assert [e["shard"] for e in manifest["shards"]] == list(range(5))
    for e in manifest["shards"]:
        assert runs.sha256_file(run / e["file"]) == e["sha256"]
    table = runs.open_run(run).to_table()
    assert table.num_rows == s["attributions"] == sum(e["rows"] for e in manifest["shards"])
    assert s["targets"] == 3 * 50 and s["users"] == 50
    # within the run's --tol (its default), which the trainer's bound guarantees for every target
    assert s["fidelity_ok"] and max(s["fidelity_max_rel_error"].values()) <= s["fidelity_tol"] == 1e-4
    stages = s["stage_seconds"]  # every stage timed, within the whole run's wall time
    assert list(stages) == ["load", "partition", "train", "preprocess", "recommend_explain_write", "publish"]
    assert all(v >= 0 for v in stages.values()) and sum(stages.values()) <= s["seconds"] + stages["publish"] + 0.1
    phases = s["task_seconds"]  # inside the passes' tasks: at most the stage's wall time on 2 workers
    assert list(phases) == ["plan", "user_side", "gather", "explain", "write"] and all(v >= 0 for v in phases.values())
    assert phases["user_side"] > 0 and phases["explain"] > 0 and phases["write"] > 0
    assert s["user_side_tasks"] >= 1
    assert sum(phases.values()) <= 2 * stages["recommend_explain_write"] + 0.1
    memory = s["peak_rss_mib"]  # this process and both worker processes, each a real high-water mark
    assert len(memory["workers"]) == 2 and all(50 < v < 8192 for v in memory["workers"].values())
    assert memory["flow"] > 50
    # The workers' peak at each stage's end: non-decreasing (a high-water mark), the last one the run's.
    after = s["worker_peak_rss_mib_after_stage"]
    assert list(after) == list(stages)[:-1] and list(after.values()) == sorted(after.values())
    assert after["recommend_explain_write"] <= max(memory["workers"].values())
    # Second run on unchanged data reuses the stored model and moves LATEST to the new run.
    s2 = refresh(dataset=str(dataset), out=str(out), top_n=3, top_k=2, k=4, lam=5e-3, in_memory=True)
    assert s2["model"] == s["model"] and runs.resolve_run(out) != run
    assert s2["worker_peak_rss_mib_after_stage"] == {}  # in one process: no workers
    stores = list((out / "partitions").iterdir())  # one store for this data, complete, α beside it
    assert len(stores) == 1 and (stores[0] / "index.json").exists() and (stores[0] / "alpha" / "index.json").exists()
    t2 = runs.open_run(runs.resolve_run(out)).to_table()
    keys = [(c, "ascending") for c in ("user", "item", "train_user", "train_item")]
    a, b = table.sort_by(keys), t2.sort_by(keys)
    assert a.column("side").to_pylist() == b.column("side").to_pylist()
    np.testing.assert_allclose(a.column("importance").to_numpy(), b.column("importance").to_numpy(), rtol=1e-12)


def test_a_training_budget_caps_training_and_names_its_model(dataset, tmp_path):
    out = str(tmp_path / "out")
    capped = refresh(
        dataset=str(dataset), out=out, top_n=2, top_k=2, k=4, lam=5e-3, in_memory=True, max_sweeps=1, newton_steps=0
    )
    assert capped["model"].endswith("-sweeps1-newton0.zarr")
    assert capped["grad_norm"] > 1e-6  # one sweep is far from the optimum; the fidelity error shows it
    assert capped["fidelity_max_rel_error"]["item"] > 1e-6
    full = refresh(dataset=str(dataset), out=out, top_n=2, top_k=2, k=4, lam=5e-3, in_memory=True)
    assert full["model"] != capped["model"]  # the capped model is not reused
    assert full["grad_norm"] < capped["grad_norm"] / 1e4 and max(full["fidelity_max_rel_error"].values()) <= 1e-4
    with pytest.raises(InputError, match="--max-sweeps 0"):
        refresh(dataset=str(dataset), out=out, k=4, in_memory=True, max_sweeps=0)


@pytest.mark.distributed
@pytest.mark.slow  # by default a refresh on dask scheduler and worker processes runs in test_s3_cluster.py
def test_refresh_submits_to_an_existing_scheduler(dataset, tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        s = refresh(
            dataset=str(dataset),
            out=str(tmp_path / "out"),
            scheduler=cluster.scheduler_address,
            top_n=2,
            top_k=2,
            k=4,
            lam=5e-3,
        )
        assert cluster.scheduler.transition_counter > 0  # the shards ran on this cluster
    assert s["targets"] == 2 * 50 and runs.resolve_run(tmp_path / "out") == Path(s["run"])


def test_refresh_with_supplied_targets_and_cli_explain(dataset, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    targets = tmp_path / "targets.parquet"
    pq.write_table(pa.table({"user": ["u001", "u002"], "item": ["i003", "i004"]}), targets)
    out = tmp_path / "out"
    code = main(
        [
            "refresh",
            "--dataset",
            str(dataset),
            "--out",
            str(out),
            "--targets",
            str(targets),
            "--top-k",
            "0",
            "--k",
            "4",
            "--lam",
            "5e-3",
            "--in-memory",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed[: printed.index("\n}") + 2])
    assert summary["targets"] == 2
    table = runs.open_run(runs.resolve_run(out)).to_table()
    assert set(zip(table.column("user").to_pylist(), table.column("item").to_pylist())) == {
        ("u001", "i003"),
        ("u002", "i004"),
    }
    assert main(["explain", "--run", str(out), "--user", "u001", "--item", "i003", "--dataset", str(dataset)]) == 0
    shown = capsys.readouterr().out
    assert "Why user u001 gets i003" in shown and "the user's own ratings" in shown
    assert "other users of this item" in shown
    # a pair the run did not explain is a named error, not an empty printout
    assert main(["explain", "--run", str(out), "--user", "u001", "--item", "i004", "--dataset", str(dataset)]) == 2
    assert "--user u001 --item i004: not explained in" in capsys.readouterr().err
    assert main(["explain", "--run", str(out), "--user", "u999", "--item", "i003", "--dataset", str(dataset)]) == 2
    assert "unknown to the dataset, e.g. ['u999']" in capsys.readouterr().err


def test_explain_reads_the_run_and_the_catalogue_never_the_interactions(dataset, tmp_path, capsys, monkeypatch):
    """Showing one explanation (and the example a refresh prints) filters the run's files and reads the
    user and item tables only: at 50M, loading the interactions for it was the CLI process's largest peak."""
    from dxplain.io import dataset_folders

    out = tmp_path / "out"
    assert (
        main(
            [
                "refresh",
                "--dataset",
                str(dataset),
                "--out",
                str(out),
                "--top-k",
                "3",
                "--k",
                "4",
                "--lam",
                "5e-3",
                "--in-memory",
            ]
        )
        == 0
    )
    first = runs.open_run(runs.resolve_run(out)).head(1).to_pylist()[0]
    # the example the CLI prints is the run's first row, read from one row group's id columns
    assert runs.first_target(runs.resolve_run(out)) == {"user": first["user"], "item": first["item"]}
    capsys.readouterr()

    def no_interactions(*args, **kwargs):
        raise AssertionError("the interactions were read")

    monkeypatch.setattr(dataset_folders, "interactions_from_table", no_interactions)
    assert (
        main(
            [
                "explain",
                "--run",
                str(out),
                "--user",
                str(first["user"]),
                "--item",
                str(first["item"]),
                "--dataset",
                str(dataset),
            ]
        )
        == 0
    )
    assert f"Why user {first['user']} gets" in capsys.readouterr().out
    assert (
        main(
            [
                "explain",
                "--run",
                str(out),
                "--user",
                str(first["user"]),
                "--item",
                str(first["item"]),
                "--dataset",
                str(tmp_path / "no-such-dataset"),
            ]
        )
        == 2
    )  # a dataset path that is not there is named
    assert "no-such-dataset" in capsys.readouterr().err


def test_cli_refuses_unknown_target_ids_and_publishes_nothing(dataset, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    targets = tmp_path / "targets.parquet"
    pq.write_table(pa.table({"user": ["ghost"], "item": ["i003"]}), targets)
    out = tmp_path / "out"
    code = main(
        [
            "refresh",
            "--dataset",
            str(dataset),
            "--out",
            str(out),
            "--targets",
            str(targets),
            "--k",
            "4",
            "--lam",
            "5e-3",
            "--in-memory",
        ]
    )
    assert code == 2
    assert "ghost" in capsys.readouterr().err
    assert not (out / "LATEST").exists() and not (out / "runs").exists()
    pq.write_table(pa.table({"user": ["ghost", "u001"], "item": ["i003", "i003"]}), targets)
    s = refresh(
        dataset=str(dataset), out=str(out), targets=str(targets), k=4, lam=5e-3, in_memory=True, skip_unseen=True
    )  # a nightly list naming a user the data does not have yet
    assert s["targets_skipped_unseen"] == 1 and s["targets"] == 1 and (out / "LATEST").exists()


def test_interrupted_run_resumes_keeping_verified_shards(dataset, tmp_path, monkeypatch):
    from dxplain.refresh import passes as shard_mod

    params = dict(dataset=str(dataset), top_n=3, top_k=2, k=4, lam=5e-3, shards=6, in_memory=True)
    clean = refresh(out=str(tmp_path / "clean"), **params)

    real, calls = shard_mod.run_shard, []

    def crash_on_fourth(job, shard, users, run_dir, parts):
        calls.append(shard)
        if len(calls) == 4:
            raise RuntimeError("simulated crash")
        return real(job, shard, users, run_dir, parts)

    monkeypatch.setattr(shard_mod, "run_shard", crash_on_fourth)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="simulated crash"):
        refresh(out=str(out), **params)
    (run,) = (out / "runs").iterdir()
    assert not (run / "_meta" / "manifest.json").exists() and not (out / "LATEST").exists()
    assert sorted(p.name for p in run.glob("part-*.parquet")) == [f"part-0000{i}.parquet" for i in range(3)]
    with open(run / "part-00001.parquet", "r+b") as fh:  # a shard damaged after it was written
        fh.seek(100)
        fh.write(b"garbage")

    monkeypatch.setattr(shard_mod, "run_shard", real)
    s = refresh(out=str(out), **params)
    assert Path(s["run"]) == run and s["resumed_shards"] == 2  # shards 0 and 2 kept, 1 recomputed
    assert runs.resolve_run(out) == run and len(list((out / "runs").iterdir())) == 1
    for e in runs.read_manifest(run)["shards"]:
        assert runs.sha256_file(run / e["file"]) == e["sha256"]
    keys = [(c, "ascending") for c in ("user", "item", "train_user", "train_item")]  # unique per row
    got = runs.open_run(run).to_table().sort_by(keys)
    want = runs.open_run(runs.resolve_run(tmp_path / "clean")).to_table().sort_by(keys)
    assert got.equals(want)
    assert s["attributions"] == clean["attributions"]
    # a published run folder is one Parquet dataset, read in one call (no metadata beside the shards)
    import pyarrow.dataset as pads

    assert pads.dataset(run, format="parquet").to_table().sort_by(keys).equals(got)


KILLED_RUN_ARGS = ["--top-k", "0", "--k", "4", "--lam", "2e-4", "--shards", "30"]
KEYS = [(c, "ascending") for c in ("user", "item", "train_user", "train_item")]  # unique per row


@pytest.fixture(scope="module")
def killed_run_data(prefect_server, tmp_path_factory):
    """The killed-run tests' data set and its clean in-memory run's rows, made once for both signals."""
    root = tmp_path_factory.mktemp("killed-run")
    write_dataset(root / "big", interactions_table(random_interactions(400, 300, 0.2, seed=8)))
    args = ["--dataset", str(root / "big"), *KILLED_RUN_ARGS]
    assert main(["refresh", "--out", str(root / "clean"), *args, "--in-memory"]) == 0
    clean = runs.resolve_run(root / "clean")
    # The killed runs explain the model the clean run trained: training on a cluster is a round trip per
    # half-step, which these tests would spend most of their time in.
    args += ["--model", runs.read_manifest(clean)["summary"]["model"]]
    return args, runs.open_run(clean).to_table().sort_by(KEYS)


@pytest.mark.distributed
@pytest.mark.parametrize("how", ["SIGKILL", pytest.param("SIGINT", marks=pytest.mark.slow)])  # SIGINT with -m slow
def test_flow_killed_mid_run_resumes_on_rerun(tmp_path, how, killed_run_data):
    """SIGKILL the whole `dxplain refresh` process mid-run, or press Ctrl-C (SIGINT to its process group, on a
    LocalCluster); it stops within seconds, and the rerun resumes and publishes once: a clean run's rows."""
    import os
    import signal
    import subprocess
    import sys
    import time

    args, clean = killed_run_data
    args = args + (["--in-memory"] if how == "SIGKILL" else ["--workers", "2"])
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    log = tmp_path / "killed-run.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dxplain.cli", "refresh", "--out", str(out), *args],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.time() + 300
    while not list(out.glob("runs/*/_meta/part-*.json")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, f"the run ended before the kill (exit {proc.returncode}):\n{log.read_text()[-3000:]}"
    signalled = time.time()
    os.killpg(proc.pid, getattr(signal, how))
    proc.wait(timeout=60)
    if how == "SIGINT":
        printed = log.read_text()
        assert time.time() - signalled < 15, f"Ctrl-C took {time.time() - signalled:.0f} s to stop the run"
        assert proc.returncode == 130 and "run the same command again to resume" in printed, printed[-3000:]
        # The workers leave the stop to the client's process. (A worker may still log a connection the
        # stopping client closed mid-transfer: a race of the shutdown, not the signal.)
        assert "KeyboardInterrupt" not in printed, printed[-3000:]
        assert "Crash detected" not in printed, printed[-3000:]  # the message above says what happened instead
    (run,) = (out / "runs").iterdir()
    written = len(list(run.glob("_meta/part-*.json")))
    assert 0 < written < 30, f"{written} shards written before the kill; the test did not interrupt the run"
    assert not (run / "_meta" / "manifest.json").exists() and not (out / "LATEST").exists()

    # The rerun in process: a run's plan does not depend on where it runs, so the cluster's run resumes too.
    assert main(["refresh", "--out", str(out), *killed_run_data[0], "--in-memory"]) == 0
    s = runs.read_manifest(run)["summary"]
    assert runs.resolve_run(out) == run and s["resumed_shards"] == written  # sidecars mark complete shards
    for e in runs.read_manifest(run)["shards"]:
        assert runs.sha256_file(run / e["file"]) == e["sha256"]
    got = runs.open_run(run).to_table().sort_by(KEYS)
    if how == "SIGKILL":  # in process throughout: the same bits as the clean run
        assert got.equals(clean)
    else:  # shards written by workers with their own BLAS and numba thread counts: the same rows, to rounding
        floats = [f.name for f in got.schema if f.type == "double"]
        assert got.drop(floats).equals(clean.drop(floats))
        for c in floats:
            np.testing.assert_allclose(got[c].to_numpy(), clean[c].to_numpy(), rtol=1e-9, atol=1e-12, err_msg=c)


def test_refresh_reads_and_writes_fsspec_urls(dataset, tmp_path):
    """Dataset, model store and run folder on memory:// give the same rows as a local run."""
    import uuid

    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://dxplain-{uuid.uuid4().hex[:8]}"
    for f in Path(dataset).iterdir():
        fs.pipe_file(f"{root.removeprefix('memory://')}/data/{f.name}", f.read_bytes())
    kw = dict(top_n=3, top_k=2, k=4, lam=5e-3, shards=3, in_memory=True)
    s = refresh(dataset=f"{root}/data", out=f"{root}/out", **kw)
    assert s["run"].startswith(f"{root}/out/runs/") and s["model"].startswith(f"{root}/out/models/")
    run = runs.resolve_run(f"{root}/out")
    assert run == s["run"] and len(runs.read_manifest(run)["shards"]) == 3
    got = runs.open_run(run).to_table()
    local = refresh(dataset=str(dataset), out=str(tmp_path / "out"), **kw)
    want = runs.open_run(local["run"]).to_table()
    assert got.num_rows == s["attributions"] and got.equals(want)  # same shards, same rows, same order
    with pytest.raises(InputError, match="memory:// is private to one process"):
        refresh(dataset=f"{root}/data", out=f"{root}/cluster-out", workers=2, top_n=3, k=4, lam=5e-3)
    assert not fs.exists(f"{root.removeprefix('memory://')}/cluster-out")
    # The stored model on the URL is found and reused by the next run.
    s2 = refresh(dataset=f"{root}/data", out=f"{root}/out", **kw)
    assert s2["model"] == s["model"] and runs.resolve_run(f"{root}/out") == s2["run"] != s["run"]


def test_keep_prunes_old_runs_and_the_stores_of_data_no_kept_run_used(tmp_path):
    """A nightly refresh on changed data with --keep 1: yesterday's run, part store and model go; today's stay."""
    import os
    import time

    kw = dict(out=str(tmp_path / "out"), top_n=3, top_k=2, k=4, lam=5e-3, shards=2, in_memory=True)
    nights = []
    for night in (1, 2):
        folder = tmp_path / f"night{night}" / "small"  # the same dataset name, new data each night
        write_dataset(folder, interactions_table(random_interactions(50, 40, 0.25, seed=night)))
        nights.append(refresh(dataset=str(folder), keep=1, **kw))
        for p in (tmp_path / "out").rglob("*"):  # a day passes (a store written minutes ago counts as in use)
            os.utime(p, (time.time() - 86400,) * 2)
    first, second = nights
    assert first["pruned_runs"] == [] and first["pruned_stores"] == []
    assert second["pruned_runs"] == [Path(first["run"]).name]
    old, new = (Path(s["model"]).name.split("-")[1] for s in nights)  # models/small-<fingerprint>-<tags>.zarr
    assert old != new and second["pruned_stores"] == [f"models/{Path(first['model']).name}", f"partitions/small-{old}"]
    assert not Path(first["model"]).exists() and Path(second["model"]).exists()
    assert [p.name for p in (tmp_path / "out" / "partitions").iterdir()] == [f"small-{new}"]


@pytest.mark.parametrize("lam", [None, 5e-3])
def test_refresh_on_imported_factors_warns_why_the_attributions_miss_and_publishes(dataset, tmp_path, lam):
    """Imported factors have no gradient norm: the fidelity warning says why they miss instead of failing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dxplain.datasets import resolve_dataset
    from dxplain.io import model_store

    data = resolve_dataset(str(dataset)).interactions
    rng = np.random.default_rng(0)
    for side, ids in (("U", data.user_ids), ("V", data.item_ids)):
        factors = pa.table({"id": ids, "embedding": list(rng.normal(size=(len(ids), 4)))})
        pq.write_table(factors, tmp_path / f"{side}.parquet")
    model = model_store.import_embeddings(
        tmp_path / "imp.zarr",
        data,
        tmp_path / "U.parquet",
        tmp_path / "V.parquet",
        lam=lam,
        mu=float(data.rating_mean()),
    )
    s = refresh(
        dataset=str(dataset), model=str(model), out=str(tmp_path / "out"), top_n=3, top_k=2, shards=2, in_memory=True
    )
    assert s["grad_norm"] is None and not s["fidelity_ok"] and runs.resolve_run(tmp_path / "out") == Path(s["run"])
    assert ("have no λ" if lam is None else "not a stationary point") in s["fidelity_warning"]


def test_a_model_fitted_on_other_data_is_refused_before_anything_is_written(dataset, tmp_path):
    from dxplain.datasets import resolve_dataset
    from dxplain.models.als.trainer import ALSMF

    other = tmp_path / "other" / "small"
    write_dataset(other, interactions_table(random_interactions(50, 40, 0.25, seed=5)))
    data = resolve_dataset(str(other)).interactions
    ALSMF(k=4, lam=5e-3).fit(data).save(tmp_path / "other.zarr", data)
    with pytest.raises(InputError, match="fitted on other data"):
        refresh(dataset=str(dataset), model=str(tmp_path / "other.zarr"), out=str(tmp_path / "out"), in_memory=True)
    assert not (tmp_path / "out").exists()  # no part store, no run folder


def test_a_given_model_is_read_from_its_store_once(dataset, tmp_path, monkeypatch):
    """``--model``: the store is read once, while loading (checked against the data there), not again to train."""
    from dxplain.datasets import resolve_dataset
    from dxplain.io import model_store
    from dxplain.models.als.trainer import ALSMF

    data = resolve_dataset(str(dataset)).interactions
    ALSMF(k=4, lam=5e-3).fit(data).save(tmp_path / "m.zarr", data)
    real, reads = model_store.read_model, []
    monkeypatch.setattr(model_store, "read_model", lambda *a, **kw: reads.append(a[0]) or real(*a, **kw))
    s = refresh(
        dataset=str(dataset), model=str(tmp_path / "m.zarr"), out=str(tmp_path / "out"), shards=2, in_memory=True
    )
    assert reads == [str(tmp_path / "m.zarr")] and s["model"] == str(tmp_path / "m.zarr")
