"""Interactions partitioned on storage: each part is whole for its side, and shards explain from parts
exactly as the whole-table explainer does."""

import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import random_interactions

from dxplain import ingest
from dxplain.explain.representer import Preprocessed, RepresenterExplainer
from dxplain.explain.run_rows import fidelity
from dxplain.explain.targets import recommend
from dxplain.interactions import Targets
from dxplain.io import partitions
from dxplain.io.partitions import write_partitions
from dxplain.io.tables import parquet_chunks
from dxplain.mapper import LocalMapper
from dxplain.models.als.trainer import ALSMF
from dxplain.refresh import RefreshJob, alpha_from_table, alpha_pass, passes, plan, run_passes, shard_users, summary
from dxplain.vocabulary import Vocabulary


@pytest.fixture(scope="module")
def fitted():
    d = random_interactions(90, 70, 0.2, seed=5)
    m = ALSMF(k=5, lam=3e-3).fit(d)
    return d, Preprocessed.from_model(m, d)


def test_parts_hold_whole_histories_and_whole_rater_lists(fitted, tmp_path):
    d, pre = fitted
    parts = partitions.write_alpha(partitions.write_partitions(tmp_path, d, rows_per_part=200), d, pre.alpha, "k")
    n_user_parts, n_item_parts = len(parts.user_cuts) - 1, len(parts.item_cuts) - 1
    assert n_user_parts >= 4 and n_item_parts >= 4
    seen = []
    for p in range(n_item_parts):
        part = parts.read_items(p)
        lo, hi = parts.item_range(p)
        assert np.all((part.data.item >= lo) & (part.data.item < hi))
        assert np.array_equal(part.data.item_degree()[lo:hi], d.item_degree()[lo:hi])  # every rater of its items
        seen.append(len(part.data))
    assert sum(seen) == len(d)
    # Any user block, across part boundaries: exactly those users' rows, α aligned with them.
    lo, hi = 7, 61
    got = parts.read_users(lo, hi)
    rows = slice(d.user_indptr[lo], d.user_indptr[hi])
    assert np.array_equal(got.data.user, d.user[rows]) and np.array_equal(got.data.item, d.item[rows])
    assert np.array_equal(got.alpha, pre.alpha[rows]) and np.array_equal(got.data.rating, d.rating[rows])


def _run(job, shards, run_dir):
    run_dir.mkdir()
    results = run_passes(LocalMapper(), job, shards, str(run_dir))
    entries = results.entries
    # the shards' Parquet files beside _meta/, which holds their entries and user indexes; the stage is gone once all
    # are written
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([e["file"] for e in entries] + ["_meta"])
    assert sorted(p.name for p in (run_dir / "_meta").iterdir()) == sorted(
        [
            *(e["file"].replace(".parquet", ".json") for e in entries),
            *(e["file"].replace("part", "users") for e in entries),
            "targets.parquet",
        ]
    )
    return entries, results


@pytest.mark.parametrize("rows_per_part", [1, 150, 10**9])  # one item per part, several, one part
def test_shard_explanations_from_parts_equal_the_whole_table(fitted, tmp_path, rows_per_part):
    d, pre = fitted
    job = RefreshJob(
        *alpha_from_table(d, pre, write_partitions(tmp_path / "parts", d, rows_per_part)),
        d.item_degree(),
        top_n=5,
        top_k=3,
    )
    ex = RepresenterExplainer(d, pre)
    shards = shard_users(d, 3)
    entries, _ = _run(job, shards, tmp_path / "run")
    for e, users in zip(entries, shards):
        got = pq.read_table(tmp_path / "run" / e["file"])
        t = recommend(pre.Ut, pre.Vt, d, users, 5)  # from the whole table: the plan masked seen items from a part
        want = ex.explain(t, 3)
        for col in ("user", "item", "rec_rank", "side", "train_user", "train_item", "rating"):
            assert got[col].equals(want[col]), col
        for col in ("score", "global_importance", "local_importance", "importance"):
            np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), rtol=1e-12, atol=1e-15)
        assert e["pairs_scored"] == d.user_degree()[t.user].sum() + d.item_degree()[t.item].sum()
        want_fid = fidelity(*ex.side_sums(t), ex.scores(t))
        for side in ("item", "user"):
            assert e[f"max_rel_error_{side}"] == pytest.approx(want_fid[side]["max_rel_error"], rel=1e-6, abs=1e-12)
            assert e[f"max_rel_error_{side}"] < 1e-6  # the identity holds shard by shard


