"""Every bad input stops with a message naming the problem, and nothing is written."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import interactions_table

from dxplain.cli import main
from dxplain.errors import InputError
from dxplain.io.dataset_folders import read_dataset, write_dataset
from dxplain.io.tables import read_table
from dxplain.io.targets import read_targets


def _good():
    return pa.table({"user": ["a", "a", "b", "c"], "item": [1, 2, 1, 3], "rating": [4.0, 3.0, 5.0, 1.0]})


BAD = {
    "missing column": (pa.table({"user": ["a"], "item": [1], "score": [4.0]}), "missing column(s) ['rating']"),
    "empty table": (_good().slice(0, 0), "no rows"),
    "nan rating": (_good().set_column(2, "rating", pa.array([4.0, np.nan, 5.0, 1.0])), "NaN or infinite"),
    "inf rating": (_good().set_column(2, "rating", pa.array([4.0, 3.0, np.inf, 1.0])), "NaN or infinite"),
    "duplicate pair": (
        pa.table({"user": ["a", "a"], "item": [1, 1], "rating": [4.0, 2.0]}),
        "duplicate (user, item) pair",
    ),
    "null id": (pa.table({"user": ["a", None], "item": [1, 2], "rating": [4.0, 2.0]}), "no user id"),
    "text rating": (pa.table({"user": ["a"], "item": [1], "rating": ["good"]}), "ratings must be numbers"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_interactions_are_rejected_and_nothing_is_written(tmp_path, case):
    table, message = BAD[case]
    out = tmp_path / "ds"
    with pytest.raises(
        InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")
    ):
        write_dataset(out, table)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary left behind either


def test_cli_import_reports_the_problem_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "in.parquet"
    pq.write_table(BAD["duplicate pair"][0], src)
    assert main(["datasets", "import", str(src), "--out", str(tmp_path / "ds")]) == 2
    assert "duplicate (user, item) pair" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(
    "content,message",
    [
        ("", "the file is empty"),
        ("user,item,rating\n", "no rows"),
        ("reviewer,asin,overall\na,1,5\n", "missing column(s) ['user', 'item', 'rating']"),
        (
            "user_id:token,item_id:token,rating:float\n1,2,5\n",  # RecBole's names: a mapping from its columns
            "--columns user=user_id:token,item=item_id:token,rating=rating:float",
        ),
        ("a,b,c\n1,2,5\n", "--columns user=reviewerID,item=asin,rating=overall"),  # nothing to go by: the example
        ("user,item,rating\na,1,nan\n", "NaN or infinite"),
    ],
)
def test_cli_import_of_bad_csv_writes_nothing(tmp_path, capsys, content, message):
    f = tmp_path / "in.csv"
    f.write_text(content)
    assert main(["datasets", "import", str(f), "--out", str(tmp_path / "ds")]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_column_mapping_and_roundtrip(tmp_path, small):
    t = interactions_table(small).rename_columns(["reviewerID", "asin", "overall"])
    src = tmp_path / "reviews.csv"
    import pyarrow.csv as pacsv

    pacsv.write_csv(t, src)
    with pytest.raises(InputError, match="lacks"):
        read_table(src, {"user": "reviewer", "item": "asin", "rating": "overall"})
    ds = write_dataset(tmp_path / "ds", read_table(src, {"user": "reviewerID", "item": "asin", "rating": "overall"}))
    again = read_dataset(tmp_path / "ds")
    np.testing.assert_array_equal(again.interactions.user, small.user)
    np.testing.assert_array_equal(again.interactions.rating, small.rating)
    assert again.interactions.user_ids.to_pylist() == small.user_ids.to_pylist()
    assert ds.interactions.fingerprint() == again.interactions.fingerprint()


def test_unknown_ids_in_targets(tmp_path, small):
    f = tmp_path / "targets.parquet"
    pq.write_table(pa.table({"user": ["u000", "nobody"], "item": ["i001", "i002"]}), f)
    with pytest.raises(InputError, match=r"user\(s\) unknown to the dataset, e.g. \['nobody'\]"):
        read_targets(f, small)
    pq.write_table(pa.table({"user": ["u000", "nobody"], "item": ["nothing", "i002"]}), f)  # both sides at once
    with pytest.raises(InputError, match=r"e.g. \['nobody'\].*; and 1 row\(s\) name item\(s\) .* e.g. \['nothing'\]"):
        read_targets(f, small)
    pq.write_table(pa.table({"user": ["u000", "u000"], "item": ["i001", "i001"]}), f)
    with pytest.raises(InputError, match="repeats"):
        read_targets(f, small)
    pq.write_table(pa.table({"user": ["u000", "u001"], "item": ["i001", "i002"]}), f)
    t, skipped = read_targets(f, small)
    assert t.user.tolist() == [0, 1] and t.item.tolist() == [1, 2] and skipped == 0
    pairs = {"user": ["u000", "nobody", "u001", "u002"], "item": ["i001", "i002", "nothing", "i003"]}
    pq.write_table(pa.table(pairs), f)
    with pytest.raises(InputError, match="pass --skip-unseen to drop their pairs"):
        read_targets(f, small, skip_unseen=False)
    t, skipped = read_targets(f, small, skip_unseen=True)  # new users and items since the training data
    assert t.user.tolist() == [0, 2] and t.item.tolist() == [1, 3] and skipped == 2
    pq.write_table(pa.table({"user": ["nobody"], "item": ["i001"]}), f)
    with pytest.raises(InputError, match="every target names a user or item the training data lacks"):
        read_targets(f, small, skip_unseen=True)


def test_a_movielens_1m_folder_imports_with_titles_genres_and_users(tmp_path, capsys):
    raw = tmp_path / "ml-1m"
    raw.mkdir()
    (raw / "ratings.dat").write_text("1::10::5::978300760\n1::20::3::978302109\n2::10::4::978301968\n")
    (raw / "movies.dat").write_bytes(
        "10::Amélie (2001)::Comedy|Romance\n20::Heat (1995)::Action|Crime|Thriller\n".encode("latin-1")
    )
    (raw / "users.dat").write_text("1::F::1::10::48067\n2::M::56::16::70072\n")
    out = tmp_path / "ds"
    assert main(["datasets", "import", str(raw), "--out", str(out)]) == 0
    ds = read_dataset(out)
    assert ds.items.column("title").to_pylist() == ["Amélie", "Heat"] and ds.items.column("year").to_pylist() == [
        2001,
        1995,
    ]
    assert ds.items.column("genres").to_pylist() == [["Comedy", "Romance"], ["Action", "Crime", "Thriller"]]
    assert ds.users.column("occupation").to_pylist() == [10, 16] and len(ds.interactions) == 3


def test_feature_tables_ride_along_with_an_imported_file(tmp_path):
    pq.write_table(_good(), tmp_path / "r.parquet")
    pq.write_table(
        pa.table({"id": [3, 1, 2], "title": ["C", "A", "B"], "genres": ["x|y", "x", "z"]}), tmp_path / "i.parquet"
    )
    assert (
        main(
            [
                "datasets",
                "import",
                str(tmp_path / "r.parquet"),
                "--items",
                str(tmp_path / "i.parquet"),
                "--out",
                str(tmp_path / "ds"),
            ]
        )
        == 0
    )
    items = read_dataset(tmp_path / "ds").items
    assert items.column("id").to_pylist() == [1, 2, 3] and items.column("title").to_pylist() == ["A", "B", "C"]
    assert items.column("genres").to_pylist() == [["x"], ["z"], ["x", "y"]]


@pytest.mark.parametrize(
    "argv",
    [
        ["datasets", "import", "{src}", "--out", "{out}"],
        ["train", "--dataset", "{src}", "--out", "{out}", "--k", "2"],
        [
            "import-embeddings",
            "--dataset",
            "{src}",
            "--user-factors",
            "u.npy",
            "--item-factors",
            "v.npy",
            "--out",
            "{out}",
        ],
    ],
)
def test_an_existing_out_is_replaced_only_with_force(argv, tmp_path, capsys):
    src, out = tmp_path / "r.parquet", tmp_path / "existing"
    pq.write_table(_good(), src)
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = [a.format(src=src, out=out) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "already exists; pass --force" in err and (out / "keep.txt").read_text() == "mine"
    if argv[0] == "datasets":
        assert main(args + ["--force"]) == 0 and read_dataset(out).interactions.n_users == 3


def test_rows_are_sorted_by_user_and_item_with_their_rating_and_timestamp():
    from dxplain.io.validation import interactions_from_table

    table = pa.table(
        {
            "user": ["b", "a", "b", "a"],
            "item": [2, 3, 1, 1],
            "rating": [1.0, 2.0, 3.0, 4.0],
            "timestamp": [10, 20, 30, 40],
        }
    )
    d, user_ids, item_ids = interactions_from_table(table)
    assert user_ids.to_pylist() == ["a", "b"] and item_ids.to_pylist() == [1, 2, 3]
    assert list(zip(d.user.tolist(), d.item.tolist(), d.rating.tolist(), d.timestamp.tolist())) == [
        (0, 0, 4.0, 40),
        (0, 2, 2.0, 20),
        (1, 0, 3.0, 30),
        (1, 1, 1.0, 10),
    ]


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("order", ["sorted", "unsorted"])
def test_ids_are_found_in_a_vocabulary_looked_up_a_slice_at_a_time(monkeypatch, chunked, order):
    """A sorted vocabulary is searched; any other is hashed, a few ids against a large one a slice of it
    at a time (the flow's memory at 10M ids): the same positions, and an unknown id named, every way."""
    import pyarrow as pa

    from dxplain import vocabulary as vocabulary_module
    from dxplain.errors import InputError
    from dxplain.io.validation import index_of

    if chunked:
        monkeypatch.setattr(vocabulary_module, "VALUE_SET_CHUNK", 3)
    names = [f"u{n:03d}" for n in range(10)]
    if order == "unsorted":  # position n holds u(9 − n)
        names = names[::-1]
    vocabulary = pa.array(names)
    ids = pa.chunked_array([["u007", "u000"], ["u009", "u003", "u007"]])
    want = np.array([7, 0, 9, 3, 7]) if order == "sorted" else 9 - np.array([7, 0, 9, 3, 7])
    np.testing.assert_array_equal(index_of(ids, vocabulary, "user", "t.csv"), want)
    with pytest.raises(InputError, match="u404"):
        index_of(pa.array(["u001", "u404"]), vocabulary, "user", "t.csv")


@pytest.mark.parametrize("kind", ["int", "string"])
def test_a_sorted_vocabulary_is_searched_with_what_hashing_finds(kind):
    """The binary search gives pc.index_in's positions: ids longer or shorter than every key, prefixes of
    keys, a trailing NUL (equal to its prefix as a fixed-width key), unknown ids, a sliced array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from dxplain.vocabulary import Vocabulary

    rng = np.random.default_rng(5)
    if kind == "int":
        vocabulary = pa.array(np.unique(rng.integers(-(10**12), 10**12, 500)))
        ids = pa.array(
            np.concatenate(
                [rng.choice(vocabulary.to_numpy(), 300), rng.integers(-(10**12), 10**12, 50), [-(10**13), 10**13]]
            )
        )
    else:
        words = sorted({"".join(rng.choice(list("abc"), rng.integers(1, 6))) for _ in range(400)})
        vocabulary = pa.array(words)
        ids = pa.array(
            [
                *rng.choice(words, 300).tolist(),
                "abcabcabc",
                "",
                "ab\x00",
                "a\x00",
                "zz",
                *("".join(rng.choice(list("abcd"), rng.integers(1, 7))) for _ in range(80)),
            ]
        ).slice(1)
    expected = pc.fill_null(pc.index_in(ids, value_set=vocabulary), -1).to_numpy(zero_copy_only=False)
    assert Vocabulary(vocabulary).searched(ids) is not None  # the search path, not the hash
    np.testing.assert_array_equal(Vocabulary(vocabulary).positions(ids), expected)
    assert (expected >= 0).sum() > 250 and (expected < 0).sum() > 10


def test_the_catalogue_ids_are_its_id_columns_alone_and_a_bad_table_is_named(tmp_path, monkeypatch):
    """Loading reads only the id column of users.parquet and items.parquet, as one array however many row
    groups the file has; a folder without one of them, or with one that has no ids or is not Parquet, is
    refused by name with the fix."""
    from dxplain.io.dataset_folders import read_catalogue, read_catalogue_ids

    ds = tmp_path / "ds"
    write_dataset(
        ds, pa.table({"user": [f"u{n:03d}" for n in range(300)], "item": np.arange(300) % 7, "rating": np.ones(300)})
    )
    users = pq.read_table(ds / "users.parquet")
    users = users.append_column("title", pa.array([f"title {n}" for n in range(users.num_rows)]))
    pq.write_table(users, ds / "users.parquet", row_group_size=64)  # five row groups: five chunks read
    whole_users, whole_items = read_catalogue(ds)
    asked = []
    read = pq.ParquetFile.read
    monkeypatch.setattr(
        pq.ParquetFile,
        "read",
        lambda self, columns=None, **kw: asked.append(columns) or read(self, columns=columns, **kw),
    )
    user_ids, item_ids = read_catalogue_ids(ds)
    assert asked == [["id"], ["id"]]
    assert isinstance(user_ids, pa.Array) and isinstance(item_ids, pa.Array)
    assert user_ids.equals(whole_users.column("id").combine_chunks()) and len(user_ids) == 300
    assert item_ids.equals(whole_items.column("id").combine_chunks()) and len(item_ids) == 7
    pq.write_table(users.drop_columns(["id"]), ds / "users.parquet")
    with pytest.raises(InputError, match=r"users.parquet: needs a column 'id'; found \['title'\]; re-create"):
        read_catalogue_ids(ds)
    (ds / "users.parquet").write_text("user,title\n")
    with pytest.raises(InputError, match="users.parquet: cannot be read as Parquet .*; re-create"):
        read_catalogue_ids(ds)
    (ds / "items.parquet").unlink()
    (ds / "users.parquet").unlink()
    with pytest.raises(InputError, match="users.parquet: no such file; re-create"):
        read_catalogue_ids(ds)


def test_a_vocabulary_makes_its_search_keys_once_and_is_sent_without_them():
    """Many lookups against one ``Vocabulary`` (a task's chunks against the broadcast id list) make its
    search keys once; pickled (sent to a worker), it is its ids alone, and finds the same positions."""
    import pickle

    from dxplain.vocabulary import Vocabulary

    vocabulary = Vocabulary(pa.array([f"u{n:03d}" for n in range(50)]))
    assert vocabulary.index_of(pa.array(["u007", "u001"]), "user", "t.csv").tolist() == [7, 1]
    keys = vocabulary.search_keys
    assert keys is not None
    assert vocabulary.index_of(pa.chunked_array([["u049"], ["u000"]]), "user", "t.csv").tolist() == [49, 0]
    assert vocabulary.search_keys is keys
    sent = pickle.loads(pickle.dumps(vocabulary))
    assert "search_keys" not in vars(sent) and sent.ids.equals(vocabulary.ids)
    assert sent.index_of(pa.array(["u007"]), "user", "t.csv").tolist() == [7]
    with pytest.raises(InputError, match=r"1 row\(s\) name user\(s\) unknown to the dataset, e.g. \['u404'\]"):
        sent.index_of(pa.array(["u404"]), "user", "t.csv")
