"""Warm starts (``models.warm``): a refresh on grown data starts from the last run's model and reaches the same
stopping rule, with the same recommendations as a cold fit; ``--cold`` and forgotten ids force a cold start."""

import numpy as np
import pyarrow as pa
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.io import runs
from dxplain.io.dataset_folders import write_dataset
from dxplain.models.warm import aligned

pytestmark = pytest.mark.usefixtures("prefect_server")

ARGS = ["--k", "4", "--in-memory", "--top-n", "5"]


def test_aligned_keeps_known_rows_by_id_and_starts_new_ones_at_zero():
    F = np.arange(6.0).reshape(3, 2)
    rows, known = aligned(F, pa.array(["a", "b", "c"]), pa.array(["b", "new", "c", "a"]))
    np.testing.assert_array_equal(rows, [[2, 3], [0, 0], [4, 5], [0, 1]])
    assert known == 3


@pytest.fixture(scope="module")
def two_days(tmp_path_factory):
    root = tmp_path_factory.mktemp("days")
    first = interactions_table(random_interactions(60, 40, 0.2, seed=4))
    seen = set(zip(first["user"].to_pylist(), first["item"].to_pylist()))
    rng = np.random.default_rng(2)
    day = set()
    while len(day) < 40:
        pair = (f"u{rng.integers(60):03d}", f"i{rng.integers(40):03d}")
        if pair not in seen:
            day.add(pair)
    day = sorted(day) + [("u_new", "i000"), ("u_new", "i_new"), ("u001", "i_new")]  # a new user, a new item
    appended = pa.table(
        {"user": [u for u, _ in day], "item": [i for _, i in day], "rating": rng.integers(1, 6, len(day)) * 1.0}
    )
    write_dataset(root / "day1" / "shop", first)
    write_dataset(root / "day2" / "shop", pa.concat_tables([first, appended]))
    return root, len(day)


def summary(out):
    return runs.read_manifest(runs.resolve_run(out))["summary"]


def top_n(out) -> dict:
    t = runs.open_run(runs.resolve_run(out)).to_table(columns=["user", "item"])
    found = {}
    for u, i in zip(t["user"].to_pylist(), t["item"].to_pylist()):
        found.setdefault(u, set()).add(i)
    return found


def test_a_refresh_on_grown_data_starts_warm_and_ends_where_a_cold_one_does(two_days, tmp_path):
    root, added = two_days
    day1, day2 = str(root / "day1" / "shop"), str(root / "day2" / "shop")
    assert main(["refresh", "--dataset", day1, "--out", str(tmp_path / "o"), *ARGS]) == 0
    assert summary(tmp_path / "o")["training_start"]["start"] == "cold"
    assert main(["refresh", "--dataset", day2, "--out", str(tmp_path / "o"), *ARGS]) == 0
    warm = summary(tmp_path / "o")
    start = warm["training_start"]
    assert start["start"] == "warm" and start["rows_added"] == added
    assert (start["users_new"], start["items_new"], start["users_known"], start["items_known"]) == (1, 1, 60, 40)
    assert start["sweeps"] > 0 and start["sweeps_saved"] == start["last_cold_sweeps"] - start["sweeps"]
    assert warm["fidelity_ok"] and warm["model"].endswith("-startwarm.zarr")
    # the same data, cold: the identity holds too, and the recommendations are the same
    assert main(["refresh", "--dataset", day2, "--out", str(tmp_path / "cold"), *ARGS]) == 0
    cold = summary(tmp_path / "cold")
    assert cold["training_start"]["start"] == "cold" and cold["fidelity_ok"]
    a, b = top_n(tmp_path / "o"), top_n(tmp_path / "cold")
    assert sum(a[u] == b[u] for u in a) >= 0.99 * len(a)
    # --cold in the warm run's folder trains cold: it never reuses the warm model
    assert main(["refresh", "--dataset", day2, "--out", str(tmp_path / "o"), *ARGS, "--cold"]) == 0
    again = summary(tmp_path / "o")
    assert again["training_start"]["start"] == "cold" and not again["model"].endswith("-startwarm.zarr")


def test_after_forget_the_next_fit_starts_cold(two_days, tmp_path, caplog):
    root, _ = two_days
    out = str(tmp_path / "o")
    assert main(["refresh", "--dataset", str(root / "day1" / "shop"), "--out", out, *ARGS]) == 0
    assert main(["forget", "--out", out, "--users", "u005"]) == 0
    assert main(["refresh", "--dataset", str(root / "day2" / "shop"), "--out", out, *ARGS]) == 0
    assert summary(out)["training_start"]["start"] == "cold"
    assert "cold start: the last run's model saw ids forgotten since" in caplog.text
