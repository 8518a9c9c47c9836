"""The ``HalfSteps`` protocol (the two ALS half-steps and the passes over D that training measures itself
with) and ``LocalHalfSteps``, both half-steps in this process over the whole table.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ...interactions import Interactions
from ...kernels import als, anderson
from ...kernels.balance import rescaling
from .losses import SQUARED, SquaredRows


def csr_view(data: Interactions, y: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, columns, values) of the by-user or by-item view, the input of one half-step."""
    if side == "user":
        return data.user_indptr, data.item, y
    order = data.item_order
    return data.item_indptr, data.user[order], y[order]


@dataclass(frozen=True)
class BalancedBound:
    """One side's ε of ``kernels.als.identity_bound`` over some of its rows (``kernels.als.bound_rows``), from the
    balancing transforms of both sides' Grams: the bound over a side is the max over its rows' parts, so a part
    on a worker sends one number."""

    T_own: np.ndarray
    T_other: np.ndarray
    floor: float

    @classmethod
    def of_grams(cls, G_U: np.ndarray, G_V: np.ndarray) -> tuple[BalancedBound, BalancedBound]:
        """(the users' rule, the items' rule) from UᵀU and VᵀV (``kernels.als.bound_transforms``)."""
        T_U, T_V, floor = als.bound_transforms(G_U, G_V)
        return cls(T_U, T_V, floor), cls(T_V, T_U, floor)

    def rows(self, F: np.ndarray, g: np.ndarray, lam: float) -> float:
        """The bound over rows F with their rows g of ∇f."""
        return als.bound_rows(F, g, self.T_own, self.T_other, lam, self.floor)