def test_user_side_tasks_do_not_change_the_output(fitted, tmp_path, monkeypatch):
    d, pre = fitted
    job = RefreshJob(
        *alpha_from_table(d, pre, write_partitions(tmp_path / "parts", d, 400)), d.item_degree(), top_n=5, top_k=3
    )
    shards = shard_users(d, 5)
    whole, passes = _run(job, shards, tmp_path / "whole")
    n_parts = len(job.parts.item_cuts) - 1
    assert n_parts <= len(passes.user_side)  # a task never spans item parts
    monkeypatch.setattr(plan, "ROWS_PER_SHARD", 1)  # every (item range, shard) its own task
    split, split_passes = _run(job, shards, tmp_path / "split")
    assert len(split_passes.user_side) > 3 * len(passes.user_side)
    assert sum(c["rows"] for c in split_passes.user_side) == sum(c["rows"] for c in passes.user_side)
    for a, b in zip(whole, split):  # the same rows in the same order; values to rounding (other batch shapes)
        ta, tb = pq.read_table(tmp_path / "whole" / a["file"]), pq.read_table(tmp_path / "split" / b["file"])
        for col in ("user", "item", "side", "train_user", "train_item", "rating", "global_importance"):
            assert ta[col].equals(tb[col]), col
        np.testing.assert_allclose(tb["importance"].to_numpy(), ta["importance"].to_numpy(), rtol=1e-12, atol=1e-15)


def test_user_side_tasks_cover_every_target_once_within_budget():
    from dxplain.refresh.plan import cut_user_side, item_ranges

    parts = partitions.Partitions("unused", np.array([0, 5]), np.array([0, 100, 300]), None, None, 0)
    edges = item_ranges(parts)
    assert edges[0] == 0 and edges[-1] == 300 and 100 in edges and len(edges) == 2 * plan.RANGES_PER_PART + 1
    rng = np.random.default_rng(0)
    targets = rng.poisson(0.5, size=(6, len(edges) - 1))
    targets[:, 70] = [50, 0, 40, 30, 0, 60]  # one popular range, above the budget alone
    census = [
        {"shard": s, "range_targets": targets[s].tolist(), "range_rows": (2 * targets[s]).tolist()} for s in range(6)
    ]
    chunks = cut_user_side(parts, census, rows_per_task=100)
    seen = np.zeros_like(targets)
    for lo, hi, members in chunks:
        assert np.searchsorted(parts.item_cuts, lo, "right") == np.searchsorted(parts.item_cuts, hi - 1, "right")
        b0, b1 = np.searchsorted(edges, [lo, hi])
        rows = 2 * targets[members, b0:b1].sum()
        assert rows <= 100 or len(members) == 1 or b1 - b0 == 1 and rows <= 200, (lo, hi, members)
        assert all(targets[s, b0:b1].sum() > 0 for s in members)  # no task for a shard with nothing there
        seen[members, b0:b1] += targets[members, b0:b1] > 0
    assert np.array_equal(seen, targets > 0)  # every (shard, range) with targets in exactly one task
    rows = [2 * targets[m, np.searchsorted(edges, lo) : np.searchsorted(edges, hi)].sum() for lo, hi, m in chunks]
    assert rows == sorted(rows, reverse=True)  # largest first


