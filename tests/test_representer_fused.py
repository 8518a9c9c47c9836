"""The fused (numba) score-and-select kernel against the numpy reference path of ``grouped_attributions``."""

import numpy as np
import pytest

from dxplain.kernels import representer as K


def random_groups(rng, n_groups: int, max_d: int, max_t: int, n_rows: int) -> K.Groups:
    """Groups of random history lengths (some empty) and target counts (some zero), distinct history rows."""
    d = rng.integers(0, max_d + 1, size=n_groups)
    t = rng.integers(0, max_t + 1, size=n_groups)
    d[0], t[1] = 0, 0  # a group without history, one without targets
    hist = rng.permutation(int(d.sum()) + 50)[: d.sum()]
    return K.Groups(
        np.concatenate([[0], np.cumsum(d)]),
        hist,
        rng.integers(0, n_rows, len(hist)),
        np.concatenate([[0], np.cumsum(t)]),
        rng.permutation(int(t.sum())),
        rng.integers(0, n_rows, t.sum()),
    )


def both_paths(g, alpha, F, top_k):
    """(numpy, fused) attributions as {(target, train): (α, local)} and their row counts."""
    out = []
    for fused in (False, True):
        a = K.grouped_attributions(g, alpha, F, F, top_k, fused=fused)
        out.append(
            (
                {
                    (int(x), int(y)): (gl, lo)
                    for x, y, gl, lo in zip(a.target, a.train, a.global_importance, a.local_importance)
                },
                len(a.target),
            )
        )
    return out


def assert_same(g, alpha, F, top_k):
    (ref, n_ref), (got, n_got) = both_paths(g, alpha, F, top_k)
    assert n_ref > 0 and got.keys() == ref.keys() and n_got == n_ref == len(ref)
    for key, (gl, lo) in ref.items():
        assert got[key][0] == gl
        assert got[key][1] == pytest.approx(lo, rel=1e-6, abs=1e-300)


@pytest.mark.parametrize("top_k", [1, 3, 10, 20, 50, 200])
def test_fused_equals_numpy_on_random_groups(top_k):
    """Mixed history lengths (short rows taken whole, long rows through the lane bounds: the k-th largest of
    16 or 32 lane maxima for top_k ≤ 20, the smallest of top_k lanes for 50), k > d included."""
    rng = np.random.default_rng(top_k)
    g = random_groups(rng, 40, 300, 12, 500)
    F = rng.standard_normal((500, 16))
    alpha = rng.standard_normal(len(g.hist) + 50) * np.exp(rng.normal(scale=2.0, size=len(g.hist) + 50))
    assert_same(g, alpha, F, top_k)


@pytest.mark.parametrize("top_k", [2, 5])
def test_fused_equals_numpy_with_exact_ties_and_zeros(top_k):
    """Small integer factors and α make many importances exactly equal (ties go by history position in
    both) and many exactly zero (never selected)."""
    rng = np.random.default_rng(5)
    g = random_groups(rng, 30, 120, 6, 40)
    F = rng.integers(-2, 3, size=(40, 4)).astype(float)
    alpha = rng.choice([-1.0, 0.0, 0.5, 2.0], size=len(g.hist) + 50)
    assert_same(g, alpha, F, top_k)


def test_fused_ranks_near_ties_that_float32_cannot_tell_apart():
    """Rows equal to ~1e-9 relative: float32 scores tie, so the exact float64 re-rank decides, as in numpy."""
    rng = np.random.default_rng(9)
    g = random_groups(rng, 20, 200, 5, 300)
    base = rng.standard_normal(8)
    F = base + 1e-9 * rng.standard_normal((300, 8))
    alpha = np.ones(len(g.hist) + 50)
    assert_same(g, alpha, F, 4)


def test_fused_kernel_writes_nothing_for_groups_without_history_or_targets():
    g = K.Groups(np.array([0, 0, 3]), np.arange(3), np.arange(3), np.array([0, 2, 2]), np.arange(2), np.arange(2))
    a = K.fused_attributions(g, np.ones(3), np.eye(3), np.eye(3), 5)
    assert len(a.target) == 0


def test_fused_equals_numpy_when_a_long_history_takes_its_targets_in_several_products():
    """1,500 raters and 90 targets: the targets go through BLAS in batches (≥ MIN_BATCH_TARGETS each) and
    every batch's rows are selected like the single-product ones."""
    from dxplain.kernels import representer_fused as RF

    rng = np.random.default_rng(11)
    d, t = 1500, 90
    assert RF._batch_targets(d) < t  # several products for this group
    g = K.Groups(
        np.array([0, d]),
        rng.permutation(d),
        rng.integers(0, 2000, d),
        np.array([0, t]),
        rng.permutation(t),
        rng.integers(0, 2000, t),
    )
    F = rng.standard_normal((2000, 16))
    alpha = rng.standard_normal(d)
    assert_same(g, alpha, F, 10)


def test_sorting_network_sorts_every_zero_one_input():
    """The lane bounds' sorting network (``_sorted16``): sorting all 2¹⁶ inputs of zeros and ones proves it
    sorts any 16 values (Knuth's 0-1 principle); a comparator missing or misplaced fails here."""
    from dxplain.kernels import representer_fused as RF

    bits = ((np.arange(1 << 16)[:, None] >> np.arange(16)[None, :]) & 1).astype(float)
    unsorted = 0
    for x in bits:
        s = np.array(RF._sorted16(x))
        unsorted += bool(np.any(np.diff(s) < 0)) or s.sum() != x.sum()
    assert unsorted == 0
    x = np.random.default_rng(3).standard_normal(16)
    assert np.array_equal(np.array(RF._sorted16(x)), np.sort(x))


