"""``dxplain serve``: the JSON API over a real refresh run equals the run's rows; unknown names are 404s, paths from
requests never leave the out folder, a token is enforced, a non-loopback bind is warned about."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import interactions_table, random_interactions
from starlette.testclient import TestClient

from dxplain.cli import main
from dxplain.io import run_lookup, runs
from dxplain.io.dataset_folders import write_dataset
from dxplain.web.app import create_app

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    from dxplain.flows.refresh import refresh

    folder = tmp_path_factory.mktemp("data") / "small"
    out = tmp_path_factory.mktemp("out")
    # two runs: the older explains less; the newer one's data (rewritten in place, as a nightly export would) has
    # other ratings, so some users' recommendations change
    for top_k, seed in ((2, 4), (0, 5)):
        data = random_interactions(40, 30, 0.3, seed=seed)
        users = pa.table({"id": data.user_ids, "name": [f"Person {i:02d}" for i in range(data.n_users)]})
        items = pa.table({"id": data.item_ids, "title": [f"Film number {i:02d}" for i in range(data.n_items)]})
        write_dataset(folder, interactions_table(data), user_features=users, item_features=items)
        refresh(dataset=str(folder), out=str(out), k=3, top_n=3, top_k=top_k, shards=3, in_memory=True)
    return out


@pytest.fixture(scope="module")
def client(out):
    return TestClient(create_app(str(out)))


def test_runs_are_listed_newest_first_with_the_latest_marked(client, out):
    listed = client.get("/api/runs").json()
    assert len(listed) == 2 and listed[0]["id"] > listed[1]["id"]
    assert [r["latest"] for r in listed] == [True, False]
    assert runs.resolve_run(out).name == listed[0]["id"]


def test_a_users_targets_and_reasons_are_every_row_the_run_kept(client, out):
    rows = runs.open_run(runs.resolve_run(out)).to_table()
    user = rows.column("user")[0].as_py()
    got = client.get(f"/api/runs/latest/users/{user}").json()
    mine = rows.filter(pc.equal(rows.column("user"), user))
    assert got["user"] == user
    assert sorted(t["item"] for t in got["targets"]) == sorted(set(mine.column("item").to_pylist()))
    for t in got["targets"]:
        want = mine.filter(pc.equal(mine.column("item"), t["item"]))
        assert len(t["reasons"]) == want.num_rows  # top_k 0: every training row and the bias rows
        np.testing.assert_allclose(sorted(r["importance"] for r in t["reasons"]), np.sort(want["importance"]))
        assert {r["side"] for r in t["reasons"]} == {"item", "user"}
        assert t["score"] == pytest.approx(want.column("score")[0].as_py())
        assert sum(r["importance"] for r in t["reasons"] if r["side"] == "item") == pytest.approx(t["score"], rel=1e-4)
    ranks = [t["rec_rank"] for t in got["targets"]]
    assert ranks == sorted(ranks) == [1, 2, 3]
    # the older run by its id, and a search by prefix
    older = client.get("/api/runs").json()[1]["id"]
    assert client.get(f"/api/runs/{older}/users/{user}").status_code == 200
    assert user in client.get(f"/api/runs/latest/users?q={user[:2]}").json()


def catalogue_of(out) -> tuple[dict, dict]:
    """The fixture dataset's user names and item titles by id."""
    from dxplain.datasets.registry import resolve_catalogue

    users, items = resolve_catalogue(runs.read_manifest(runs.resolve_run(out))["summary"]["dataset"])
    return dict(zip(users["id"].to_pylist(), users["name"].to_pylist())), dict(
        zip(items["id"].to_pylist(), items["title"].to_pylist())
    )


def test_targets_and_reasons_carry_the_datasets_titles_and_names(client, out):
    names, titles = catalogue_of(out)
    rows = runs.open_run(runs.resolve_run(out)).to_table()
    user = rows.column("user")[0].as_py()
    got = client.get(f"/api/runs/latest/users/{user}").json()
    assert got["info"] == {"name": names[user]}
    seen = 0
    for t in got["targets"]:
        assert t["info"] == {"title": titles[t["item"]]}
        for r in t["reasons"]:
            if r["kind"] == "interaction":
                side = r["side"]
                want = {"title": titles[r["train_item"]]} if side == "item" else {"name": names[r["train_user"]]}
                assert r[f"train_{side}_info"] == want
                seen += 1
            else:  # a bias row stands for no one training row
                assert "train_item_info" not in r and "train_user_info" not in r
    assert seen > 0


def test_a_search_finds_items_by_title_and_users_by_name(client, out):
    names, titles = catalogue_of(out)
    assert len(client.get("/api/runs/latest/items?q=film").json()) == 20  # every title, any case; the limit
    found = client.get("/api/runs/latest/items?q=NUMBER 07").json()
    assert [(f["id"], f["title"]) for f in found] == [(i, t) for i, t in titles.items() if t == "Film number 07"]
    users = client.get("/api/runs/latest/users?q=person 1").json()
    assert users and all(names[u].startswith("Person 1") for u in users)
    assert client.get("/api/runs/latest/items?q=no such film").json() == []


