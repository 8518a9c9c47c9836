"""``dxplain diff``: two nights of a refresh into one --out, a day of ratings appended between them."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.io import runs
from dxplain.io.dataset_folders import write_dataset
from dxplain.reporting import diff

pytestmark = pytest.mark.usefixtures("prefect_server")

ARGS = ["--k", "4", "--in-memory", "--top-n", "5", "--top-k", "0"]


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Night 1 on a day's ratings; night 2 on the same plus an appended day (new ratings of known users, among
    them of unseen items); both into one --out. Returns (out, the appended (user, item) pairs)."""
    root = tmp_path_factory.mktemp("nights")
    first = interactions_table(random_interactions(60, 40, 0.2, seed=4))
    seen = set(zip(first["user"].to_pylist(), first["item"].to_pylist()))
    rng = np.random.default_rng(1)
    day = []
    while len(day) < 80:
        pair = (f"u{rng.integers(60):03d}", f"i{rng.integers(40):03d}")
        if pair not in seen and pair not in day:
            day.append(pair)
    appended = pa.table(
        {
            "user": [u for u, _ in day],
            "item": [i for _, i in day],
            "rating": rng.integers(4, 6, len(day)).astype(float),  # liked: they pull their items up for others
        }
    )
    write_dataset(root / "night1" / "shop", first)
    write_dataset(root / "night2" / "shop", pa.concat_tables([first, appended]))
    out = root / "out"
    for night in ("night1", "night2"):
        assert main(["refresh", "--dataset", str(root / night / "shop"), "--out", str(out), *ARGS]) == 0
    return out, set(day)


def test_diff_lists_changed_users_and_marks_exactly_the_appended_rows_new(nights, tmp_path, capsys):
    out, appended = nights
    capsys.readouterr()
    assert main(["diff", "--out", str(out), "--parquet", str(tmp_path / "diff.parquet")]) == 0
    printed = capsys.readouterr().out
    t = pq.read_table(tmp_path / "diff.parquet")
    assert t.column_names[:5] == ["user", "item", "change", "rank_from", "rank_to"]
    entered = t.filter(pc.equal(t["change"], "entered"))
    left = t.filter(pc.equal(t["change"], "left"))
    assert entered.num_rows > 0 and left.num_rows > 0
    # The same changes as the two runs' top-5 lists, recomputed here from the run files.
    first, second = (runs.open_run(r) for r in sorted((out / "runs").iterdir()))
    top = [
        {(r["user"], r["item"]): r["rec_rank"] for r in d.to_table(columns=["user", "item", "rec_rank"]).to_pylist()}
        for d in (first, second)
    ]
    assert {(r["user"], r["item"]) for r in entered.to_pylist()} == top[1].keys() - top[0].keys()
    assert {(r["user"], r["item"]) for r in left.to_pylist()} == top[0].keys() - top[1].keys()
    assert all(r["rank_to"] == top[1][(r["user"], r["item"])] and r["rank_from"] is None for r in entered.to_pylist())
    # Each entered item's reasons: its largest training rows, each new exactly when it was appended.
    marks = [(why["train_user"], why["train_item"], why["new"]) for r in entered.to_pylist() for why in r["reasons"]]
    assert marks and all(new == ((u, i) in appended) for u, i, new in marks)
    assert any(new for *_, new in marks)  # the appended day is among the reasons
    assert all(r["reasons"] == [] for r in left.to_pylist())
    users = len(set(t["user"].to_pylist()))
    assert f"{users} of 60 users' recommendations changed" in printed and "[new]" in printed


def test_diff_of_one_user_and_bad_input(nights, capsys):
    out, _ = nights
    older, newer = sorted(p.name for p in (out / "runs").iterdir())
    assert main(["diff", "--out", str(out), "--from", older, "--to", newer, "--user", "u003"]) == 0
    printed = capsys.readouterr().out
    assert "of 1 users'" in printed and "user u007" not in printed
    assert main(["diff", "--out", str(out), "--from", "nope"]) == 2
    assert "--from nope: not a published run" in capsys.readouterr().err
    assert main(["diff", "--out", str(out), "--from", newer, "--to", newer]) == 2
    assert "both name" in capsys.readouterr().err
    assert main(["diff", "--out", str(out), "--to", older]) == 2
    assert "oldest published run" in capsys.readouterr().err