@pytest.mark.parametrize("m", [1, 9, 10, 11, 14, 16, 17, 40, 64, 65, 90])
def test_best_keeps_the_k_largest_ties_by_position_in_position_order(m):
    """``_best`` in each of its regimes (all kept, the sorting network up to 16, rank counts up to SCAN_MAX, a
    merge sort beyond) against a brute-force ranking by (value descending, position), on values with many
    exact ties, both signs."""
    from dxplain.kernels import representer_fused as RF

    rng = np.random.default_rng(m)
    k = 10
    keep, w = np.empty(k + 1, np.int64), np.empty(max(m + 1, 16))
    for trial in range(50):
        pos = np.sort(rng.choice(1000, m, replace=False))
        val = np.zeros(1000)
        val[pos] = rng.choice([0.5, 1.0, 1.5, 2.0], m) * (1 + (trial % 2) * rng.random(m))
        for sign in (1.0, -1.0):
            v = sign * val[pos]  # the candidates' values, in position order
            n = RF._best(pos, v, m, k, sign, keep, w)
            want = sorted(sorted(range(m), key=lambda a: (-sign * v[a], a))[:k])
            assert n == min(m, k) and list(keep[:n]) == [pos[a] for a in want]


def test_lane_bounds_are_the_kth_lane_extrema():
    """``_importance_bounds`` with 16 lanes (the vector lane pass, ``simd.lane_extrema16``, and the scalar one
    over the last, partial 16 entries) against numpy's maxima and minima of x[j::16], for rows of whole and partial
    sets of 16."""
    from dxplain.kernels import representer_fused as RF

    rng = np.random.default_rng(4)
    hi, lo = np.empty(16), np.empty(16)
    for d in (32, 33, 47, 48, 106, 250, 1001):
        for k in (1, 5, 10, 11):
            x = rng.standard_normal(d)
            lane_max = np.sort([x[j::16].max() for j in range(16)])
            lane_min = np.sort([x[j::16].min() for j in range(16)])
            assert RF._importance_bounds(x, d, 16, k, hi, lo) == (lane_max[16 - k], lane_min[k - 1])


@pytest.mark.parametrize("d", [0, 1, 7, 8, 9, 16, 23, 64, 250])
def test_compressed_appends_equal_the_scalar_ones(d):
    """The AVX-512 appends (``_append_compress``) write the same positions, in order, as the scalar loop, with
    exact ties at both bounds, a row all kept and a row none kept."""
    from dxplain.kernels import representer_fused as RF
    from dxplain.kernels.simd import HAS_AVX512

    if not HAS_AVX512:
        pytest.skip(
            "numba does not target AVX-512 here (none on this CPU, or NUMBA_CPU_NAME set): "
            "the kernel uses the scalar appends only"
        )
    rng = np.random.default_rng(d)
    x = rng.choice([-2.0, -1.0, 0.0, -0.0, 0.5, 1.0, 3.0, np.inf, -np.inf, np.nan], size=d)
    x *= 1 + rng.integers(0, 2, d) * rng.random(d)
    for tau_hi, tau_lo in ((1.0, -1.0), (-np.inf, np.inf), (np.inf, -np.inf), (0.0, -0.0)):
        got = [np.full(d + 16, -1), np.full(d + 16, -1)]  # a sentinel tail: nothing may be written past d
        want = [np.full(d, -1), np.full(d, -1)]
        m_got = RF._append_compress(x, d, tau_hi, tau_lo, *got)
        m_want = RF._append_scalar(x, d, tau_hi, tau_lo, *want)
        assert m_got == m_want == (int(np.sum(x >= tau_hi)), int(np.sum(x <= tau_lo)))
        for g, w, m in zip(got, want, m_got):
            assert np.array_equal(g[:m], w[:m]) and np.all(g[d:] == -1)


def test_simd_intrinsics_refuse_arrays_they_cannot_index():
    """The intrinsics index the data pointer directly, so a float32 row or a strided view is a typing error."""
    from numba import njit
    from numba.core.errors import TypingError

    from dxplain.kernels.simd import lane_extrema16

    @njit
    def extrema(x, full, hi, lo):
        lane_extrema16(x, full, hi, lo)

    hi, lo = np.empty(16), np.empty(16)
    for bad in (np.ones(32, np.float32), np.ones(64)[::2]):
        with pytest.raises(TypingError, match="1-D C-contiguous float64"):
            extrema(bad, 32, hi, lo)
    x = np.random.default_rng(0).standard_normal(48)
    extrema(x, 48, hi, lo)
    assert np.array_equal(hi, x.reshape(3, 16).max(0)) and np.array_equal(lo, x.reshape(3, 16).min(0))


@pytest.mark.parametrize("env", [{"NUMBA_ENABLE_AVX": "0"}, {"NUMBA_CPU_NAME": "generic"}])
def test_no_avx512_path_where_numba_does_not_target_it(env):
    """With AVX turned off in numba, or a chosen target CPU, the kernel must not emit AVX-512 (LLVM would abort)."""
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "from dxplain.kernels import simd; print(simd.HAS_AVX512)"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "False"