def test_a_run_interrupted_in_the_user_side_pass_resumes_from_its_stage(fitted, tmp_path, monkeypatch):
    d, pre = fitted
    job = RefreshJob(
        *alpha_from_table(d, pre, write_partitions(tmp_path / "parts", d, 400)), d.item_degree(), top_n=5, top_k=3
    )
    shards = shard_users(d, 4)
    clean, _ = _run(job, shards, tmp_path / "clean")
    real, calls = passes.user_side_task, []

    def crash_on_second(*args):
        if calls:
            raise RuntimeError("simulated crash")
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(passes, "user_side_task", crash_on_second)
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_passes(LocalMapper(), job, shards, str(run))
    assert not list(run.glob("part-*")) and len(list((run / "_meta" / "stage" / "targets").iterdir())) == len(shards)

    def no_recommend(*args):
        raise AssertionError("targets were recommended again instead of read from the stage")

    calls.clear()
    monkeypatch.setattr(passes, "user_side_task", lambda *a: calls.append(real(*a)) or calls[-1])
    monkeypatch.setattr(passes, "recommend", no_recommend)
    entries = run_passes(LocalMapper(), job, shards, str(run)).entries
    assert [bool(c.get("resumed")) for c in calls] == [True] + [False] * (len(calls) - 1)  # first part kept
    assert [e["sha256"] for e in entries] == [e["sha256"] for e in clean]
    assert not (run / "_meta" / "stage").exists()


def test_supplied_targets_on_seen_items_and_no_targets(fitted, tmp_path):
    d, pre = fitted
    users = np.arange(25, 60)
    t = Targets.from_pairs(np.repeat(users, 2), np.tile([0, 69], len(users)))  # includes rated items
    job = RefreshJob(
        *alpha_from_table(d, pre, write_partitions(tmp_path / "parts", d, 100)), d.item_degree(), top_k=2, targets=t
    )
    shards = shard_users(d, 6)
    assert shards[0][-1] < 25 and shards[-1][0] >= 60  # the first and last shards have no targets
    entries, _ = _run(job, shards, tmp_path / "run")
    ex = RepresenterExplainer(d, pre)
    keys = ["user", "item", "side", "train_user", "train_item"]
    for e, block in zip(entries, shards):
        got = pq.read_table(tmp_path / "run" / e["file"])
        want = ex.explain(t.for_user_range(block[0], block[-1] + 1), 2)
        assert got.select(keys).equals(want.select(keys)) and got.schema.equals(want.schema)
    assert sum(e["targets"] for e in entries) == len(t)
    for e in (entries[0], entries[-1]):
        assert e["rows"] == 0 and e["max_rel_error_user"] is None and e["pairs_scored"] == 0 and e["targets"] == 0


def test_store_is_reused_for_the_same_data_and_alpha_and_never_trusted_half_rewritten(fitted, tmp_path, monkeypatch):
    d, pre = fitted
    written = []
    real = partitions._write
    monkeypatch.setattr(partitions, "_write", lambda loc, *a: (written.append(loc), real(loc, *a)))
    RefreshJob(*alpha_from_table(d, pre, write_partitions(tmp_path, d, 200)), d.item_degree())
    n_files = len(written)
    RefreshJob(*alpha_from_table(d, pre, write_partitions(tmp_path, d, 200)), d.item_degree())
    assert len(written) == n_files  # same data and α: reused, nothing rewritten

    def crash(loc, *a):
        raise OSError("disk full")

    monkeypatch.setattr(partitions, "_write", crash)
    with pytest.raises(OSError):
        RefreshJob(
            *alpha_from_table(d, pre.with_alpha(pre.alpha * 2), write_partitions(tmp_path, d, 200)), d.item_degree()
        )  # another model's α
    assert not (tmp_path / "alpha" / "index.json").exists()  # α mid-rewrite has no index: nobody reuses it
    assert (tmp_path / "index.json").exists()  # the data parts did not change and stay reusable
    monkeypatch.setattr(partitions, "_write", lambda loc, *a: (written.append(loc), real(loc, *a)))
    written.clear()
    job = RefreshJob(*alpha_from_table(d, pre, write_partitions(tmp_path, d, 200)), d.item_degree())
    assert written and all("alpha" in str(loc) for loc in written)  # only α is rewritten
    assert np.array_equal(job.parts.read_users(0, d.n_users).alpha, pre.alpha)


