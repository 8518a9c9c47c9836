"""The latent training-data identity on ml-100k with its features, at the fitted optimum."""

from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from dxplain.gammli.fit import Config, fit_gammli
from dxplain.gammli.model import index_pairs
from dxplain.io.features import features_from_table, movielens_feature_tables

pytestmark = pytest.mark.slow  # one ml-100k fit: ~25 s on this machine

SRC = Path(__file__).resolve().parents[2] / "shared" / "data" / "ml-100k-grouplens"


@pytest.fixture(scope="module")
def model():
    if not (SRC / "u.user").exists():
        pytest.skip(f"ml-100k in GroupLens layout not found at {SRC}")
    users_t, items_t, ratings = movielens_feature_tables(SRC)
    users, items = features_from_table(users_t, "user"), features_from_table(items_t, "item")
    u, i = index_pairs(users, items, ratings.column("user").combine_chunks(), ratings.column("item").combine_chunks())
    with threadpool_limits(1, user_api="blas"):
        # (K, L, λ) given: the grid is one point; the identity is about the optimum, not the choice.
        m = fit_gammli(
            users,
            items,
            u,
            i,
            ratings.column("rating").to_numpy(),
            Config(K=8, L=6, lam=20.0, rank=4, max_pairs=2),
            log=lambda *_: None,
        )
    return m, u, i


def test_cluster_prior_plus_attributions_is_the_latent_score(model):
    m, u, i = model
    rng = np.random.default_rng(0)
    pick = rng.choice(len(u), 300, replace=False)
    cold_u = np.flatnonzero(~m.seen_u)  # every user is rated in ml-100k; items too
    uu, ii = (
        np.concatenate([u[pick], rng.integers(0, len(m.U), 50)]),
        np.concatenate([i[pick], rng.integers(0, len(m.V), 50)]),
    )
    s, top = m.latent_attributions(uu, ii, top_k=5)
    scale = np.abs(s["latent"]).max()
    assert scale > 0 and len(cold_u) == 0
    for side in ("user", "item"):
        rel = np.abs(s[f"{side}_prior"] + s[f"{side}_attributions"] - s["latent"]).max() / scale
        assert rel < 1e-6, (side, rel)
    # the attributions are spread over the ratings, not a relabelled prior
    assert np.abs(s["user_attributions"]).mean() > 1e-3 * scale


def test_each_main_effect_is_centred_and_the_decomposition_is_exact(model):
    m, u, i = model
    names, C = m.decompose(u, i)
    assert np.abs(C.sum(1) - m.predict(u, i)).max() < 1e-9
    mains = [k for k, n in enumerate(names) if n.startswith(("user:", "item:")) and " x " not in n]
    assert mains and np.abs(C[:, mains].mean(0)).max() < 1e-9
