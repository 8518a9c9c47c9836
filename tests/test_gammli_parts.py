"""GAMMLI's parts built from a ratings file chunk by chunk (the flow's path) equal the in-memory ones."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dxplain.errors import InputError
from dxplain.gammli.fit import (
    COLD_SHARE,
    Config,
    RatingsFile,
    build_parts,
    fit_gammli,
    fit_gammli_chunks,
    make_parts,
    validation_rows,
)
from dxplain.gammli.synthetic import eq6
from dxplain.io.features import features_from_table
from dxplain.io.ratings import ratings_chunks, read_ratings, read_ratings_chunk
from dxplain.io.tables import read_table
from dxplain.mapper import LocalMapper


def _data(seed=4):
    d = eq6(60, 50, missing=0.7, seed=seed)
    users, items = features_from_table(d["users"], "user"), features_from_table(d["items"], "item")
    return d, users, items


def _ratings(d, users, items) -> pa.Table:
    return pa.table(
        {"user": users.ids.take(pa.array(d["u"])), "item": items.ids.take(pa.array(d["i"])), "rating": d["y"]}
    )


def _assert_parts_equal(built, expected):
    for side in ("user", "item"):
        assert [(lo, hi) for _, lo, hi in built[side]] == [(lo, hi) for _, lo, hi in expected[side]]
        for (a, _, _), (b, _, _) in zip(built[side], expected[side]):
            for k in ("u", "i", "y", "val"):
                np.testing.assert_array_equal(a[k], b[k])


def test_chunked_parts_equal_make_parts_whatever_the_chunking(tmp_path):
    d, users, items = _data()
    path = tmp_path / "r.parquet"
    pq.write_table(_ratings(d, users, items), path, row_group_size=97)
    val = validation_rows(d["u"], len(users), 0.2, seed=3)
    expected = make_parts(d["u"], d["i"], d["y"], val, len(users), len(items), 5)
    read = RatingsFile(users, items)
    n_groups = -(-len(d["y"]) // 97)
    # a chunk per row group, four row groups each, the whole file
    for rows, n_chunks in ((1, n_groups), (300, -(-n_groups // 4)), (10**9, 1)):
        chunks = ratings_chunks(str(path), rows=rows)
        assert len(chunks) == n_chunks
        sides, info = build_parts(LocalMapper(), read, chunks, len(users), len(items), 5, 0.2, 3)
        _assert_parts_equal(sides, expected)
        assert info["n"] == info["n_read"] == len(d["y"]) and info["n_val"] == int(val.sum())
        np.testing.assert_array_equal(info["seen_u"], np.bincount(d["u"], minlength=len(users)) > 0)


def test_rows_without_features_are_left_out_and_keep_their_row_draws(tmp_path):
    d, users, items = _data()
    table = _ratings(d, users, items)
    stranger = pa.table(
        {
            "user": pa.array(["nobody"] * 3, table["user"].type)
            if pa.types.is_string(table["user"].type)
            else pa.array([10**6] * 3, table["user"].type),
            "item": table["item"][:3],
            "rating": pa.array([1.0, 2.0, 3.0]),
        }
    )
    cut = 40  # unknown users in the middle of the table
    path = tmp_path / "r.parquet"
    pq.write_table(pa.concat_tables([table.slice(0, cut), stranger, table.slice(cut)]), path, row_group_size=64)
    chunks = ratings_chunks(str(path), rows=100)
    with pytest.raises(InputError, match="--cold-start-missing"):
        build_parts(LocalMapper(), RatingsFile(users, items), chunks, len(users), len(items), 3, 0.2, 3)
    sides, info = build_parts(
        LocalMapper(), RatingsFile(users, items, cold_start_missing=True), chunks, len(users), len(items), 3, 0.2, 3
    )
    assert info["n_read"] - info["n"] == 3
    # the documented flags: the seed's draw of each file row, and users held out after one draw per file row
    rng = np.random.default_rng(3)
    draws = np.delete(rng.random(len(d["y"]) + 3), np.arange(cut, cut + 3))
    val = (draws < 0.2 * (1 - COLD_SHARE)) | (rng.random(len(users)) < 0.2 * COLD_SHARE)[d["u"]]
    _assert_parts_equal(sides, make_parts(d["u"], d["i"], d["y"], val, len(users), len(items), 3))


def test_a_fit_from_file_chunks_equals_the_fit_from_arrays(tmp_path):
    d, users, items = _data(seed=5)
    path = tmp_path / "r.parquet"
    pq.write_table(_ratings(d, users, items), path, row_group_size=128)
    cfg = Config(rank=2, K=3, L=4, lam=3.0, n_parts=3, max_pairs=3, max_sweeps=25)
    a = fit_gammli(users, items, d["u"], d["i"], d["y"], cfg, log=lambda *_: None)
    b = fit_gammli_chunks(
        users, items, RatingsFile(users, items), ratings_chunks(str(path), rows=256), cfg, log=lambda *_: None
    )
    for x, y in zip(a.additive.coefs, b.additive.coefs):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.U, b.U)
    np.testing.assert_array_equal(a.V, b.V)
    assert b.info["n_val"] == a.info["n_val"] > 0


def test_ratings_chunks_of_a_folder_follow_read_table_order_and_a_csv_is_one_chunk(tmp_path):
    d, users, items = _data()
    table = _ratings(d, users, items)
    folder = tmp_path / "parts"
    folder.mkdir()
    for n, lo in enumerate(range(0, len(table), 250)):
        pq.write_table(table.slice(lo, 250), folder / f"part-{n}.parquet", row_group_size=100)
    (folder / "_SUCCESS").write_text("")
    chunks = ratings_chunks(str(folder), rows=150)
    assert len(chunks) == sum(-(-min(250, len(table) - lo) // 200) for lo in range(0, len(table), 250))
    read = [read_ratings_chunk(c) for c in chunks]
    whole = read_table(str(folder))
    assert pa.concat_arrays([r[0] for r in read]).equals(whole["user"].combine_chunks())
    np.testing.assert_array_equal(np.concatenate([r[2] for r in read]), whole["rating"].to_numpy())
    csv = tmp_path / "r.csv"
    csv.write_text("user,item,rating\n1,2,3.0\n")
    (chunk,) = ratings_chunks(str(csv))
    assert read_ratings_chunk(chunk)[2].tolist() == read_ratings(str(csv))[2].tolist() == [3.0]
    with pytest.raises(InputError, match="no such file"):
        ratings_chunks(str(tmp_path / "missing.parquet"))