def test_store_on_an_fsspec_url(fitted):
    d, pre = fitted
    job = RefreshJob(
        *alpha_from_table(d, pre, write_partitions("memory://dxplain-test-parts", d, 300)), d.item_degree()
    )
    part = job.parts.read_items(1)
    lo, hi = job.parts.item_range(1)
    assert len(part.data) == int(d.item_degree()[lo:hi].sum()) > 0


def test_job_carries_factors_only(fitted, tmp_path):
    d, pre = fitted
    job = RefreshJob(*alpha_from_table(d, pre, write_partitions(tmp_path, d)), d.item_degree())
    assert job.pre.alpha is None and job.pre.A is None  # O(|D|) and O(users·k) that a shard reads or sums itself
    assert job.pre.B is pre.B and job.pre.Ut is pre.Ut and job.pre.Vt is pre.Vt
    assert not any(isinstance(v, np.ndarray) and len(v) == len(d) for v in vars(job.parts).values())


def test_local_side_sums_equal_the_representer_embeddings(fitted):
    d, pre = fitted
    t = Targets.from_pairs(np.arange(d.n_users), np.arange(d.n_users) % d.n_items)
    with_ab = RepresenterExplainer(d, pre).side_sums(t)
    without = RepresenterExplainer(d, Preprocessed(pre.Ut, pre.Vt, pre.alpha, pre.mu, None, None)).side_sums(t)
    for a, b in zip(with_ab, without):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


def test_shard_count_keeps_each_shards_output_under_its_budget(fitted):
    from dxplain.refresh.plan import shard_count

    d, _ = fitted
    assert shard_count(2, d, n_targets=100, top_k=10) == 8  # small runs: 4 shards per worker
    # 5M targets × 40 rows (top-10 ± per side) = 2·10⁸ rows: 25 shards of 8M
    assert shard_count(2, d, n_targets=5_000_000, top_k=10) == 25
    assert shard_count(2, d, n_targets=5_000_000, top_k=10, rows_per_shard=10**9) == 8
    every = len(d) / d.n_users + len(d) / d.n_items  # top_k = 0 keeps whole histories and rater lists
    assert shard_count(1, d, n_targets=10**6, top_k=0) == int(np.ceil(10**6 * every / 8_000_000))


