"""``dxplain forget``: after it, a refresh into the same --out holds no trace of the forgotten ids."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import interactions_table, random_interactions

from dxplain.cli import main
from dxplain.forgotten import Forgotten
from dxplain.io import runs
from dxplain.io.dataset_folders import write_dataset
from dxplain.io.model_store import read_model_ids

pytestmark = pytest.mark.usefixtures("prefect_server")

ARGS = ["--k", "4", "--in-memory", "--top-n", "5", "--top-k", "0"]


def table_with_a_private_item():
    """Random ratings plus an item only u003 rated: forgetting u003 leaves that item without a row."""
    t = interactions_table(random_interactions(50, 30, 0.25, seed=6))
    only = pa.table({"user": ["u003"], "item": ["i_only_u003"], "rating": [5.0]})
    return pa.concat_tables([t, only])


def strings_in(folder) -> set[str]:
    """Every string value in every Parquet file under ``folder`` and every JSON file's text tokens."""
    found = set()
    for f in Path(folder).rglob("*"):
        if f.suffix == ".parquet":
            t = pq.read_table(f)
            for c in t.columns:
                if pa.types.is_dictionary(c.type):
                    c = pc.cast(c, c.type.value_type)
                if pa.types.is_string(c.type) or pa.types.is_large_string(c.type):
                    found |= set(c.drop_null().to_pylist())
        elif f.suffix == ".json":
            found |= {str(x) for x in json.dumps(json.loads(f.read_text())).replace('"', " ").split()}
    return found


@pytest.mark.parametrize("layout", ["prepared", "file"])
def test_after_forget_no_file_of_the_new_run_names_the_forgotten_ids(tmp_path, layout, capsys):
    table = table_with_a_private_item()
    if layout == "prepared":  # scanned by tasks
        dataset = tmp_path / "shop"
        write_dataset(dataset, table)
    else:  # a bare Parquet file, loaded whole
        dataset = tmp_path / "shop.parquet"
        pq.write_table(table, dataset)
    out = tmp_path / "out"
    assert main(["refresh", "--dataset", str(dataset), "--out", str(out), *ARGS]) == 0
    first = Path(runs.resolve_run(out))
    assert {"u003", "i007", "i_only_u003"} <= strings_in(first)  # the ids are there before
    capsys.readouterr()

    assert main(["forget", "--out", str(out), "--users", "u003", "--items", "i007"]) == 0
    printed = capsys.readouterr().out
    assert "1 user(s) and 1 item(s) added" in printed and first.name in printed  # the older run is listed
    assert main(["refresh", "--dataset", str(dataset), "--out", str(out), *ARGS]) == 0
    second = Path(runs.resolve_run(out))
    assert second != first
    left = strings_in(second)
    assert not {"u003", "i007", "i_only_u003"} & left and "u004" in left
    s = runs.read_manifest(second)["summary"]
    named = pc.or_(pc.equal(table["user"], "u003"), pc.equal(table["item"], "i007"))
    assert s["forgotten_rows_dropped"] == pc.sum(named).as_py() > 0
    assert s["training_start"]["start"] == "cold"  # not from the first run's model, which saw them
    # nor the part store and the model the new run was explained with (the dataset itself still holds them)
    stores = [s for s in json.loads((second / "_meta" / "stores.json").read_text()) if s.startswith(str(out))]
    assert len(stores) == 2
    for store in stores:
        assert not {"u003", "i007", "i_only_u003"} & strings_in(store)
    model_ids = read_model_ids(s["model"])
    assert not {"u003", "i007", "i_only_u003"} & set(model_ids[0].to_pylist() + model_ids[1].to_pylist())


def test_forget_needs_ids_and_lists_nothing_without_runs(tmp_path, capsys):
    assert main(["forget", "--out", str(tmp_path / "o")]) == 2
    assert "nothing to forget" in capsys.readouterr().err
    assert main(["forget", "--out", str(tmp_path / "o"), "--users", "a,,b"]) == 2
    assert "an empty id" in capsys.readouterr().err
    assert main(["forget", "--out", str(tmp_path / "o"), "--users", "7,a"]) == 0
    assert main(["forget", "--out", str(tmp_path / "o"), "--users", "a", "--items", "x"]) == 0
    assert "0 user(s) and 1 item(s) added (2 and 1 forgotten in all)" in capsys.readouterr().out


def test_forgotten_ids_match_integer_ids_and_leave_emptied_ids_out():
    data = random_interactions(6, 5, 0.6, seed=1, string_ids=False)  # user ids 0, 7, 14, …
    f = Forgotten.of(["7"], [])
    kept, dropped = f.drop_from(data)
    assert dropped == int((data.user == 1).sum()) > 0
    assert 7 not in kept.user_ids.to_pylist() and kept.n_users == data.n_users - 1
    assert len(kept) == len(data) - dropped