def test_a_catalogue_finds_ids_of_any_order_and_tells_nothing_without_columns():
    items = pa.table({"id": [30, 10, 20], "title": ["c", "a", "b"]})
    cat = run_lookup.Catalogue(pa.table({"id": ["u2", "u1"]}), items)
    assert cat.info("item", [20, 99, 30, 10]) == [{"title": "b"}, None, {"title": "c"}, {"title": "a"}]
    assert cat.info("user", ["u1", "u9"]) == [None, None]  # a users table of ids only
    assert cat.info("item", ["not a number"]) == [None]
    assert [r["id"] for r in cat.search("item", "B")] == [20] and cat.search("user", "u1") == [{"id": "u1"}]


def test_the_users_an_item_is_explained_for_are_the_runs_targets_of_it(client, out):
    rows = runs.open_run(runs.resolve_run(out)).to_table(columns=["user", "item", "rec_rank"])
    item = max(pc.value_counts(rows["item"]).to_pylist(), key=lambda c: c["counts"])["values"]
    got = client.get(f"/api/runs/latest/items/{item}/users").json()
    want = set(rows.filter(pc.equal(rows["item"], item))["user"].to_pylist())
    assert got["item"] == item and got["total"] == len(want) == len(got["users"])
    assert {u["user"] for u in got["users"]} == want
    ranks = [u["rec_rank"] for u in got["users"]]
    assert ranks == sorted(ranks)
    assert client.get("/api/runs/latest/items/no-such-item/users").status_code == 404


def test_a_users_changes_are_the_difference_of_the_two_runs_targets(client, out):
    newer, older = (r["id"] for r in client.get("/api/runs").json())
    before, after = (runs.read_meta_table(out / "runs" / r, runs.TARGETS) for r in (older, newer))
    changed = 0
    for user in sorted(set(after["user"].to_pylist())):
        got = client.get(f"/api/runs/latest/users/{user}/changes").json()
        assert got["from"] == older and got["run"] == newer
        a = set(after.filter(pc.equal(after["user"], user))["item"].to_pylist())
        b = set(before.filter(pc.equal(before["user"], user))["item"].to_pylist())
        assert {x["item"] for x in got["entered"]} == a - b
        assert {x["item"] for x in got["left"]} == b - a
        assert all(x["info"]["title"].startswith("Film") for x in got["entered"] + got["left"])
        changed += bool(a != b)
    assert changed > 0  # the two models differ: the comparison is not vacuous
    first = client.get(f"/api/runs/{older}/users/{user}/changes").json()
    assert first["from"] is None and first["entered"] is None  # the first run has nothing to compare with


def test_a_lookup_reads_the_shards_index_and_an_unindexed_run_is_scanned(out):
    run = runs.resolve_run(out)
    indexed = run_lookup.UserIndex(run)
    for p in (run / "_meta").glob("users-*.parquet"):
        p.unlink()  # as a run written before the index existed
    scanned = run_lookup.UserIndex(run)
    key = ["user", "row_group", "file"]
    assert indexed.table.sort_by([(c, "ascending") for c in key]).equals(
        scanned.table.select(key).sort_by([(c, "ascending") for c in key])
    )
    user = indexed.table.column("user")[0].as_py()
    assert indexed.rows(user).equals(scanned.rows(user))


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/no-such-run/users/u1",
        "/api/runs/latest/users/nobody",
        "/api/runs/..%2F..%2Fetc/users/u1",
        "/api/runs/%2Fetc%2Fpasswd/summary",
        "/api/runs/../LATEST/users/u1",
        "/static/..%2F..%2Fapp.py",
        "/static/app.py",
    ],
)
def test_unknown_names_and_paths_out_of_the_folder_are_404s_with_a_message(client, path):
    r = client.get(path)
    assert r.status_code == 404
    if path.startswith("/api/runs/") and r.headers["content-type"] == "application/json":
        assert r.json()["error"]


def test_the_page_and_its_assets_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/static/app.js">' in page.text
    assert "fetch(" in client.get("/static/app.js").text


def test_a_token_is_required_on_the_api_when_given(out):
    c = TestClient(create_app(str(out), token="s3cret"))
    assert c.get("/api/runs").status_code == 401
    assert c.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.get("/api/runs?token=s3cret").status_code == 200
    assert c.get("/").status_code == 200  # the page holds no data


def test_the_cli_warns_on_a_non_loopback_bind_and_refuses_a_folder_without_runs(out, tmp_path, capsys, monkeypatch):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(kw))
    assert main(["serve", str(out)]) == 0
    assert served[-1]["host"] == "127.0.0.1" and "warning" not in capsys.readouterr().err
    assert main(["serve", str(out), "--host", "0.0.0.0", "--port", "9000"]) == 0
    assert served[-1] == {"host": "0.0.0.0", "port": 9000, "log_level": "warning"}
    assert "warning: serving on 0.0.0.0" in capsys.readouterr().err
    assert main(["serve", str(tmp_path)]) == 2
    assert "no runs folder" in capsys.readouterr().err
    assert main(["serve", str(out), "--port", "0"]) == 2