def check_alpha_pass_equals_alpha_from_table(d, m, root, mapper):
    """``alpha_pass`` (α and B by tasks over the parts) against ``alpha_from_table`` (from the whole table)."""
    pre = Preprocessed.from_model(m, d)
    job = RefreshJob(*alpha_pass(m, write_partitions(root, d, 150), mapper), d.item_degree(), top_n=5, top_k=3)
    assert len(job.parts.user_cuts) > 3 and len(job.parts.item_cuts) > 3
    np.testing.assert_allclose(job.parts.read_users(0, d.n_users).alpha, pre.alpha, rtol=1e-12, atol=1e-15)
    for p in range(len(job.parts.item_cuts) - 1):  # the by-item parts' α too, row by row
        part = job.parts.read_items(p)
        key = part.data.user.astype(np.int64) * d.n_items + part.data.item
        at = np.searchsorted(d.user.astype(np.int64) * d.n_items + d.item, key)
        np.testing.assert_allclose(part.alpha, pre.alpha[at], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(job.pre.B, pre.B, rtol=1e-10, atol=1e-14)
    assert job.pre.Ut is not None and np.array_equal(job.pre.Ut, pre.Ut) and np.array_equal(job.pre.Vt, pre.Vt)
    assert job.pre.alpha is None and job.pre.A is None
    return job


def test_alpha_pass_computes_alpha_and_b_on_the_parts_as_the_whole_table_does(fitted, tmp_path, monkeypatch):
    d, _ = fitted
    m = ALSMF(k=5, lam=3e-3).fit(d)
    check_alpha_pass_equals_alpha_from_table(d, m, tmp_path, LocalMapper())
    written = []
    real = partitions._write
    monkeypatch.setattr(partitions, "_write", lambda loc, *a: (written.append(loc), real(loc, *a)))
    check_alpha_pass_equals_alpha_from_table(d, m, tmp_path, LocalMapper())
    assert written == []  # the same model on the same data: α reused, B recomputed
    m2 = ALSMF(k=5, lam=3e-3, seed=1).fit(d)  # another model: every α part rewritten, then the index
    check_alpha_pass_equals_alpha_from_table(d, m2, tmp_path, LocalMapper())
    assert written and all("alpha" in str(loc) for loc in written)


def test_p99_bound_from_the_shards_decade_counts_holds_the_true_quantile():
    from dxplain.explain.run_rows import decade_counts

    rng = np.random.default_rng(3)
    rel = 10.0 ** rng.uniform(-12, -2, 1001)
    shards = [decade_counts(rel[:400]), decade_counts(rel[400:])]
    bound = summary.quantile_bound(shards, 0.99)
    p99 = np.quantile(rel, 0.99, method="inverted_cdf")
    assert bound / 10 <= p99 < bound
    assert summary.quantile_bound([{}, {}], 0.99) is None
    assert summary.quantile_bound([decade_counts(np.array([1e-9, 500.0]))], 0.99) == float(
        "inf"
    )  # the open last decade


# ---- streamed partitioning: by tasks over row groups, the flow keeping a TableSummary -------------------


def streamed_folder(tmp_path, d, row_group_size=97, seed=0, rows=None):
    """A prepared dataset of ``d`` whose interactions.parquet is shuffled into small row groups."""
    import pyarrow as pa
    from conftest import interactions_table

    from dxplain.io.dataset_folders import write_dataset

    folder = tmp_path / "data"
    write_dataset(folder, interactions_table(d))
    table = interactions_table(d) if rows is None else rows
    table = table.take(pa.array(np.random.default_rng(seed).permutation(table.num_rows)))
    pq.write_table(table, folder / "interactions.parquet", row_group_size=row_group_size)
    return folder


def scan(folder, mapper=None, rows_per_chunk=200):
    from dxplain.io.dataset_folders import read_catalogue

    users, items = read_catalogue(folder)
    return ingest.scan_source(
        mapper or LocalMapper(),
        folder / "interactions.parquet",
        users.column("id").combine_chunks(),
        items.column("id").combine_chunks(),
        rows_per_chunk=rows_per_chunk,
    )


def test_streamed_parts_equal_the_parts_of_the_whole_table(tmp_path):
    d = random_interactions(90, 70, 0.2, seed=5)
    folder = streamed_folder(tmp_path, d)
    assert len(parquet_chunks(folder / "interactions.parquet", 200)) > 3  # several tasks
    summary = scan(folder)
    assert (len(summary), summary.n_users, summary.n_items) == (len(d), d.n_users, d.n_items)
    assert summary.fingerprint() == d.fingerprint()
    assert summary.rating_mean() == d.rating_mean() and summary.rating_range() == d.rating_range()
    np.testing.assert_array_equal(summary.user_degree(), d.user_degree())
    np.testing.assert_array_equal(summary.item_degree(), d.item_degree())
    streamed = ingest.stream_partitions(
        LocalMapper(), folder / "interactions.parquet", summary, tmp_path / "s", rows_per_part=200, rows_per_chunk=200
    )
    whole = partitions.write_partitions(tmp_path / "w", d, rows_per_part=200)
    np.testing.assert_array_equal(streamed.user_cuts, whole.user_cuts)
    np.testing.assert_array_equal(streamed.item_cuts, whole.item_cuts)
    assert len(streamed.user_cuts) > 3 and streamed.n_interactions == len(d)
    for side, cuts in (("user", whole.user_cuts), ("item", whole.item_cuts)):
        for p in range(len(cuts) - 1):
            name = f"{side}/part-{p:05d}.parquet"
            assert pq.read_table(tmp_path / "s" / name).equals(pq.read_table(tmp_path / "w" / name)), name
    assert sorted(x.name for x in (tmp_path / "s").iterdir()) == [
        "index.json",
        "item",
        "item_ids.parquet",
        "user",
        "user_ids.parquet",
    ]  # no bucket left
    # The same data again: the store is reused, not rewritten.
    (tmp_path / "s" / "user" / "part-00000.parquet").unlink()
    ingest.stream_partitions(
        LocalMapper(), folder / "interactions.parquet", summary, tmp_path / "s", rows_per_part=200, rows_per_chunk=200
    )
    assert not (tmp_path / "s" / "user" / "part-00000.parquet").exists()


def test_a_duplicate_pair_is_refused_by_name_and_nothing_is_left(tmp_path):
    import pyarrow as pa
    from conftest import interactions_table

    from dxplain.errors import InputError

    d = random_interactions(60, 50, 0.2, seed=1)
    table = interactions_table(d)
    folder = streamed_folder(tmp_path, d, rows=pa.concat_tables([table, table.slice(7, 1)]))
    summary = scan(folder)
    assert len(summary) == len(d) + 1
    user, item = table["user"][7].as_py(), table["item"][7].as_py()
    with pytest.raises(InputError, match=f"1 duplicate .*user='{user}', item='{item}'"):
        ingest.stream_partitions(
            LocalMapper(),
            folder / "interactions.parquet",
            summary,
            tmp_path / "s",
            rows_per_part=100,
            rows_per_chunk=100,
        )
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "bad, message",
    [
        ("unknown", r"1 row\(s\) name user\(s\) missing from the dataset's users.parquet/items.parquet, e.g. \['zz'\]"),
        ("nan", r"1 rating\(s\) are NaN or infinite"),
        ("unused", r"users.parquet lists 1 user\(s\) with no interaction, e.g. 'u900'"),
        ("unsorted", r"users.parquet does not list its ids in sorted order"),
    ],
)
def test_scan_refuses_bad_rows_and_catalogues_by_name(tmp_path, bad, message):
    import pyarrow as pa
    from conftest import interactions_table

    from dxplain.errors import InputError

    d = random_interactions(30, 20, 0.3, seed=2)
    table = interactions_table(d)
    if bad == "unknown":
        table = table.set_column(0, "user", pa.array(["zz"] + table["user"].to_pylist()[1:]))
    if bad == "nan":
        table = table.set_column(2, "rating", pa.array([np.nan] + table["rating"].to_pylist()[1:]))
    folder = streamed_folder(tmp_path, d, rows=table)
    if bad in ("unused", "unsorted"):
        ids = d.user_ids.to_pylist() + ["u900"] if bad == "unused" else d.user_ids.to_pylist()[::-1]
        pq.write_table(pa.table({"id": ids}), folder / "users.parquet")
    with pytest.raises(InputError, match=message):
        scan(folder)