class HalfSteps:
    """The two ALS half-steps (every user's solve given V, every item's given U), and the passes over
    D that training measures itself with: Σ of the loss terms (Σ r² for the squared loss) and the gradient.
    ``U0``/``V0`` are a warm start for half-steps that iterate (``BCERows``' Newton, the squared loss's users' CG
    steps); exact ridge solves ignore it.

    The factors are numpy arrays here; ``BlockHalfSteps`` keeps them in row-block files, and overrides the
    few vector operations training does outside the half-steps (``initial``, ``start``, ``sqnorm``,
    ``accelerator``) and ``close``."""

    in_process = True  # the factors are arrays in this process: the Newton polish can take them whole
    # (U, V, ∇_V f at (U, V)) from the last items(U) = V that solved exactly (``_keep_items_gradient``)
    _items_gradient = None

    def initial(self, n_users: int, n_items: int, k: int, seed: int):
        """The seeded random start: N(0, 0.1²) entries, U then V from one generator."""
        rng = np.random.default_rng(seed)
        return rng.normal(scale=0.1, size=(n_users, k)), rng.normal(scale=0.1, size=(n_items, k))

    def start(self, U: np.ndarray, V: np.ndarray):
        """A given start (copied: training replaces its rows)."""
        return U.copy(), V.copy()

    def sqnorm(self, F) -> float:
        return float(np.vdot(F, F))

    def accelerator(self, m: int, store) -> anderson.Anderson:
        return anderson.Anderson(m, store=store)

    def close(self) -> None:
        """Free what training kept (files, state on workers)."""

    def product_columns(self, width: int) -> slice:
        """The factors' columns that ⟨U_u, V_i⟩ pairs and the penalty weighs alike: all of them here; biased MF's
        leave out its bias and fixed columns (``models.biased_half_steps.FixedColumns``)."""
        return slice(None)

    def rescaled(self, U, V):
        """(U P, V P⁻¹) on ``product_columns``, P from ``kernels.balance.rescaling`` of their Grams: the scores stay
        and the penalty drops to its least along UVᵀ's invariances (U R, V R⁻ᵀ), which ALS's sweeps cross slowly.
        New arrays; (U, V) themselves when there is no well-conditioned P."""
        c = self.product_columns(U.shape[1])
        Uc, Vc = U[:, c], V[:, c]
        P = rescaling(Uc.T @ Uc, Vc.T @ Vc)
        if P is None:
            return U, V
        U, V = U.copy(), V.copy()
        U[:, c], V[:, c] = Uc @ P[0], Vc @ P[1]
        return U, V

    def rows_loss(self, side: str):
        """What the rows of ``side`` ("user" or "item") cost: ``loss`` for both here; a model whose two sides
        differ (biased MF's fixed columns, ``models.biased_half_steps``) gives one strategy a side."""
        return self.loss

    def bound_rules(self, U, V) -> tuple:
        """(the users' rule, the items' rule) of the stopping rule's bound: each has ``rows(F, g, λ)``, the bound
        over some rows F of the side and their rows g of ∇f (the item side's bound from the users' rows, the
        user side's from the items'). Here the identity bound of ``kernels.als.identity_bound``."""
        return BalancedBound.of_grams(U.T @ U, V.T @ V)

    def bound(self, U, V, gU, gV, lam: float) -> tuple[float, float]:
        """(ε_item, ε_user) at (U, V) from the whole gradient (``bound_rules``)."""
        rule_U, rule_V = self.bound_rules(U, V)
        return rule_U.rows(U, gU, lam), rule_V.rows(V, gV, lam)

    def users(self, V: np.ndarray, U0: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    def items(self, U: np.ndarray, V0: np.ndarray | None = None, measure: float | None = None) -> np.ndarray:
        """Every item's half-step given U. ``measure`` = λ: the caller measures (U, V_new) with
        ``stationarity(U, V_new, λ, ...)`` next (bound-free, unless the loss solves exactly), and a half-step
        that has U's rows at hand may compute the items' side of it on the way (``BlockHalfSteps`` does).
        An exact half-step (the squared loss) keeps ∇_V f at its solution for that measure in any case
        (``_keep_items_gradient``)."""
        raise NotImplementedError

    def gradient(self, U: np.ndarray, V: np.ndarray, lam: float) -> tuple[float, np.ndarray, np.ndarray]:
        """(Σ r², ∇_U f, ∇_V f) at (U, V), r = y − μ − ⟨U_i, V_j⟩ over D (Σ c ℓ for BCE)."""
        raise NotImplementedError

    def stationarity(self, U: np.ndarray, V: np.ndarray, lam: float, bound: bool) -> tuple[float, float, tuple | None]:
        """(Σ r², ‖∇f‖², the identity bound (ε_item, ε_user) of ``kernels.als.identity_bound`` when ``bound``):
        what a sweep is judged by, without the gradient itself."""
        rss, gU, gV = self.gradient(U, V, lam)
        return rss, float(np.sum(gU * gU) + np.sum(gV * gV)), self.bound(U, V, gU, gV, lam) if bound else None

    def hessian_vector(self, U, V, dU, dV, lam) -> tuple[np.ndarray, np.ndarray]:
        """The Hessian of f at (U, V) applied to (dU, dV) (``kernels.als.hessian_vector``): a pass of the
        Newton polish, which only half-steps that hold the factors in this process (``in_process``) offer."""
        raise NotImplementedError(f"{type(self).__name__}: the Newton polish needs the factors in one process")

    def _users_basis(self, V, U0):
        """The basis a users' CG half-step from U0 preconditions in (``kernels.als.cg_basis``), from the whole V and
        the items' degrees, so that every part uses the same one; None for an exact half-step."""
        if U0 is None or not self.loss.cg_steps:
            return None
        return als.cg_basis(self._degree_gram(V))

    def _degree_gram(self, V) -> np.ndarray:
        """Σ_j deg_j V_j V_jᵀ (``kernels.als.degree_gram``)."""
        return als.degree_gram(V, self.item_degree)

    def _keep_items_gradient(self, U, V, gV) -> None:
        """Keep ∇_V f at (U, V), which the items' exact half-step V = items(U) gave with V, for the measure of
        (U, V) that usually follows: its items' side then needs no pass over D. Weak references: U and V
        are the trainer's to free (users × k is the largest array in training)."""
        self._items_gradient = (weakref.ref(U), weakref.ref(V), gV)

    def _known_items_gradient(self, U, V, lam):
        """∇_V f at (U, V) if V is the last exact items(U) and ``lam`` the λ its ridge was for, else None."""
        kept = self._items_gradient
        if kept is None or kept[0]() is not U or kept[1]() is not V or not self._ridge_is_for(lam):
            return None
        return kept[2]

    def _ridge_is_for(self, lam) -> bool:
        """Whether the half-steps' ridge is λ|D|/2 for this λ: then an exact solve's residual is f's gradient."""
        return bool(np.isclose(2.0 * self.ridge / self.n, lam, rtol=1e-12, atol=0))

    def curvature_grams(self, U, V) -> tuple[np.ndarray, np.ndarray]:
        """The Hessian's per-user and per-item k×k blocks without λ (``kernels.als.curvature_grams``): the
        Newton polish's preconditioner, offered with ``hessian_vector``."""
        raise NotImplementedError(f"{type(self).__name__}: the Newton polish needs the factors in one process")


class LocalHalfSteps(HalfSteps):
    """Both half-steps in this process, over the whole table (the in-memory twin of the Dask ones)."""

    def __init__(self, data: Interactions, mu: float, ridge: float, loss=SQUARED):
        if not isinstance(loss, SquaredRows):  # not identity: a copied trainer holds a copy of SQUARED
            raise ValueError(
                f"the in-process half-steps are the squared loss's; train {loss.name} over parts "
                "(PartHalfSteps, on a LocalMapper in process)"
            )
        # In the compiled kernels' types once, not converted from int32 on every call.
        self.views = {
            side: tuple(
                np.asarray(a, t)
                for a, t in zip(csr_view(data, data.rating - mu, side), (np.int64, np.int64, np.float64))
            )
            for side in ("user", "item")
        }
        self.ridge, self.loss, self.item_degree = ridge, loss, data.item_degree()
        self.P = als.Pattern(data.user, data.item, data.user_indptr, data.n_users, data.n_items)
        self.y = self.views["user"][2]
        self.n = len(self.y)

    def users(self, V, U0=None):
        return self.rows_loss("user").solve(self.views["user"], V, self.ridge, U0, self._users_basis(V, U0))

    def items(self, U, V0=None, measure=None):
        V, gV = self.rows_loss("item").solve_with_gradient(self.views["item"], U, self.ridge, self.n)
        self._keep_items_gradient(U, V, gV)
        return V

    def stationarity(self, U, V, lam, bound):
        """As ``HalfSteps.stationarity``, with ∇_V f from the items' half-step that made V, when it did: one
        pass over D (the users' rows) instead of two."""
        gV = self._known_items_gradient(U, V, lam)
        if gV is None:
            return super().stationarity(U, V, lam, bound)
        gU, rss = self._side_gradient("user", U, V, lam)
        return rss, float(np.sum(gU * gU) + np.sum(gV * gV)), self.bound(U, V, gU, gV, lam) if bound else None

    def _gradient_by_rows(self, U, V, lam):
        gU, rss = self._side_gradient("user", U, V, lam)
        return rss, gU, self._side_gradient("item", V, U, lam)[0]

    def _side_gradient(self, side: str, F_rows, F_cols, lam) -> tuple[np.ndarray, float]:
        """The side's rows of ∇f and Σ r², in one pass over the side's view (``rows_loss(side).gradient``)."""
        return self.rows_loss(side).gradient(self.views[side], F_rows, F_cols, self.n, lam)

    def gradient(self, U, V, lam):
        if als.FUSED:  # each side's rows in one compiled pass over its view: residuals twice, no sparse products
            return self._gradient_by_rows(U, V, lam)
        r = self._residuals(U, V)
        gU, gV = als.gradient(U, V, self.P, self.y, lam, r=r)
        return float(r @ r), gU, gV

    def hessian_vector(self, U, V, dU, dV, lam):
        if als.FUSED:  # each side's rows in one compiled pass over its view, as the gradient's
            return (
                als.hessian_rows(*self.views["user"], U, V, dU, dV, self.n, lam),
                als.hessian_rows(*self.views["item"], V, U, dV, dU, self.n, lam),
            )
        return als.hessian_vector(U, V, dU, dV, self.P, self._residuals(U, V), lam)

    def curvature_grams(self, U, V):
        if als.FUSED:
            return als.curvature_rows(*self.views["user"][:2], V, self.n), als.curvature_rows(
                *self.views["item"][:2], U, self.n
            )
        return als.curvature_grams(U, V, self.P, len(self.y))

    def _residuals(self, U, V):
        """r at (U, V), kept for the same (U, V) objects: a Newton step's Hessian products share its point."""
        last = getattr(self, "_last", None)
        if last is None or last[0] is not U or last[1] is not V:
            self._last = last = (U, V, self.y - als.pattern_scores(U, V, self.P))
        return last[2]
