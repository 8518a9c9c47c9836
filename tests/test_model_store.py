import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import random_interactions

from dxplain.errors import InputError
from dxplain.io import model_store
from dxplain.models.als.trainer import ALSMF
from dxplain.models.base import FactorModel


def test_save_load_roundtrip_with_attributes(tmp_path, small):
    m = ALSMF(k=3, lam=1e-2).fit(small)
    path = m.save(tmp_path / "m.zarr", small)
    back = FactorModel.load(path, small)
    np.testing.assert_array_equal(back.U, m.U)
    np.testing.assert_array_equal(back.V, m.V)
    attrs = model_store.model_attrs(path)
    for key in (
        "kind",
        "loss",
        "lam",
        "k",
        "n_train",
        "objective_scaling",
        "fingerprint",
        "dxplain_version",
        "grad_norm",
        "mu",
    ):
        assert key in attrs
    assert attrs["n_train"] == len(small) and attrs["lam"] == 1e-2 and attrs["k"] == 3


def test_model_of_other_data_is_refused(tmp_path, small):
    m = ALSMF(k=3, lam=1e-2).fit(small)
    path = m.save(tmp_path / "m.zarr", small)
    with pytest.raises(InputError, match="fitted on other data"):
        FactorModel.load(path, random_interactions(seed=99))


def _export(tmp_path, small, k=4, drop_user=False):
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(small.n_users, k)), rng.normal(size=(small.n_items, k))
    perm = rng.permutation(small.n_users)  # embeddings arrive in another order than the dataset's
    uids = np.array(small.user_ids.to_pylist())[perm]
    if drop_user:
        perm, uids = perm[1:], uids[1:]
    np.save(tmp_path / "U.npy", U[perm])
    (tmp_path / "uids.txt").write_text("\n".join(uids))
    pq.write_table(pa.table({"id": small.item_ids, "embedding": list(V)}), tmp_path / "V.parquet")
    return U, V


def test_import_embeddings_aligns_ids(tmp_path, small):
    U, V = _export(tmp_path, small)
    out = model_store.import_embeddings(
        tmp_path / "imp.zarr", small, tmp_path / "U.npy", tmp_path / "V.parquet", user_ids=tmp_path / "uids.txt"
    )
    m = FactorModel.load(out, small)
    np.testing.assert_allclose(m.U, U)
    np.testing.assert_allclose(m.V, V)
    assert m.lam is None and m.kind == "imported"


@pytest.mark.parametrize(
    "problem,message",
    [
        ("missing ids", "have no embedding"),
        ("row count", "factor rows but"),
        ("k mismatch", "same embedding size"),
        ("no id list", "need their id list"),
    ],
)
def test_import_embeddings_errors(tmp_path, small, problem, message):
    _export(tmp_path, small, drop_user=(problem == "missing ids"))
    if problem == "row count":
        (tmp_path / "uids.txt").write_text("\n".join(small.user_ids.to_pylist()[:-2]))
    if problem == "k mismatch":
        np.save(tmp_path / "U.npy", np.zeros((small.n_users, 2)))
    ids = None if problem == "no id list" else tmp_path / "uids.txt"
    with pytest.raises(InputError, match=message):
        model_store.import_embeddings(
            tmp_path / "imp.zarr", small, tmp_path / "U.npy", tmp_path / "V.parquet", user_ids=ids
        )
    assert not (tmp_path / "imp.zarr").exists()


def test_pickled_npy_is_refused(tmp_path, small):
    np.save(tmp_path / "U.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError):
        model_store.read_factor_file(tmp_path / "U.npy", None)


@pytest.mark.parametrize("kind", ["str", "int"])
def test_stored_ids_are_compared_a_slice_at_a_time(tmp_path, small, monkeypatch, kind):
    """The reload's id check reads the store a slice at a time: a difference in any slice, or a length
    differing, is found; the same ids pass."""
    import zarr

    monkeypatch.setattr(model_store, "IDS_SLICE", 3)
    ids = pa.array([f"u{n}" for n in range(10)]) if kind == "str" else pa.array(np.arange(10) * 7)
    g = zarr.open_group(str(tmp_path / "ids.zarr"), mode="w")
    g.create_array("ids", data=model_store._ids_to_zarr(ids))
    assert model_store._same_ids(g["ids"], ids)
    assert model_store._same_ids(g["ids"], pa.chunked_array([ids.slice(0, 4), ids.slice(4)]))
    changed = pa.concat_arrays([ids.slice(0, 9), (pa.array(["zz"]) if kind == "str" else pa.array([-1]))])
    assert not model_store._same_ids(g["ids"], changed)
    assert not model_store._same_ids(g["ids"], ids.slice(0, 9))