def test_row_digest_and_rating_sum_add_up_over_any_split():
    from fractions import Fraction

    from dxplain.interactions import RatingSum, row_digest

    rng = np.random.default_rng(3)
    u, i = rng.integers(0, 1000, 5000), rng.integers(0, 300, 5000)
    for y in (rng.integers(1, 6, 5000).astype(float), rng.integers(1, 11, 5000) / 2, rng.normal(size=5000) * 1e3):
        cut = 1234
        whole = row_digest(u, i, y)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(
                row_digest(u[:cut], i[:cut], y[:cut]) + row_digest(u[cut:], i[cut:], y[cut:]), whole
            )
        exact = sum((Fraction(float(v)) for v in y), Fraction(0))
        assert (RatingSum.of(y[:cut]) + RatingSum.of(y[cut:])).value() == RatingSum.of(y).value() == exact
        assert RatingSum.of(y).mean_of(len(y)) == float(exact / len(y))
        # Any change of a rating, or of which item a rating belongs to, changes the digest.
        y2 = y.copy()
        y2[[0, 1]] = y[[1, 0]] + (y[0] == y[1])
        assert not np.array_equal(row_digest(u, i, y2), whole)
        i2 = i.copy()
        i2[5] += 1
        assert not np.array_equal(row_digest(u, i2, y), whole)