def test_a_reader_that_stops_early_costs_neither_the_file_nor_a_traceback(nights, tmp_path, monkeypatch, capsys):
    """``dxplain diff --parquet F | head -1``: the listing's reader leaves; F is written whole all the same (before
    the listing), and the command ends with 141 (128 + SIGPIPE), not a BrokenPipeError traceback."""
    import os
    import sys

    out, _ = nights
    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that has already gone: the first write fails with EPIPE
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        code = main(["diff", "--out", str(out), "--parquet", str(tmp_path / "d.parquet")])
    finally:
        monkeypatch.undo()
        stdout.close()
    assert code == 141
    assert "Traceback" not in capsys.readouterr().err
    assert pq.read_table(tmp_path / "d.parquet").num_rows > 0


def test_a_broken_pipe_that_is_not_stdout_is_not_taken_for_a_reader_that_left(monkeypatch):
    """Only a stdout whose reader has gone ends a command with 141; a BrokenPipeError from elsewhere (a socket, a
    worker's pipe) still surfaces."""
    from dxplain.cli import diff as diff_cli

    def broken(a):
        raise BrokenPipeError("a worker's pipe")

    monkeypatch.setattr(diff_cli, "cmd_diff", broken)
    with pytest.raises(BrokenPipeError, match="a worker's pipe"):
        main(["diff", "--out", "nowhere"])


def test_changes_and_reasons_on_small_tables():
    before = pa.table(
        {"user": ["a", "a", "b"], "item": ["x", "y", "x"], "rec_rank": [1, 2, 1], "prediction": [4.0, 3.0, 5.0]}
    )
    after = pa.table(
        {"user": ["a", "a", "c"], "item": ["x", "z", "x"], "rec_rank": [2, 1, 1], "prediction": [4.1, 4.5, 3.0]}
    )
    c = diff.changes(before, after)
    assert c.select(["user", "item", "change", "rank_from", "rank_to"]).to_pylist() == [
        {"user": "a", "item": "z", "change": "entered", "rank_from": None, "rank_to": 1},
        {"user": "a", "item": "y", "change": "left", "rank_from": 2, "rank_to": None},
        {"user": "b", "item": "x", "change": "left", "rank_from": 1, "rank_to": None},
        {"user": "c", "item": "x", "change": "entered", "rank_from": None, "rank_to": 1},
    ]
    rows = pa.table(
        {
            "user": ["a"] * 4 + ["c"],
            "item": ["z"] * 4 + ["x"],
            "side": ["item", "user", "user", "item", "item"],
            "train_user": ["a", "b", "d", "a", "c"],
            "train_item": ["q", "z", "z", "bias", "w"],
            "rating": [5.0, 4.0, 3.0, None, 2.0],
            "importance": [0.1, 0.7, -0.2, 0.9, 0.3],
            "kind": ["interaction", "interaction", "interaction", "bias", "interaction"],
        }
    )
    top = diff.reasons(rows, c.filter(pc.equal(c["change"], "entered")), per_target=2)
    assert list(zip(top["train_user"].to_pylist(), top["importance"].to_pylist())) == [
        ("b", 0.7),
        ("a", 0.1),
        ("c", 0.3),
    ]
    nested = diff.with_reasons(c, top, np.array([True, False, False]))
    assert [[w["train_user"] for w in r] for r in nested["reasons"].to_pylist()] == [["b", "a"], [], [], ["c"]]
    assert nested["reasons"].to_pylist()[0][0]["new"] is True


