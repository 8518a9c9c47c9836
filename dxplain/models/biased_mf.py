"""Biased matrix factorisation, trained to a stationary point by ALSMF's sweeps (docs/methods.md §1, "Biased MF").

    min (1/|D|) Σ_{(u,i)∈D} (y_ui − μ − b_u − c_i − ⟨U_u,V_i⟩)² + (λ/2)(‖U‖² + ‖V‖²) + (λ_b/2)(‖b‖² + ‖c‖²)

The model is stored as a factor model of rank k + 2 with κ = √(λ/λ_b):

    Ũ_u = [U_u, b_u/κ, κ],   Ṽ_i = [V_i, κ, c_i/κ],   ⟨Ũ_u, Ṽ_i⟩ = ⟨U_u, V_i⟩ + b_u + c_i,

so every scorer, top-N search, store and ``FactorModel.predict`` works on it unchanged, and the regulariser on
the free coordinates is the uniform (λ/2)‖·‖² (λ/(2κ²)·b² = (λ_b/2)·b²). Each side has one *fixed* column
holding κ: Ũ's column k+1 and Ṽ's column k. A user's half-step solves its free coordinates [U_u, b_u/κ]
against the features [V_i, κ] and the targets y − μ − c_i with the ridge λ|D|/2: the same exact ridge solve
(``kernels.als.ridge_solve_rows``) as the plain model's; the items' half-step is its mirror image.

``ALSMF`` runs the sweeps (Anderson acceleration, the uphill guard, the Newton polish) unchanged on the
half-steps below, whose gradients and Hessian products are those of the augmented model projected onto the
free coordinates. Its stopping rule reads their bound, which here is absolute: every target's two sides sum to
its score within ``miss_tol`` (rating units), so within miss_tol/|s| relative.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ..errors import InputError
from ..interactions import Interactions
from ..kernels import als
from .als.half_steps import HalfSteps, csr_view
from .als.losses import SQUARED
from .als.trainer import ALSMF, ANDERSON_MEMORY, DEFAULT_CG_STEPS, DEFAULT_K, DEFAULT_RIDGE
from .base import FactorModel

log = logging.getLogger(__name__)

KIND = "biased-mf"
OBJECTIVE = (
    "(1/|D|) Σ (y − μ − b_u − c_i − ⟨U_u,V_i⟩)² + (λ/2)(‖U‖² + ‖V‖²) + (λ_b/2)(‖b‖² + ‖c‖²); "
    "stored as Ũ = [U, b/κ, κ], Ṽ = [V, κ, c/κ], κ = √(λ/λ_b)"
)
# The biases' ridge λ_b|D|/2, the `reg` of b_u = Σ (y − μ − c_i)/(n_u + reg): the user + item bias baseline's
# validation optimum on ml-100k (docs/model.md).
DEFAULT_BIAS_RIDGE = 3.0
# Newton steps per round of the polish (``BiasedMF._polish``): about what the polish takes from a stall.
POLISH_ROUND = 25


# A biased model's relative errors divide by at least this share of the ratings' range: its trainer bounds the
# miss in rating units, and a target whose score s is near 0 has no relative scale (docs/methods.md §1).
FLOOR_SHARE = 1e-2


def score_floor(data) -> float:
    """What a biased model's relative identity errors divide by at least: ``FLOOR_SHARE`` of the ratings' range
    (``data``: the table or its ``TableSummary``), never below 1e-12. A trainer asked for a relative ``tol`` stops
    at the miss tol·score_floor (rating units), which keeps every target within ``tol`` of max(|s|, the floor)."""
    lo, hi = data.rating_range()
    return max(FLOOR_SHARE * (hi - lo), 1e-12)


def kappa_of(lam: float, lam_bias: float) -> float:
    """κ = √(λ/λ_b): the fixed coordinate that turns the biases' ℓ2 into the factors' uniform λ."""
    return float(np.sqrt(lam / lam_bias))


def augment(U: np.ndarray, V: np.ndarray, b: np.ndarray, c: np.ndarray, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """(Ũ, Ṽ) = ([U, b/κ, κ], [V, κ, c/κ]): the stored factors of the biased model (U, V, b, c)."""
    nu, ni = len(U), len(V)
    return (
        np.column_stack([U, np.asarray(b) / kappa, np.full(nu, kappa)]),
        np.column_stack([V, np.full(ni, kappa), np.asarray(c) / kappa]),
    )


def check_biased(model: FactorModel) -> None:
    if model.kind != KIND:
        raise ValueError(f"the model is a {model.kind!r} model, not a {KIND!r} one")


def biases(model: FactorModel) -> tuple[np.ndarray, np.ndarray]:
    """(b, c) = (κ·Ũ[:, k], κ·Ṽ[:, k+1]): the users' and the items' biases."""
    check_biased(model)
    s = model.settings
    U, V = np.asarray(model.U), np.asarray(model.V)
    return s["kappa"] * U[:, s["bias_columns"]["user"]], s["kappa"] * V[:, s["bias_columns"]["item"]]


def interaction_factors(model: FactorModel) -> tuple[np.ndarray, np.ndarray]:
    """(U, V): the rank-k factors of ⟨U_u, V_i⟩, without the bias columns."""
    check_biased(model)
    k = model.settings["rank"]
    return np.asarray(model.U)[:, :k], np.asarray(model.V)[:, :k]


class BiasedHalfSteps(HalfSteps):
    """The biased model's two half-steps in this process, on the augmented factors (Ũ, Ṽ) of rank k + 2.

    A side's rows solve their free coordinates (all but the side's fixed column f: the users' f = k+1, the
    items' f = k) against the other side's factors in the same columns, with targets y − μ minus the fixed
    column's share κ·F_{other}[:, f] (c_i for a user, b_u for an item). The gradient, Hessian products and
    curvature blocks are the augmented model's, with the fixed coordinates' rows projected out."""

    def __init__(self, data: Interactions, mu: float, ridge: float, loss=SQUARED, *, kappa: float):
        self.views = {
            side: tuple(
                np.asarray(a, t)
                for a, t in zip(csr_view(data, data.rating - mu, side), (np.int64, np.int64, np.float64))
            )
            for side in ("user", "item")
        }
        self.ridge, self.loss, self.kappa = ridge, loss, kappa
        self.item_degree = data.item_degree()
        self.P = als.Pattern(data.user, data.item, data.user_indptr, data.n_users, data.n_items)
        self.y = self.views["user"][2]
        self.n = len(self.y)

    # -- the fixed columns
    @staticmethod
    def fixed(side: str, width: int) -> int:
        """The side's fixed column (holding κ): k+1 for the users, k for the items (width = k + 2)."""
        return width - 1 if side == "user" else width - 2

    def free(self, side: str, width: int) -> np.ndarray:
        return np.delete(np.arange(width), self.fixed(side, width))

    def _system(self, side: str, F_other: np.ndarray):
        """(indptr, cols, targets) and the features of the side's half-step: the other side's free-coordinate
        columns of this side, and y − μ − κ·F_other[cols, f]."""
        indptr, cols, y = self.views[side]
        w = F_other.shape[1]
        f = self.fixed(side, w)
        return (indptr, cols, y - self.kappa * F_other[cols, f]), np.ascontiguousarray(F_other[:, self.free(side, w)])

    def _with_fixed(self, side: str, X: np.ndarray) -> np.ndarray:
        """The side's augmented rows: the free coordinates X with κ inserted at the fixed column."""
        return np.insert(X, self.fixed(side, X.shape[1] + 1), self.kappa, axis=1)

    # -- HalfSteps
    def initial(self, n_users: int, n_items: int, k: int, seed: int):
        """HalfSteps' seeded start of rank k (= the model's rank + 2), with zero biases and the fixed columns κ."""
        U, V = super().initial(n_users, n_items, k, seed)
        U[:, k - 2], V[:, k - 1] = 0.0, 0.0
        U[:, self.fixed("user", k)], V[:, self.fixed("item", k)] = self.kappa, self.kappa
        return U, V

    def start(self, U, V):
        U, V = super().start(U, V)
        w = U.shape[1]
        U[:, self.fixed("user", w)], V[:, self.fixed("item", w)] = self.kappa, self.kappa
        return U, V

    def sqnorm(self, F) -> float:
        """‖F‖² over the free coordinates: the fixed column of either side holds κ in every row."""
        return float(np.vdot(F, F)) - self.kappa**2 * len(F)

    def users(self, V, U0=None):
        part, F = self._system("user", V)
        if U0 is None or not self.loss.cg_steps:
            X = als.ridge_solve_rows(*part, F, self.ridge)
        else:
            X0 = U0[:, self.free("user", U0.shape[1])]
            Q = als.cg_basis(als.degree_gram(F, self.item_degree))
            X = als.ridge_cg_rows(*part, F, self.ridge, X0, self.loss.cg_steps, Q=Q)
        return self._with_fixed("user", X)

    def items(self, U, V0=None, measure=None):
        part, F = self._system("item", U)
        X, gX = als.ridge_solve_rows(*part, F, self.ridge, gradient_scale=2.0 / self.n)
        V = self._with_fixed("item", X)
        self._keep_items_gradient(U, V, np.insert(gX, self.fixed("item", V.shape[1]), 0.0, axis=1))
        return V

    def _side_gradient(self, side: str, F_rows, F_cols, lam):
        """The side's rows of ∇f (fixed coordinate 0) and Σ r²."""
        part, F = self._system(side, F_cols)
        free = self.free(side, F_rows.shape[1])
        g, rss = als.gradient_rows(*part, np.ascontiguousarray(F_rows[:, free]), F, self.n, lam)
        return np.insert(g, self.fixed(side, F_rows.shape[1]), 0.0, axis=1), rss

    def gradient(self, U, V, lam):
        gU, rss = self._side_gradient("user", U, V, lam)
        return rss, gU, self._side_gradient("item", V, U, lam)[0]

    def stationarity(self, U, V, lam, bound):
        """(Σ r², ‖∇f‖², the bound on each side's miss) with ∇_V f from the items' half-step that made V.

        The item side of a target (u, j) (u's own rows) sums to s_uj − ⟨∇_u f, Ṽ_j⟩/λ over the users' free
        coordinates, and the user side to s_uj − ⟨∇_j f, Ũ_u⟩/λ over the items' (docs/methods.md §1, "Biased MF"),
        so by Cauchy–Schwarz every target misses by at most max_u ‖∇_u f‖ · max_j ‖Ṽ_j‖/λ on the item side
        and max_j ‖∇_j f‖ · max_u ‖Ũ_u‖/λ on the user side (norms over the free coordinates): absolute bounds,
        (miss_item, miss_user)."""
        gV = self._known_items_gradient(U, V, lam)
        gU, rss = self._side_gradient("user", U, V, lam)
        if gV is None:
            gV = self._side_gradient("item", V, U, lam)[0]
        gsq = float(np.sum(gU * gU) + np.sum(gV * gV))
        return rss, gsq, self.miss_bound(U, V, gU, gV, lam) if bound else None

    def miss_bound(self, U, V, gU, gV, lam) -> tuple[float, float]:
        w = U.shape[1]

        def longest(F, side):
            X = F[:, self.free(side, w)]
            return float(np.sqrt(np.max(np.einsum("ij,ij->i", X, X), initial=0.0)))

        def largest(g):
            return float(np.sqrt(np.max(np.einsum("ij,ij->i", g, g), initial=0.0)))

        return largest(gU) * longest(V, "user") / lam, largest(gV) * longest(U, "item") / lam

    def _projected(self, U, V, dU, dV):
        w = U.shape[1]
        fu, fi = self.fixed("user", w), self.fixed("item", w)
        dU, dV = dU.copy(), dV.copy()
        dU[:, fu], dV[:, fi] = 0.0, 0.0
        return dU, dV, fu, fi

    def hessian_vector(self, U, V, dU, dV, lam):
        """The augmented model's Hessian product (``kernels.als.hessian_vector``) on the free coordinates."""
        dU, dV, fu, fi = self._projected(U, V, dU, dV)
        hU, hV = als.hessian_vector(U, V, dU, dV, self.P, self._residuals(U, V), lam)
        hU[:, fu], hV[:, fi] = 0.0, 0.0
        return hU, hV

    def curvature_grams(self, U, V):
        """The blocks of ``kernels.als.curvature_grams`` without the fixed coordinate's row and column: the
        preconditioner then keeps a direction's fixed coordinates 0 (its block there is λ alone)."""
        A, B = als.curvature_grams(U, V, self.P, self.n)
        w = U.shape[1]
        fu, fi = self.fixed("user", w), self.fixed("item", w)
        A[:, fu, :], A[:, :, fu], B[:, fi, :], B[:, :, fi] = 0.0, 0.0, 0.0, 0.0
        return A, B

    def _residuals(self, U, V):
        last = getattr(self, "_last", None)
        if last is None or last[0] is not U or last[1] is not V:
            self._last = last = (U, V, self.y - als.pattern_scores(U, V, self.P))
        return last[2]