def test_row_stats_of_any_split_total_the_whole_tables():
    from dxplain.interactions import RowStats

    rng = np.random.default_rng(4)
    u, i, y = rng.integers(0, 500, 4000), rng.integers(0, 90, 4000), rng.integers(1, 6, 4000) / 2
    u[:1500] = np.sort(u[:1500])  # a user-sorted stretch: its chunks' compact counts are narrow ranges
    u, i = u.astype(np.int32), i.astype(np.int32)  # as the chunks' id lookups give them
    u[-1], i[-1] = 499, 89  # the last ids of both spaces
    whole = RowStats.of(u, i, y, 500, 90)
    assert len(whole.user_counts) == 500 and len(whole.item_counts) == 90
    cuts = [0, 0, 7, 1500, 1501, 1501, 4000]  # an empty chunk first, and one in the middle
    for compact in (False, True, "mixed"):
        chunks = [
            RowStats.of(u[a:b], i[a:b], y[a:b], 500, 90, compact=compact is True or (compact and n % 2 == 1))
            for n, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))
        ]
        if compact is True:
            assert chunks[1].user_lo == u[:7].min() and len(chunks[1].user_counts) == u[:7].max() - u[:7].min() + 1
            assert len(chunks[0].user_counts) == len(chunks[4].user_counts) == 0
        got = RowStats.total(iter(chunks))
        np.testing.assert_array_equal(got.user_counts, whole.user_counts)
        np.testing.assert_array_equal(got.item_counts, whole.item_counts)
        np.testing.assert_array_equal(got.digest, whole.digest)
        assert got.ratings.value() == whole.ratings.value() and (got.rating_min, got.rating_max) == (0.5, 2.5)
    assert RowStats.total([]) is None
    with pytest.raises(ValueError, match="added to a total"):  # stats of another id space
        RowStats.total([whole, RowStats.of(u, i, y, 501, 90)])


def test_a_folder_of_files_is_read_as_pyarrow_reads_it_and_a_rerun_part_task_rebuilds_the_same_part(tmp_path):
    """interactions.parquet may be a folder: files under ``_…`` or ``.…`` names are not data (as for
    ``pq.read_table``). A part task rerun after a lost worker, with an interrupted write's temporary file
    among its buckets, rebuilds the same part."""
    import shutil

    from dxplain.io.dataset_folders import read_dataset

    d = random_interactions(60, 50, 0.25, seed=4)
    folder = streamed_folder(tmp_path, d)
    table = pq.read_table(folder / "interactions.parquet")
    (folder / "interactions.parquet").unlink()
    (folder / "interactions.parquet" / "_temporary").mkdir(parents=True)
    for n, (a, b) in enumerate([(0, 300), (300, table.num_rows)]):
        pq.write_table(table.slice(a, b - a), folder / "interactions.parquet" / f"part-{n}.parquet", row_group_size=97)
    pq.write_table(table.slice(0, 10), folder / "interactions.parquet" / "_temporary" / "part-0.parquet")
    shutil.copy(folder / "interactions.parquet" / "part-0.parquet", folder / "interactions.parquet" / ".part-0.parquet")
    whole = read_dataset(folder).interactions
    summary = scan(folder)
    assert summary.fingerprint() == whole.fingerprint() == d.fingerprint()
    root = tmp_path / "s"
    parts = ingest.stream_partitions(
        LocalMapper(), folder / "interactions.parquet", summary, root, rows_per_part=200, rows_per_chunk=200
    )
    first = pq.read_table(root / "user" / "part-00000.parquet")
    # A part task run twice (its worker lost after it wrote), an interrupted write's temporary file among
    # the buckets it reads (they are kept until the whole store is written): the same part.
    users, items, again = Vocabulary(summary.user_ids), Vocabulary(summary.item_ids), tmp_path / "again"
    for c, chunk in enumerate(parquet_chunks(folder / "interactions.parquet", 200)):
        ingest.bucket_chunk(chunk, c, users, items, again, parts.user_cuts, parts.item_cuts)
    ingest.assemble_part(again, "user", 0, users, items, "src")
    (again / "_buckets" / "user" / "00000" / ".00000.parquet.tmp-1").write_bytes(b"half a file")
    assert ingest.assemble_part(again, "user", 0, users, items, "src") == first.num_rows
    assert pq.read_table(again / "user" / "part-00000.parquet").equals(first)


