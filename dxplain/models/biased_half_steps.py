"""Biased MF's half-steps (``models.biased_mf``): what a side's rows cost with its fixed column (``BiasedRows``), and
the half-steps that run them in this process (``BiasedHalfSteps``) or over the partitioned interactions on a mapper
(``BiasedPartHalfSteps``).

The augmented factors Ũ = [U, b/κ, κ] and Ṽ = [V, κ, c/κ] have width w = k + 2; the users' fixed column is w − 1,
the items' w − 2. In a side's fixed column the other side holds its bias over κ, so a user's rows solve the free
coordinates [U_u, b_u/κ] against the features [V_i, κ] (V without column w − 1) and the targets y − μ − κ·V[i, w − 1]
= y − μ − c_i: the plain model's ridge solve on other columns and targets. The items' half-step is the mirror image.
The gradient, Hessian products and curvature blocks are the augmented model's projected onto the free coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import als
from .als.half_steps import LocalHalfSteps
from .als.losses import SquaredRows
from .als.part_half_steps import PartHalfSteps

SIDES = ("user", "item")


def fixed_column(side: str, width: int) -> int:
    """The side's fixed column (holding κ): width − 1 for the users, width − 2 for the items."""
    return width - 1 if side == "user" else width - 2


def longest_row(X: np.ndarray) -> float:
    """max_r ‖X_r‖ (0 without rows)."""
    return float(np.sqrt(np.max(np.einsum("ij,ij->i", X, X), initial=0.0)))


@dataclass(frozen=True, kw_only=True)
class BiasedRows(SquaredRows):
    """The squared loss on one side's rows (``side``) of the augmented model: ``SquaredRows``' solves and gradient
    rows on the rows' free coordinates, against the other side's factors in the same columns and the targets less
    the fixed column's share (module docstring). A part is (indptr, columns, y − μ) of its rows, as ``SquaredRows``'.
    The Hessian rows and curvature blocks are the augmented model's (``SquaredRows``'): ``FixedColumns`` projects
    the polish's directions and products onto the free coordinates once, for every part."""

    kappa: float
    side: str
    name = "biased"

    def fixed(self, width: int) -> int:
        return fixed_column(self.side, width)

    def free(self, F: np.ndarray) -> np.ndarray:
        """F without the side's fixed column: the rows' free coordinates, or the features they are solved against."""
        f = self.fixed(F.shape[1])
        out = np.empty((len(F), F.shape[1] - 1))
        out[:, :f], out[:, f:] = F[:, :f], F[:, f + 1 :]
        return out

    def with_fixed(self, X: np.ndarray, value: float | None = None) -> np.ndarray:
        """The side's augmented rows: the free coordinates X with κ (or ``value``) inserted at the fixed column."""
        f = self.fixed(X.shape[1] + 1)
        out = np.empty((len(X), X.shape[1] + 1))
        out[:, :f], out[:, f], out[:, f + 1 :] = X[:, :f], self.kappa if value is None else value, X[:, f:]
        return out

    def project(self, F: np.ndarray) -> np.ndarray:
        """The side's rows F (a direction, or a product) with the fixed coordinate set 0, in place."""
        F[:, self.fixed(F.shape[1])] = 0.0
        return F

    def project_blocks(self, C: np.ndarray) -> np.ndarray:
        """The rows' curvature blocks without the fixed coordinate's row and column (in place): the preconditioner
        then keeps a direction's fixed coordinates 0 (its block there is λ alone)."""
        f = self.fixed(C.shape[1])
        C[:, f, :], C[:, :, f] = 0.0, 0.0
        return C

    def system(self, part, F: np.ndarray):
        """The rows' part against the free coordinates, (indptr, columns, y − μ − κ·F[columns, f]), and the features
        ``free(F)``: f is the side's fixed column, where the other side F holds its bias over κ."""
        indptr, cols, y = part
        # The column gathered, then scaled and added in place: F[cols, f] is numpy's slow mixed fancy index, and
        # y − κ·x would make two temporaries of |part| floats; the same floats (−κx + y = y − κx).
        target = F[:, self.fixed(F.shape[1])].take(cols)
        target *= -self.kappa
        target += y
        return (indptr, cols, target), self.free(F)

    def solve(self, part, F, ridge, X0=None, basis=None):
        """``SquaredRows.solve`` of the free coordinates (from X0's, when warm), the fixed column set to κ.
        ``basis`` is that of ``free(F)`` (``FixedColumns._degree_gram``)."""
        view, F_free = self.system(part, F)
        return self.with_fixed(super().solve(view, F_free, ridge, None if X0 is None else self.free(X0), basis))

    def solve_with_gradient(self, part, F, ridge, n):
        view, F_free = self.system(part, F)
        X, G = super().solve_with_gradient(view, F_free, ridge, n)
        return self.with_fixed(X), self.with_fixed(G, 0.0)

    def gradient(self, part, F_rows, F_cols, n, lam):
        """The rows of ∇f (0 at the fixed coordinate) and Σ r²."""
        view, F_free = self.system(part, F_cols)
        g, rss = super().gradient(view, self.free(F_rows), F_free, n, lam)
        return self.with_fixed(g, 0.0), rss


