"""The negatives flow and CLI (Prefect ephemeral mode): outputs, the cleaned set, retraining, bad input."""

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import only_run, write_random_dataset

from dxplain.cli import main
from dxplain.flows.negatives import negatives

ARGS = ["--k", "3", "--lam", "2e-4", "--percent", "5"]


pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_random_dataset(tmp_path_factory, seed=3)


def positives_of(d):
    keep = d.rating >= 4
    return {(f"u{u:03d}", f"i{i:03d}") for u, i in zip(d.user[keep], d.item[keep])}


def test_cli_flags_the_lowest_share_of_all_unobserved_pairs(dataset, tmp_path, capsys):
    folder, d = dataset
    out = tmp_path / "out"
    assert main(["negatives", "--dataset", str(folder), "--out", str(out), "--in-memory", "--retrain", *ARGS]) == 0
    assert "flagged.parquet" in capsys.readouterr().out
    run = only_run(out, "negatives")
    flagged = pq.read_table(run / "flagged.parquet")
    summary = json.loads((run / "summary.json").read_text())
    n_pos = len(positives_of(d))
    n_neg = d.n_users * d.n_items - n_pos
    assert summary["negatives_total"] == n_neg and summary["positives"] == n_pos
    assert flagged.num_rows == summary["flagged"] == math.ceil(0.05 * n_neg)
    pairs = set(zip(flagged.column("user").to_pylist(), flagged.column("item").to_pylist()))
    assert len(pairs) == flagged.num_rows and not pairs & positives_of(d)
    score = flagged.column("score").to_numpy()
    assert np.all(np.diff(score) >= 0) and score[0] < 0  # most negative first
    assert flagged.column("rank").to_pylist() == list(range(1, flagged.num_rows + 1))
    assert summary["retrained"]["negatives"] == n_neg - flagged.num_rows
    assert not (run / "cleaned-negatives.parquet").exists()


@pytest.mark.distributed
def test_cluster_scan_flags_the_same_pairs_as_in_memory(dataset, tmp_path):
    folder, _ = dataset
    common = dict(dataset=str(folder), percent=5, k=3, lam=2e-4, method="fia")
    a = negatives(out=str(tmp_path / "mem"), in_memory=True, **common)
    b = negatives(out=str(tmp_path / "dask"), workers=2, shards=3, **common)
    ta = pq.read_table(only_run(tmp_path / "mem", "negatives") / "flagged.parquet")
    tb = pq.read_table(only_run(tmp_path / "dask", "negatives") / "flagged.parquet")
    assert a["flagged"] == b["flagged"] and ta.equals(tb)


def test_sampled_negatives_write_a_cleaned_set(dataset, tmp_path):
    folder, d = dataset
    out = tmp_path / "out"
    s = negatives(
        dataset=str(folder),
        out=str(out),
        negatives="2",
        percent=10,
        k=3,
        lam=2e-4,
        in_memory=True,
        method="loss",
        retrain=True,
    )
    run = only_run(out, "negatives")
    # Trained over the training table's parts, to the same stop as the whole-table fit; so is the retrain.
    assert s["solver"] == "alternating" and s["grad_norm"] <= 1e-4 * s["lam"]
    assert (
        s["retrained"]["negatives"] == s["negatives_total"] - s["flagged"]
        and s["retrained"]["grad_norm"] <= 1e-4 * s["lam"]
    )
    flagged = pq.read_table(run / "flagged.parquet")
    cleaned = pq.read_table(run / "cleaned-negatives.parquet")
    assert flagged.num_rows == math.ceil(0.1 * s["negatives_total"])
    assert cleaned.num_rows == s["negatives_total"] - flagged.num_rows
    f = set(zip(flagged.column("user").to_pylist(), flagged.column("item").to_pylist()))
    c = set(zip(cleaned.column("user").to_pylist(), cleaned.column("item").to_pylist()))
    assert not f & c and not (f | c) & positives_of(d)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--percent", "0"], "--percent 0"),
        (["--percent", "150"], "--percent 150"),
        (["--method", "shap"], "--method 'shap'"),
        (["--negatives", "lots"], "--negatives 'lots'"),
        (["--positive-threshold", "9"], "rating ≥ 9"),
    ],
)
def test_bad_options_name_the_problem_and_write_nothing(dataset, tmp_path, capsys, args, needle):
    folder, _ = dataset
    out = tmp_path / "out"
    assert main(["negatives", "--dataset", str(folder), "--out", str(out), "--in-memory", "--k", "3", *args]) == 2
    assert needle in capsys.readouterr().err
    assert not (out / "negatives").exists()