def test_a_source_changed_between_scan_and_partitioning_is_refused_and_nothing_is_left(tmp_path):
    import pyarrow as pa

    from dxplain.errors import InputError

    d = random_interactions(60, 50, 0.25, seed=6)
    folder = streamed_folder(tmp_path, d)
    summary = scan(folder)
    table = pq.read_table(folder / "interactions.parquet")
    ratings = table["rating"].to_numpy().copy()
    ratings[3] = ratings[3] % 5 + 1  # same rows, one rating changed
    pq.write_table(table.set_column(2, "rating", pa.array(ratings)), folder / "interactions.parquet", row_group_size=97)
    with pytest.raises(InputError, match="changed while they were read"):
        ingest.stream_partitions(
            LocalMapper(),
            folder / "interactions.parquet",
            summary,
            tmp_path / "s",
            rows_per_part=200,
            rows_per_chunk=200,
        )
    assert not (tmp_path / "s").exists()


def test_parts_sent_to_a_task_carry_their_root_not_their_ids(fitted, tmp_path):
    """Every task of a map gets its own copy of its arguments: pickled, the parts are their root and cuts
    (the ids, 104 MB at 50M interactions, are read from the store once per process) and read the same rows."""
    import pickle

    data, _ = fitted
    parts = write_partitions(str(tmp_path / "parts"), data, rows_per_part=len(data) // 3)
    sent = pickle.dumps(parts)
    assert parts.user_ids[0].as_py().encode() not in sent and parts.item_ids[-1].as_py().encode() not in sent
    got = pickle.loads(sent)
    assert got.user_ids.equals(parts.user_ids) and got.item_ids.equals(parts.item_ids)
    for p in range(len(parts.user_cuts) - 1):
        a, b = got.read_part("user", p).data, parts.read_part("user", p).data
        np.testing.assert_array_equal(a.item, b.item)
        assert a.n_users == b.n_users and a.user_ids.equals(b.user_ids)


@pytest.mark.parametrize("kind", ["scratch folder", "spill list"])
def test_a_killed_runs_scratch_folder_is_removed_by_the_next_run_on_this_host(tmp_path, kind):
    """Block files (or the Anderson history's spill list) of a flow killed before its cleanup go when the
    next run makes its own; a live flow's, and another host's, stay."""
    import socket
    import subprocess
    import sys

    from dxplain.io import spill

    lists = []  # a spill list's folder goes with the list: keep it

    def spill_list(base):
        lists.append(spill.SpillList(base))
        return lists[-1].root

    prefix, make = {
        "scratch folder": (spill.SCRATCH_PREFIX, spill.scratch_folder),
        "spill list": (spill.SPILL_PREFIX, spill_list),
    }[kind]

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    folders = {}
    for name, owner in (
        ("dead", f"{host} {gone.stdout.strip()}"),
        ("live", f"{host} {os.getpid()}"),
        ("elsewhere", f"another-{host} {gone.stdout.strip()}"),
    ):
        folders[name] = tmp_path / f"{prefix}{name}"
        folders[name].mkdir()
        (folders[name] / spill.OWNER).write_text(owner)
        np.save(folders[name] / "block.npy", np.zeros(3))
    mine = make(tmp_path)
    assert not folders["dead"].exists() and folders["live"].exists() and folders["elsewhere"].exists()
    assert (mine / spill.OWNER).read_text() == f"{host} {os.getpid()}"


@pytest.mark.parametrize(
    "n, low, high, dtype",
    [
        (0, 0, 1, np.int32),
        (1, 5, 6, np.int32),
        (9_430, 0, 1_682, np.int32),
        (50_000, -70_000, 70_000, np.int64),
        (50_000, 0, 2**31 - 1, np.int32),
        (2_000, -(2**40), 2**40, np.int64),
        (1_000, 0, 3, np.int64),
    ],
)
def test_stable_id_order_is_numpys_stable_argsort(n, low, high, dtype):
    """The radix passes (one 16-bit digit, two, or none beyond 2³²) give numpy's stable order, repeated ids
    in input order."""
    from dxplain.interactions import stable_id_order

    ids = np.random.default_rng(n).integers(low, high, n).astype(dtype)
    order = stable_id_order(ids)
    assert order.dtype == np.int64 and np.array_equal(order, np.argsort(ids, kind="stable"))