@dataclass(frozen=True)
class MissBound:
    """One side's bound on every target's absolute miss over some of its rows (``HalfSteps.bound_rules``):
    max ‖g_r‖ · ``longest``/λ, with ``longest`` the other side's longest row in the side's free columns
    (Cauchy–Schwarz, docs/methods.md §1, "Biased MF"). Over a side it is the max over its rows' parts."""

    longest: float

    def rows(self, F: np.ndarray, g: np.ndarray, lam: float) -> float:
        return longest_row(g) * self.longest / lam


class FixedColumns:
    """What biased MF's half-steps share wherever the rows are: each side's ``BiasedRows``, the seeded start with
    zero biases and the fixed columns at κ, ‖·‖² over the free coordinates, the users' CG basis from V's free
    columns, the miss bound (``MissBound``) and the projection of the Newton polish's passes onto the free
    coordinates. Mixed in before a ``HalfSteps`` whose passes take each side's strategy from ``rows_loss``;
    ``kappa`` = κ is keyword-only, the other arguments are the half-steps'."""

    def __init__(self, *args, kappa: float, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.loss, SquaredRows):
            raise ValueError(f"biased MF's half-steps are the squared loss's, not {self.loss.name}'s")
        self.kappa = kappa
        self.sides = {side: BiasedRows(cg_steps=self.loss.cg_steps, kappa=kappa, side=side) for side in SIDES}

    def rows_loss(self, side: str) -> BiasedRows:
        return self.sides[side]

    def initial(self, n_users: int, n_items: int, k: int, seed: int):
        """HalfSteps' seeded start of rank k (= the model's rank + 2), with zero biases and the fixed columns κ."""
        U, V = super().initial(n_users, n_items, k, seed)
        U[:, k - 2], V[:, k - 1] = 0.0, 0.0
        U[:, fixed_column("user", k)], V[:, fixed_column("item", k)] = self.kappa, self.kappa
        return U, V

    def start(self, U, V):
        U, V = super().start(U, V)
        w = U.shape[1]
        U[:, fixed_column("user", w)], V[:, fixed_column("item", w)] = self.kappa, self.kappa
        return U, V

    def product_columns(self, width: int) -> slice:
        """The first k = width − 2 columns, ⟨U_u, V_i⟩'s: the bias and fixed columns pair a bias with κ."""
        return slice(0, width - 2)

    def sqnorm(self, F) -> float:
        """‖F‖² over the free coordinates: the fixed column of either side holds κ in every row."""
        return float(np.vdot(F, F)) - self.kappa**2 * len(F)

    def _degree_gram(self, V) -> np.ndarray:
        """Σ_j deg_j V_j V_jᵀ over the features of the users' half-step (V's columns free for the users)."""
        return als.degree_gram(self.sides["user"].free(V), self.item_degree)

    def bound_rules(self, U, V) -> tuple[MissBound, MissBound]:
        """The users' rows bound the item side's miss with V's longest row in the users' free columns ([V_j, κ]),
        the items' rows the user side's with U's in the items' ([U_u, κ])."""
        return MissBound(longest_row(self.sides["user"].free(V))), MissBound(longest_row(self.sides["item"].free(U)))

    def hessian_vector(self, U, V, dU, dV, lam):
        """The augmented model's Hessian product (the whole residual) on the free coordinates: the directions'
        fixed coordinates 0 (copies: dU and dV are the caller's) and the product's set 0."""
        user, item = self.sides["user"], self.sides["item"]
        hU, hV = super().hessian_vector(U, V, user.project(dU.copy()), item.project(dV.copy()), lam)
        return user.project(hU), item.project(hV)

    def curvature_grams(self, U, V):
        """The augmented model's blocks without the fixed coordinate's row and column."""
        A, B = super().curvature_grams(U, V)
        return self.sides["user"].project_blocks(A), self.sides["item"].project_blocks(B)


class BiasedHalfSteps(FixedColumns, LocalHalfSteps):
    """Biased MF's two half-steps in this process, over the whole table:
    ``BiasedHalfSteps(data, mu, ridge, loss=SQUARED, *, kappa)``."""

    def gradient(self, U, V, lam):
        return self._gradient_by_rows(U, V, lam)  # each side's rows: the fixed columns' targets are per side


class BiasedPartHalfSteps(FixedColumns, PartHalfSteps):
    """Biased MF's half-steps mapped over the partitioned interactions, one task per part (``PartHalfSteps``:
    each part read once and kept where it was read; the flow's process holds the factors, not the table):
    ``BiasedMF.fit(data, half_steps=functools.partial(BiasedPartHalfSteps, mapper, parts))``, ``data`` the table
    or its ``interactions.TableSummary``. Each task solves its rows by ``BiasedRows``; the measure's tasks send
    back three numbers each (the bound's is ``MissBound``'s), and the Newton polish's passes are over the parts
    too."""