def test_a_folder_of_daily_files_refuses_a_file_that_repeats_pairs_or_changes_columns(tmp_path, capsys):
    """The layout of a nightly export: one Parquet file a day. A day that re-sends a pair already in the data, or
    whose columns differ, is named, and nothing is written."""
    folder = tmp_path / "daily"
    folder.mkdir()
    first = pa.table({"user": ["a", "a", "b", "c"], "item": ["x", "y", "x", "z"], "rating": [4.0, 3.0, 5.0, 2.0]})
    pq.write_table(first, folder / "day-01.parquet")
    pq.write_table(pa.table({"user": ["c", "d"], "item": ["x", "y"], "rating": [3.0, 4.0]}), folder / "day-02.parquet")
    pq.write_table(pa.table({"user": ["d", "b"], "item": ["z", "x"], "rating": [1.0, 2.0]}), folder / "day-03.parquet")
    out = tmp_path / "out"
    assert main(["refresh", "--dataset", str(folder), "--out", str(out), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "day-03.parquet: 1 (user, item) pair(s) already in the data, e.g. user='b', item='x'" in err, err
    assert "(first in" in err and "day-01.parquet" in err
    assert not out.exists()
    (folder / "day-03.parquet").unlink()
    pq.write_table(pa.table({"user": ["e"], "item": ["x"], "rating": [4]}), folder / "day-03.parquet")  # int ratings
    assert main(["refresh", "--dataset", str(folder), "--out", str(out), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "day-03.parquet: its columns (user: string, item: string, rating: int64) differ from" in err, err
    assert not out.exists()


def test_each_run_keeps_its_targets_and_what_changed_since_the_run_before(nights, tmp_path):
    out, _ = nights
    first, second = sorted((out / "runs").iterdir())
    assert (
        "changes" not in runs.read_manifest(first)["summary"] or runs.read_manifest(first)["summary"]["changes"] is None
    )
    for run in (first, second):  # one row per target, in original ids
        t = pq.read_table(run / "_meta" / runs.TARGETS)
        rows = runs.open_run(run).to_table(columns=["user", "item", "rec_rank"])
        assert t.num_rows == runs.read_manifest(run)["summary"]["targets"]
        assert set(zip(*(t[c].to_pylist() for c in ("user", "item", "rec_rank")))) == set(
            zip(*(rows[c].to_pylist() for c in ("user", "item", "rec_rank")))
        )
    assert main(["diff", "--out", str(out), "--parquet", str(tmp_path / "d.parquet")]) == 0
    cols = ["user", "item", "change", "rank_from", "rank_to"]
    kept = pq.read_table(second / "_meta" / runs.CHANGES).select(cols)
    assert kept.equals(pq.read_table(tmp_path / "d.parquet").select(cols))
    counted = runs.read_manifest(second)["summary"]["changes"]
    assert counted == {"from": first.name, **diff.counts(kept)} and counted["users_changed"] > 0


def test_the_report_of_the_second_night_shows_what_changed_and_its_warm_start(nights, tmp_path):
    out, _ = nights
    assert main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    counted = runs.read_manifest(runs.resolve_run(out))["summary"]["changes"]
    assert f"{counted['users_changed']} users&#x27;" in page or f"{counted['users_changed']} users'" in page
    assert "What changed since the last run" in page and "entered" in page
    assert "warm from the last run" in page


@pytest.mark.slow
def test_diff_on_movielens_100k_with_an_appended_day(ml100k, tmp_path, capsys):
    """ml-100k as a daily export: day 1 all but the newest 1% of ratings (by time), day 2 the rest, appended between
    two nights into one --out (the second warm). The diff lists exactly the users whose top-5 changed, and an entered
    item's reasons are marked new exactly when they are day 2's ratings."""
    d = ml100k.interactions
    table = pa.table(
        {"user": d.user_ids.take(pa.array(d.user)), "item": d.item_ids.take(pa.array(d.item)), "rating": d.rating}
    )
    late = np.zeros(len(d), bool)
    late[np.argsort(d.timestamp, kind="stable")[int(0.99 * len(d)) :]] = True
    folder, out = tmp_path / "daily", tmp_path / "out"
    folder.mkdir()
    pq.write_table(table.filter(pa.array(~late)), folder / "day-01.parquet")
    assert main(["refresh", "--dataset", str(folder), "--out", str(out), *ARGS]) == 0
    day2 = table.filter(pa.array(late))
    pq.write_table(day2, folder / "day-02.parquet")
    assert main(["refresh", "--dataset", str(folder), "--out", str(out), *ARGS]) == 0
    capsys.readouterr()
    assert main(["diff", "--out", str(out), "--parquet", str(tmp_path / "diff.parquet")]) == 0
    printed = capsys.readouterr().out
    t = pq.read_table(tmp_path / "diff.parquet")
    first, second = (runs.open_run(r) for r in sorted((out / "runs").iterdir()))
    top = [
        {(r["user"], r["item"]) for r in run.to_table(columns=["user", "item"]).to_pylist()} for run in (first, second)
    ]
    changed = {u for u, _ in top[0] ^ top[1]}
    assert changed and set(t["user"].to_pylist()) == changed
    assert f"{len(changed)} of {d.n_users} users' recommendations changed" in printed
    appended = set(zip(day2["user"].to_pylist(), day2["item"].to_pylist()))
    entered = t.filter(pc.equal(t["change"], "entered")).to_pylist()
    marks = [(why["train_user"], why["train_item"], why["new"]) for r in entered for why in r["reasons"]]
    assert marks and all(new == ((u, i) in appended) for u, i, new in marks)  # reasons are interaction rows only
    assert any(new for *_, new in marks)
