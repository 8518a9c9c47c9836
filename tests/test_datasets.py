import numpy as np
import pytest

from dxplain.config import Settings
from dxplain.datasets import movielens, registry
from dxplain.datasets.synthetic import generate
from dxplain.io.dataset_folders import read_dataset


def test_movielens_both_layouts_agree(ml100k, tmp_path):
    found = {movielens.layout(f): f for f in registry.raw_search_path(Settings.from_env())}
    if len(found) < 2:
        pytest.skip("both the GroupLens and the RecBole copies of ml-100k are needed (../shared/data)")
    a = movielens.prepare(found["grouplens"], tmp_path / "gl").interactions
    b = movielens.prepare(found["recbole"], tmp_path / "rb")
    np.testing.assert_array_equal(a.user, b.interactions.user)
    np.testing.assert_array_equal(a.item, b.interactions.item)
    np.testing.assert_array_equal(a.rating, b.interactions.rating)
    gl = read_dataset(tmp_path / "gl").items
    assert gl.column("title").to_pylist()[:2] == ["Toy Story", "GoldenEye"]
    assert b.items.column("title").to_pylist()[:2] == ["Toy Story", "GoldenEye"]
    assert (
        gl.column("genres").to_pylist()[0]
        == b.items.column("genres").to_pylist()[0]
        == ["Animation", "Children's", "Comedy"]
    )


def test_movielens_content(ml100k):
    d = ml100k.interactions
    assert (len(d), d.n_users, d.n_items) == (100_000, 943, 1682)
    assert set(np.unique(d.rating)) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert ml100k.items.column("year").to_pylist()[0] == 1995
    assert set(ml100k.users.column_names) >= {"id", "age", "gender", "occupation"}


def test_synthetic_is_seeded_valid_and_skewed(tmp_path):
    a = generate(tmp_path / "a", 20_000, seed=3, batch_users=500)
    generate(tmp_path / "b", 20_000, seed=3, batch_users=500)
    da, db = read_dataset(tmp_path / "a").interactions, read_dataset(tmp_path / "b").interactions
    assert da.fingerprint() == db.fingerprint()
    assert 0.9 * 20_000 <= a["interactions"] <= 20_000  # within-user repeats are dropped
    assert set(np.unique(da.rating)) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    deg = np.sort(da.item_degree())[::-1]
    # Zipf items: the top 1% of items hold far more than 1% of the interactions.
    assert deg[: max(1, len(deg) // 100)].sum() > 0.1 * deg.sum()
    generate(tmp_path / "c", 20_000, seed=4, batch_users=500)
    assert read_dataset(tmp_path / "c").interactions.fingerprint() != da.fingerprint()


def test_amazon_kind_has_the_published_shape(tmp_path):
    """Median user degree 2 and mean about 5 (AMAZON), power-law items, and the J-shaped star marginal."""
    from dxplain.datasets.synthetic import AMAZON

    s = generate(tmp_path / "a", 200_000, seed=1, batch_users=20_000, kind="amazon")
    d = read_dataset(tmp_path / "a").interactions
    deg = d.user_degree()
    assert np.median(deg) == AMAZON["user_median"] and 4.0 <= deg.mean() <= 6.5 and deg.max() >= 50
    assert s["users"] == len(deg) and 0.97 * 200_000 <= len(d) <= 200_000  # within-user repeats are dropped
    stars = np.bincount(d.rating.astype(int), minlength=6)[1:] / len(d)
    assert np.allclose(stars, [AMAZON["ratings"][r] for r in range(1, 6)], atol=0.01), stars
    items = np.sort(d.item_degree())[::-1]
    assert items[: max(1, len(items) // 100)].sum() > 0.1 * items.sum() and items[0] < 0.05 * len(d)  # 13k items
    generate(tmp_path / "b", 50_000, seed=1, batch_users=20_000, kind="amazon", implicit=True)
    assert set(np.unique(read_dataset(tmp_path / "b").interactions.rating)) == {1.0}


def test_gammli_kind_is_eq6_with_its_feature_tables(tmp_path):
    """users = items = √(10N), 10% of pairs observed, ratings = eq. 6's f + N(0, 1), features in [0, 1]."""
    import pyarrow.parquet as pq

    from dxplain.errors import InputError
    from dxplain.gammli.synthetic import entities, noiseless

    s = generate(tmp_path / "g", 20_000, seed=2, kind="gammli")
    side = round(np.sqrt(200_000))
    assert (s["users"], s["items"]) == (side, side) and abs(s["interactions"] - 0.1 * side * side) < 0.05 * 20_000
    t = pq.read_table(tmp_path / "g" / "interactions.parquet")
    u, i, y = (t[c].to_numpy() for c in ("user", "item", "rating"))
    assert len(np.unique(u * side + i)) == len(u)
    x = pq.read_table(tmp_path / "g" / "user_features.parquet")
    assert x.column_names == ["user", "x1", "x2", "x3", "x4", "x5"] and x.num_rows == side
    X = np.column_stack([x[f"x{k}"].to_numpy() for k in range(1, 6)])
    assert X.min() == 0.0 and X.max() == 1.0
    f = noiseless(entities(np.random.default_rng(2), side, side), u, i)
    assert 0.95 < np.std(y - f) < 1.05 and abs(np.mean(y - f)) < 0.03  # the N(0, 1) noise, nothing else
    assert pq.read_table(tmp_path / "g" / "item_features.parquet").column_names[0] == "item"
    assert read_dataset(tmp_path / "g").interactions.n_users <= side
    with pytest.raises(InputError, match="--kind gammli"):
        generate(tmp_path / "h", 1000, n_users=10, kind="gammli")