def test_a_negatives_file_listing_a_positive_is_refused(dataset, tmp_path, capsys):
    folder, d = dataset
    u, i = sorted(positives_of(d))[0]
    path = tmp_path / "neg.parquet"
    pq.write_table(pa.table({"user": ["u000", u], "item": ["i029", i]}), path)
    out = tmp_path / "out"
    code = main(
        ["negatives", "--dataset", str(folder), "--out", str(out), "--in-memory", "--negatives", str(path), *ARGS]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"({u}, {i}) is a positive" in err
    assert not (out / "negatives").exists()


def test_all_unobserved_above_the_size_limit_is_refused_naming_sampled_negatives(
    dataset, tmp_path, capsys, monkeypatch
):
    from dxplain.explain import negatives as N

    folder, d = dataset
    monkeypatch.setattr(N, "ALL_UNOBSERVED_MAX_PAIRS", d.n_users * d.n_items - 1)
    out = tmp_path / "out"
    assert main(["negatives", "--dataset", str(folder), "--out", str(out), "--in-memory", *ARGS]) == 2
    err = capsys.readouterr().err
    assert "--negatives all:" in err and f"{d.n_users} users × {d.n_items} items" in err and "--negatives 4" in err
    assert not (out / "negatives").exists()


@pytest.mark.slow  # by default sampled negatives run on isolated workers against S3 (test_s3_cluster.py)
def test_sampled_negatives_of_a_prepared_dataset_are_drawn_trained_and_scored_by_tasks(dataset, tmp_path, monkeypatch):
    """Every interaction a positive (--positive-threshold none) of a prepared dataset: sampled per by-user
    part by tasks, trained and scored over the parts of D. The cluster flags what this process's mapper
    flags; the negatives are unobserved, distinct, M per positive; flagged and cleaned partition them."""
    from dxplain.io import partitions

    folder, d = dataset
    monkeypatch.setattr(partitions, "ROWS_PER_PART", 300)  # several parts per side (d has ~400 rows)
    common = dict(dataset=str(folder), negatives="3", positive_threshold=None, percent=5, k=3, lam=2e-4)
    a = negatives(out=str(tmp_path / "mem"), in_memory=True, **common)
    b = negatives(out=str(tmp_path / "dask"), workers=2, **common)
    assert a["sampled_by"] == b["sampled_by"] == "tasks" and a["solver"] == "alternating"
    assert a["grad_norm"] <= 1e-4 * a["lam"] and a["positives"] == len(d)
    fa, fb = (pq.read_table(only_run(tmp_path / o, "negatives") / "flagged.parquet") for o in ("mem", "dask"))
    assert fa.num_rows == math.ceil(0.05 * a["negatives_total"]) and fa.select(["user", "item"]).equals(
        fb.select(["user", "item"])
    )
    np.testing.assert_allclose(fa["score"].to_numpy(), fb["score"].to_numpy(), rtol=1e-9)
    cleaned_parts = list(
        (only_run(tmp_path / "dask", "negatives") / "cleaned-negatives.parquet").glob("part-*.parquet")
    )
    assert len(cleaned_parts) > 2  # one file per by-user part of D: the run had several
    cleaned = pq.read_table(only_run(tmp_path / "dask", "negatives") / "cleaned-negatives.parquet")
    f = set(zip(fb["user"].to_pylist(), fb["item"].to_pylist()))
    c = set(zip(cleaned["user"].to_pylist(), cleaned["item"].to_pylist()))
    every = {(f"u{u:03d}", f"i{i:03d}") for u, i in zip(d.user, d.item)}
    assert not f & c and not (f | c) & every and len(f) + len(c) == a["negatives_total"] == cleaned.num_rows + len(f)
    deg = d.user_degree()
    assert a["negatives_total"] == int(np.minimum(3 * deg, d.n_items - deg).sum())
    # Run again: the model stored a block at a time is read back in blocks by tasks, and flags the same.
    again = negatives(out=str(tmp_path / "mem"), in_memory=True, **common)
    assert again["model"] == a["model"] and again["grad_norm"] == a["grad_norm"]
    assert pq.read_table(Path(again["folder"]) / "flagged.parquet").equals(fa)
    # A training budget: the model stops there, says so, and is stored under its own name.
    c = negatives(out=str(tmp_path / "mem"), in_memory=True, max_sweeps=2, newton_steps=0, **common)
    assert c["sweeps"] == 2 and c["newton_iters"] == 0 and not c["converged"] and a["converged"]
    assert "sweeps2-newton0" in c["model"] and c["model"] != a["model"]
