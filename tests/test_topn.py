"""Own top-n: the norm-ordered scan gives the dense reference's items, ties by index, seen items masked."""

import numpy as np
import pytest
from conftest import random_interactions

from dxplain.explain.targets import recommend
from dxplain.kernels import topn
from dxplain.kernels.topn import NormOrder, top_n_unseen, top_n_unseen_pruned


def brute_force(U, V, seen_indptr, seen_items, n):
    """Per user, the n best unseen items by float64 score, ties by item index (a sort per user)."""
    S = U @ V.T
    items = np.full((len(U), n), -1)
    for u in range(len(U)):
        S[u, seen_items[seen_indptr[u] : seen_indptr[u + 1]]] = -np.inf
        best = np.lexsort((np.arange(V.shape[0]), -S[u]))[:n]
        best = best[np.isfinite(S[u, best])]
        items[u, : len(best)] = best
    return items


def random_case(seed, integer):
    """Factors with very uneven item norms (the scan can stop early) or small integers (exact ties in
    every precision), and seen sets from empty to everything (user 0)."""
    rng = np.random.default_rng(seed)
    # k above 8 leaves trailing directions to the bound's norm term (the scan keeps max(8, k/4) whole).
    b, m, k = int(rng.integers(1, 50)), int(rng.integers(1, 2500)), int(rng.integers(1, 40))
    if integer:
        U, V = rng.integers(-2, 3, (b, k)).astype(float), rng.integers(-2, 3, (m, k)).astype(float)
    else:
        U, V = rng.standard_normal((b, k)), rng.standard_normal((m, k)) * rng.random((m, 1)) ** 4
    seen = rng.random((b, m)) < rng.random(b)[:, None]
    seen[0] = True
    ptr = np.concatenate([[0], np.cumsum(seen.sum(axis=1))])
    return U, V, ptr, np.nonzero(seen)[1]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("integer", [False, True])
def test_the_scan_and_the_reference_give_the_brute_force_items(seed, integer, monkeypatch):
    U, V, ptr, items = random_case(seed, integer)
    n = int(np.random.default_rng(seed).integers(1, 15))
    monkeypatch.setattr(topn, "FIRST_ITEM_SLICE", 1 + seed * 37)  # many item slices, of uneven sizes
    expected = brute_force(U, V, ptr, items, n)
    ref_items, ref_scores = top_n_unseen(U, V, ptr, items, n)
    got_items, got_scores = top_n_unseen_pruned(U, NormOrder.of(V), ptr, items, n, budget=700 + 300 * seed)
    np.testing.assert_array_equal(ref_items, expected)
    np.testing.assert_array_equal(got_items, expected)
    assert np.all(got_items[0] == -1) and np.all(got_scores[0] == -np.inf)  # user 0 has seen everything
    np.testing.assert_allclose(got_scores, ref_scores, rtol=1e-5, atol=1e-6)  # float32, slice shapes differ


def test_ties_go_to_the_smaller_item_index():
    # Every item scores the same for every user: the top-n are the n smallest unseen indices.
    U, V = np.ones((3, 2)), np.ones((40, 2))
    ptr, items = np.array([0, 2, 2, 5]), np.array([0, 3, 1, 2, 4])
    got, _ = top_n_unseen_pruned(U, NormOrder.of(V), ptr, items, 4, budget=8)
    np.testing.assert_array_equal(got, [[1, 2, 4, 5], [0, 1, 2, 3], [0, 3, 5, 6]])
    np.testing.assert_array_equal(top_n_unseen(U, V, ptr, items, 4)[0], got)


def test_the_scan_stops_once_no_unscanned_item_can_enter(monkeypatch):
    # Ten items of norm 10 aligned with the user, the rest tiny: after the first slice no other item can
    # beat the tenth score, so the scan scores one slice and stops.
    rng = np.random.default_rng(0)
    V = np.vstack([rng.standard_normal((5000, 4)) * 1e-3, np.tile([10.0, 0, 0, 0], (10, 1))])
    U = np.tile([1.0, 0, 0, 0], (6, 1))
    scored = []
    real_merge = topn._merge
    monkeypatch.setattr(topn, "FIRST_ITEM_SLICE", 64)
    monkeypatch.setattr(
        topn, "_merge", lambda bi, bs, S, ids, n: scored.append(S.shape) or real_merge(bi, bs, S, ids, n)
    )
    got, _ = top_n_unseen_pruned(U, NormOrder.of(V), np.zeros(7, int), np.zeros(0, int), 10, budget=1 << 20)
    np.testing.assert_array_equal(np.sort(got, axis=1), np.tile(np.arange(5000, 5010), (6, 1)))
    assert scored == [(6, 64)]


def test_the_bound_leaves_few_candidates_when_scores_live_in_a_few_directions():
    # Rank-4 scores plus small noise in 60 more directions, as a trained MF model's spectrum: the bound
    # from the leading directions and the residual norms passes few items to exact scoring.
    rng = np.random.default_rng(1)
    scale = np.r_[np.ones(4), np.full(60, 0.02)]
    U, V = rng.standard_normal((300, 64)) * scale, rng.standard_normal((20000, 64)) * scale
    stats = {}
    got, _ = top_n_unseen_pruned(U, NormOrder.of(V), np.zeros(301, int), np.zeros(0, int), 10, 1 << 20, stats)
    np.testing.assert_array_equal(got, top_n_unseen(U, V, np.zeros(301, int), np.zeros(0, int), 10)[0])
    assert stats["block_scores"] + stats["bounds"] <= 300 * 20000
    assert stats["candidates"] < 0.01 * stats["bounds"]


def test_recommend_gives_the_same_targets_by_scan_and_dense():
    d = random_interactions(60, 45, 0.4, seed=3)
    rng = np.random.default_rng(3)
    U, V = rng.standard_normal((60, 5)), rng.standard_normal((45, 5)) * rng.random((45, 1))
    users = np.arange(0, 60, 2)
    a = recommend(U, V, d, users, 7, budget=64, dense=False)
    b = recommend(U, V, d, users, 7, budget=64, dense=True)
    for f in ("user", "item", "rec_rank"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert len(a.user) == sum(min(7, 45 - len(d.item[d.user == u])) for u in users)


@pytest.mark.parametrize("integer", [False, True])
def test_one_users_top_n_from_factor_blocks_equals_recommend(tmp_path, integer):
    """V's blocks each give their top-n unseen, merged here: the same items in the same order as ranking
    every item at once, ties (integer factors) by item index, seen items left out."""
    from dxplain.explain.targets import recommend_from_blocks
    from dxplain.io.row_blocks import Scratch
    from dxplain.mapper import LocalMapper
    from dxplain.models.blocks import Blocks

    rng = np.random.default_rng(3)
    d = random_interactions(20, 90, 0.2, seed=5)
    U, V = rng.normal(size=(20, 4)), rng.normal(size=(90, 4))
    if integer:
        U, V = np.round(U), np.round(V)
    mapper, scratch = LocalMapper(), Scratch(str(tmp_path))
    Ub = Blocks.split(mapper, scratch, U, np.array([0, 7, 20]))
    Vb = Blocks.split(mapper, scratch, V, np.array([0, 13, 40, 41, 90]))
    for user in (0, 6, 19):
        want = recommend(U, V, d, np.array([user]), 12)
        got = recommend_from_blocks(Ub, Vb, d, user, 12)
        np.testing.assert_array_equal(got.item, want.item)
        np.testing.assert_array_equal(got.user, want.user)
        assert not set(got.item) & set(d.item[d.user == user])