def longest_free_row(model: FactorModel) -> float:
    """The longest row of either side's free coordinates (the fixed column of each side left out)."""
    U, V = np.asarray(model.U), np.asarray(model.V)
    w = U.shape[1]
    Uf, Vf = (
        np.delete(U, BiasedHalfSteps.fixed("item", w), axis=1),
        np.delete(V, BiasedHalfSteps.fixed("user", w), axis=1),
    )
    return float(np.sqrt(max(np.einsum("ij,ij->i", F, F).max(initial=0.0) for F in (Uf, Vf))))


def default_lam_bias(n_train: int) -> float:
    """λ_b = 2·DEFAULT_BIAS_RIDGE/|D|: the biases' ridge λ_b|D|/2 fixed at DEFAULT_BIAS_RIDGE."""
    return 2.0 * DEFAULT_BIAS_RIDGE / n_train


@dataclass
class BiasedMF:
    """Biased MF trained to a stationary point (the objective in the module docstring).

    Parameters
    ----------
    k : rank of ⟨U_u, V_i⟩ (the stored factors have k + 2 columns)
    lam : λ on the factors; None = ``models.als.trainer.default_lam(|D|)`` (the ridge λ|D|/2 = 15)
    lam_bias : λ_b on the biases; None = ``default_lam_bias(|D|)`` (the ridge λ_b|D|/2 = 3)
    miss_tol : stop when the bound on every target's |Σ attributions − s| is ≤ miss_tol on both sides
        (``BiasedHalfSteps.stationarity``): the identity then holds within miss_tol/|s| relative
    tol : the Newton polish (when the sweeps stall) stops at ‖∇f‖ ≤ tol; None = the ‖∇f‖ that bounds the miss by
        miss_tol at the factors of each of its rounds (``_polish``)
    max_sweeps, newton_steps, anderson, cg_steps, seed : as ``ALSMF``'s
    """

    k: int = DEFAULT_K
    lam: float | None = None
    lam_bias: float | None = None
    miss_tol: float = 1e-8
    tol: float | None = None
    max_sweeps: int = 500
    newton_steps: int = 200
    anderson: int = ANDERSON_MEMORY
    cg_steps: int = DEFAULT_CG_STEPS
    seed: int = 0

    def resolved(self, n_train: int) -> tuple[float, float]:
        """(λ, λ_b) for |D| = ``n_train``."""
        lam = self.lam if self.lam is not None else 2.0 * DEFAULT_RIDGE / n_train
        lam_bias = self.lam_bias if self.lam_bias is not None else default_lam_bias(n_train)
        return lam, lam_bias

    def fit(self, data: Interactions, init: tuple[np.ndarray, np.ndarray] | None = None) -> FactorModel:
        """Train on ``data``; ``init=(Ũ, Ṽ)`` starts from given augmented factors (their fixed columns are
        reset to κ)."""
        if self.k < 0:
            raise InputError(f"k={self.k}: the rank of the factors is ≥ 0 (0 = the biases alone)")
        lam, lam_bias = self.resolved(len(data))
        if not (lam > 0 and lam_bias > 0):
            raise InputError(f"λ = {lam}, λ_b = {lam_bias}: both must be > 0 (κ = √(λ/λ_b))")
        kappa = kappa_of(lam, lam_bias)
        half_steps = partial(BiasedHalfSteps, kappa=kappa)
        sweeps = ALSMF(
            k=self.k + 2,
            lam=lam,
            identity_tol=self.miss_tol,
            max_sweeps=self.max_sweeps,
            newton_steps=0,
            anderson=self.anderson,
            seed=self.seed,
            cg_steps=self.cg_steps,
        )
        model = sweeps.fit(data, half_steps=half_steps, init=init)
        if not sweeps.converged(model) and self.newton_steps > 0:
            model = self._polish(data, sweeps, half_steps, model, lam)
        info = dict(model.info)
        info.pop("identity_tol", None)
        bound = info.pop("identity_bound", None)
        info.update(miss_tol=self.miss_tol, miss_bound=bound)
        settings = {
            "lam_bias": lam_bias,
            "kappa": kappa,
            "rank": self.k,
            "bias_columns": {"user": self.k, "item": self.k + 1},
            "fixed_columns": {"user": self.k + 1, "item": self.k},
            "objective": OBJECTIVE,
        }
        return replace(model, kind=KIND, info=info, settings=settings)

    def converged(self, model: FactorModel) -> bool:
        """Whether a model this trainer fitted met its stopping rule (not its budget)."""
        bound = model.info.get("miss_bound")
        return bound is not None and max(bound.values()) <= self.miss_tol

    def _polish(self, data, sweeps: ALSMF, half_steps, model: FactorModel, lam: float) -> FactorModel:
        """ALSMF's Newton polish from where the sweeps stalled, in rounds of POLISH_ROUND steps, each from where the
        last ended, until the bound holds, a round no longer lowers f beyond rounding, or the budget is spent; the
        factors of the round with the lowest bound are kept.

        The polish stops on ‖∇f‖ ≤ tol; the bound is at most ‖∇f‖ times the longest free row over λ, so
        tol = miss_tol·λ/that row delivers miss_tol (each round takes it at its start). Near rounding ‖∇f‖ can
        rise again while f falls by a rounding error, so the best round, not the last, is kept."""

        def worst(m):
            return max(m.info["identity_bound"].values())

        best = current = model
        steps, seconds = 0, model.info["seconds"]
        while steps < self.newton_steps:
            tol = self.tol if self.tol is not None else self.miss_tol * lam / longest_free_row(current)
            rounds = replace(sweeps, tol=tol, max_sweeps=0, newton_steps=min(POLISH_ROUND, self.newton_steps - steps))
            polished = rounds.fit(data, half_steps=half_steps, init=(current.U, current.V))
            steps += polished.info["newton_iters"]
            seconds += polished.info["seconds"]
            if worst(polished) < worst(best):
                best = polished
            f, f_before = polished.info["objective"], current.info["objective"]
            if rounds.converged(best) or not f < f_before - 1e-15 * abs(f_before):
                break
            current = polished
        info = best.info | {"sweeps": model.info["sweeps"], "newton_iters": steps, "seconds": seconds}
        return replace(best, info=info)
