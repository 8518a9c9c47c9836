"""Matrix factorisation with squared loss and ℓ2 on the factors — the nuclear-norm model in variational form.

    min_{U,V} (1/|D|) Σ_{(i,j)∈D} (y_ij − μ − ⟨U_i,V_j⟩)² + (λ/2)(‖U‖²_F + ‖V‖²_F)

Ratings are centred by their global mean μ, which the model keeps: the predicted rating is
μ + ⟨U_i,V_j⟩, and the factor part ⟨U_i,V_j⟩ (the *score*) carries the personal signal that the
representer decomposes. At a stationary point UᵀU = VᵀV and every user's score is exactly the sum of
its representer attributions (docs/methods.md §1), so training stops on stationarity, not a count: on the
gradient norm, or on the bound that the gradient gives on the identity's relative error (``identity_tol``,
the refresh's ``--tol``).

Solver: Anderson-accelerated ALS sweeps (the last m sweeps combined so that their residuals cancel), which
turns ALS's crawl at accurate (small) λ into a usable rate; if they stall, a Newton polish with exact
Hessian-vector products. Each sweep's items' half-step is an exact ridge solve, so V is stationary given U;
the users' half-step is a few conjugate-gradient steps from the previous sweep's U (``cg_steps``), which
reach the same stationary point in about as many sweeps at a fraction of the exact solve's work.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize

from .. import progress
from ..interactions import Interactions
from ..io import spill
from ..kernels import als, anderson, bce
from ..kernels.newton import newton_pcg
from ..progress import newton_progress
from .base import FactorModel
from .blocks import Blocks, BlockVectors, PerBlock, Ref, RowSource, Scratch, call_loaded, take_rows

log = logging.getLogger(__name__)

# Defaults picked on a validation split of ml-100k (benchmarks/select_lambda.py, docs/model.md).
# The loss is an average over D, so the ridge in every ALS solve is λ|D|/2: a fixed λ regularises a
# light user ever harder as the data grows. The default therefore fixes the ridge, not λ:
# λ = 2·DEFAULT_RIDGE/|D|, which is the validated λ = 3e-4 on ml-100k.
DEFAULT_K = 32
DEFAULT_RIDGE = 15.0
# Anderson memory: at ml-1m size, k = 32, the identity bound reached 1e-6 in 158, 144, 121, 119, 114 and
# 117 sweeps with m = 3, 5, 8, 10, 12, 16 (m = 20 reached ‖∇f‖ 1e-9 later than 10). A combination that
# raises f by more than UPHILL_SLACK (relative; rounding near the optimum) is dropped for a plain sweep:
# unguarded, the combinations led a small rank-3 problem to the saddle U = V = 0. The sweeps go to
# Newton when STALL_SWEEPS of them do not halve ‖∇f‖: a Newton step cost ~10 sweeps there (its
# preconditioner's k×k blocks and 3–80 Hessian products), so it is the fallback, not the finish.
ANDERSON_MEMORY = 10
UPHILL_SLACK = 1e-12
STALL_SWEEPS = 30
# The users' half-step by this many warm-started CG steps (``ALSMF.cg_steps``); 0 = the exact solve.
DEFAULT_CG_STEPS = 4
# A run's --tol bounds |Σ attributions − s|/|s| per target; the gradient bounds it by ε/cos θ
# (``kernels.als.identity_bound``), so a refresh trains to ε ≤ tol·MIN_TARGET_COS: within tol for every
# target whose score is at least a tenth of ‖Ũ_i‖‖Ṽ_j‖. Top-10 targets at ml-1m size met the bound at
# 0.19–0.61 of ε in two runs (benchmarks/converged_fit.py), so this leaves them more to spare.
MIN_TARGET_COS = 0.1
# Block-Jacobi preconditioning stores (n_users + n_items)·k² floats: up to 1 GB, else plain trust-ncg.
PRECOND_ELEMENTS = 1 << 27


def default_lam(n_train: int) -> float:
    return 2.0 * DEFAULT_RIDGE / n_train


MFModel = FactorModel  # the squared-loss model's factors: the common base, under the name the explainers use


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
        return rss, float(np.sum(gU * gU) + np.sum(gV * gV)), als.identity_bound(U, V, gU, gV, lam) if bound else None

    def hessian_vector(self, U, V, dU, dV, lam) -> tuple[np.ndarray, np.ndarray]:
        """The Hessian of f at (U, V) applied to (dU, dV) (``kernels.als.hessian_vector``)."""
        raise NotImplementedError

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
        """The Hessian's per-user and per-item k×k blocks without λ (``kernels.als.curvature_grams``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class SquaredRows:
    """The squared loss on centred ratings, as a part's rows see it (the ``kernels.als`` row passes): the
    items' half-step is an exact ridge solve, which needs no start; the users' is one too unless ``cg_steps``,
    then that many conjugate-gradient steps from the users' previous rows (``kernels.als.ridge_cg_rows``)."""

    cg_steps: int = 0
    centred, name = True, "squared"
    exact = True  # the items' half-step solves its rows exactly: ``solve_with_gradient`` gives ∇f there

    @property
    def warm_start(self) -> bool:
        """Whether the users' half-step starts from the users' previous rows (its CG steps do)."""
        return self.cg_steps > 0

    def solve(self, part, F, ridge, X0=None, basis=None):
        """The rows' exact solve, or with a start X0 (and ``cg_steps``) their CG steps from it, preconditioned
        in ``basis`` (``kernels.als.cg_basis``; default: from the part's own entries)."""
        if X0 is None or not self.cg_steps:
            return als.ridge_solve_rows(*part, F, ridge)
        return als.ridge_cg_rows(*part, F, ridge, X0, self.cg_steps, Q=basis)

    def solve_with_gradient(self, part, F, ridge, n):
        """The solve and its rows of ∇f at the solution (rounding), from the Grams the solve formed (k² a row
        against a pass over the entries): (X, G). ``ridge`` = λ|D|/2, so the gradient is f's for that λ."""
        return als.ridge_solve_rows(*part, F, ridge, gradient_scale=2.0 / n)

    def gradient(self, part, F_rows, F_cols, n, lam):
        return als.gradient_rows(*part, F_rows, F_cols, n, lam)

    def hessian(self, part, F_rows, F_cols, dF_rows, dF_cols, n, lam):
        return als.hessian_rows(*part, F_rows, F_cols, dF_rows, dF_cols, n, lam)

    def curvature(self, part, F_rows, F_cols, n):
        return als.curvature_rows(part[0], part[1], F_cols, n)


@dataclass(frozen=True)
class BCERows:
    """Weighted binary cross-entropy on 0/1 labels (``kernels.bce``, c = 1 on positives, w on negatives):
    the half-step is each row's damped Newton, to rounding from a cold start, one step from a warm one
    (the row's previous factors). A one-off comparison on Amazon-like 100k: 74 sweeps against 76 when
    every half-step went to rounding, at half the solves."""

    w: float
    centred, warm_start, name = False, True, "bce"
    exact = False  # one Newton step from a warm start: its rows of ∇f need a pass (``gradient``)
    cg_steps = 0  # no CG half-step: no basis to send

    def solve(self, part, F, ridge, X0=None, basis=None):
        return bce.newton_rows(*part, self.w, F, ridge, X0, steps=None if X0 is None else 1)[0]

    def gradient(self, part, F_rows, F_cols, n, lam):
        return bce.gradient_rows(*part, self.w, F_rows, F_cols, n, lam)

    def hessian(self, part, F_rows, F_cols, dF_rows, dF_cols, n, lam):
        return bce.hessian_rows(*part, self.w, F_rows, F_cols, dF_rows, dF_cols, n, lam)

    def curvature(self, part, F_rows, F_cols, n):
        return bce.curvature_rows(*part, self.w, F_rows, F_cols, n)


SQUARED = SquaredRows()


def csr_view(data: Interactions, y: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, columns, values) of the by-user or by-item view, the input of one half-step."""
    if side == "user":
        return data.user_indptr, data.item, y
    order = data.item_order
    return data.item_indptr, data.user[order], y[order]


class LocalHalfSteps(HalfSteps):
    """Both half-steps in this process, over the whole table (the in-memory twin of the Dask ones)."""

    def __init__(self, data: Interactions, mu: float, ridge: float, loss=SQUARED):
        if not isinstance(loss, SquaredRows):  # not identity: a copied trainer holds a copy of SQUARED
            raise ValueError(
                f"the in-process half-steps are the squared loss's; train {loss.name} over parts "
                "(PartHalfSteps, on a LocalMapper in process)"
            )
        # In the compiled kernels' types once: converting the int32 ids on every call was 4% of a converged fit
        # (ml-1m-sized set, k = 32: 0.7 s of 20 s in np.asarray).
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
        return self.loss.solve(self.views["user"], V, self.ridge, U0, self._users_basis(V, U0))

    def items(self, U, V0=None, measure=None):
        V, gV = als.ridge_solve_rows(*self.views["item"], U, self.ridge, gradient_scale=2.0 / self.n)
        self._keep_items_gradient(U, V, gV)
        return V

    def stationarity(self, U, V, lam, bound):
        """As ``HalfSteps.stationarity``, with ∇_V f from the items' half-step that made V, when it did: one
        pass over D (the users' rows) instead of two."""
        gV = self._known_items_gradient(U, V, lam)
        if gV is None:
            return super().stationarity(U, V, lam, bound)
        gU, rss = als.gradient_rows(*self.views["user"], U, V, self.n, lam)
        return rss, float(np.sum(gU * gU) + np.sum(gV * gV)), als.identity_bound(U, V, gU, gV, lam) if bound else None

    def gradient(self, U, V, lam):
        if als.FUSED:  # each side's rows in one compiled pass over its view: residuals twice, no sparse products
            gU, rss = als.gradient_rows(*self.views["user"], U, V, self.n, lam)
            return rss, gU, als.gradient_rows(*self.views["item"], V, U, self.n, lam)[0]
        r = self._residuals(U, V)
        gU, gV = als.gradient(U, V, self.P, self.y, lam, r=r)
        return float(r @ r), gU, gV

    def hessian_vector(self, U, V, dU, dV, lam):
        return als.hessian_vector(U, V, dU, dV, self.P, self._residuals(U, V), lam)

    def curvature_grams(self, U, V):
        return als.curvature_grams(U, V, self.P, len(self.y))

    def _residuals(self, U, V):
        """r at (U, V), kept for the same (U, V) objects: a Newton step's Hessian products share its point."""
        last = getattr(self, "_last", None)
        if last is None or last[0] is not U or last[1] is not V:
            self._last = last = (U, V, self.y - als.pattern_scores(U, V, self.P))
        return last[2]


def _load_part(parts, side: str, p: int, mu: float):
    """(indptr, columns, y − μ) of the rows in part p of ``parts`` (``io.partitions.Partitions``): users
    for ``user``, items for ``item``."""
    if side == "user":
        a, b = int(parts.user_cuts[p]), int(parts.user_cuts[p + 1])
        d = parts.read_users(a, b).data
    else:
        a, b = parts.item_range(p)
        d = parts.read_items(p).data
    indptr, cols, y = csr_view(d, d.rating - mu, side)  # the part's rows are already the only ones there
    return indptr[a : b + 1] - indptr[a], cols, y


def _rows_of(part, a: int, F):
    return F[a : a + len(part[0]) - 1]


def _solve_part(part, a: int, F, ridge, loss, X0=None, basis=None):
    return loss.solve(part, F, ridge, None if X0 is None else _rows_of(part, a, X0), basis)


def _solve_part_with_gradient(part, a: int, F, ridge, loss, n: int):
    """An exact half-step's rows and their rows of ∇f (``SquaredRows.solve_with_gradient``)."""
    return loss.solve_with_gradient(part, F, ridge, n)


def _hessian_part(part, a: int, F_rows, F_cols, dF_rows, dF_cols, n: int, lam: float, loss) -> np.ndarray:
    return loss.hessian(part, _rows_of(part, a, F_rows), F_cols, _rows_of(part, a, dF_rows), dF_cols, n, lam)


def _curvature_part(part, a: int, F_rows, F_cols, n: int, loss) -> np.ndarray:
    return loss.curvature(part, _rows_of(part, a, F_rows), F_cols, n)


def _gradient_part(part, a: int, F_rows, F_cols, n: int, lam: float, loss) -> tuple[np.ndarray, float]:
    """One part's rows of the gradient (users' rows of ∇_U f from a by-user part, items' of ∇_V f from a
    by-item part: each row's whole sum is in its part) and the part's Σ of the loss terms (Σ r² for ALS)."""
    return loss.gradient(part, _rows_of(part, a, F_rows), F_cols, n, lam)


def _stationarity_part(
    part, a: int, F_rows, F_cols, n: int, lam: float, T_own, T_other, floor, loss
) -> tuple[float, float, float]:
    """A part's Σ of its loss terms, Σ of its gradient rows squared, and its rows' identity bound
    (``als.bound_rows``; 0 without transforms): three numbers back, not the gradient."""
    g, loss_sum = _gradient_part(part, a, F_rows, F_cols, n, lam, loss)
    return _triple(_rows_of(part, a, F_rows), g, loss_sum, lam, T_own, T_other, floor)


def _triple(F, g, loss_sum: float, lam: float, T_own, T_other, floor) -> tuple[float, float, float]:
    """(Σ of the loss terms, Σ g², the rows' identity bound (0 without transforms)) of rows F and their rows g
    of ∇f: what a part sends back of a measure."""
    eps = 0.0 if T_own is None else als.bound_rows(F, g, T_own, T_other, lam, floor)
    return loss_sum, float(np.sum(g * g)), eps


def _stationarity_total(users: list, items: list, bound: bool) -> tuple[float, float, tuple | None]:
    """Σ r² (from the by-user parts), ‖∇f‖² and the identity bound from the parts' ``_stationarity_part``
    triples, in part order."""
    gsq = sum(g for _, g, _ in users) + sum(g for _, g, _ in items)
    eps = (max(e for _, _, e in users), max(e for _, _, e in items)) if bound else None
    return sum(rss for rss, _, _ in users), gsq, eps


class PartHalfSteps(HalfSteps):
    """Half-steps mapped over the partitioned interactions, one task per part.

    Each part is read once (``mapper.persist``) and kept where it was read for every sweep; per
    half-step the fixed factor matrix travels (and, for BCE, the warm start), and each task returns its
    rows of the new factors.
    On a cluster, a worker lost mid-training loses nothing: the scheduler re-reads its parts elsewhere.
    Use as ``ALSMF.fit(data, half_steps=functools.partial(PartHalfSteps, mapper, parts))``. ``loss`` is what
    the rows cost: ``SQUARED`` (ALS) or ``BCERows(w)`` (implicit feedback, y the 0/1 label).
    """

    def __init__(self, mapper, parts, data: Interactions, mu: float, ridge: float, loss=SQUARED):
        if parts.n_interactions != len(data):
            raise ValueError(f"the parts hold {parts.n_interactions} interactions, the data {len(data)}")
        self.mapper, self.ridge, self.n, self.loss = mapper, ridge, len(data), loss
        self.item_degree = data.item_degree()
        self.cuts = {"user": parts.user_cuts, "item": parts.item_cuts}
        self.parts = {
            side: mapper.persist(
                _load_part, [(parts, side, p, mu) for p in range(len(cuts) - 1)], name=f"als-load-{side}"
            )
            for side, cuts in self.cuts.items()
        }

    def _half(self, side: str, F: np.ndarray, X0: np.ndarray | None, with_gradient: bool = False):
        # To one worker every half-step; the others fetch it from their peer (see ``distributed.cluster.scatter``).
        F_h = self.mapper.put(F)
        X0_h = self.mapper.put(X0) if X0 is not None and self.loss.warm_start else None
        cuts = self.cuts[side]
        out = np.empty((int(cuts[-1]), F.shape[1]))
        if with_gradient:  # an exact half-step: its rows of ∇f too (O(rows · k) back, like the rows)
            grad = np.empty_like(out)
            tasks = [(p, int(a), F_h, self.ridge, self.loss, self.n) for p, a in zip(self.parts[side], cuts[:-1])]
            for p, (rows, g) in self.mapper.imap(_solve_part_with_gradient, tasks, name=f"als-{side}"):
                out[cuts[p] : cuts[p + 1]], grad[cuts[p] : cuts[p + 1]] = rows, g
            return out, grad
        # Each part's rows into place as it finishes: no list of parts beside the stacked copy.
        basis = self._users_basis(F, X0) if side == "user" else None
        tasks = [(p, int(a), F_h, self.ridge, self.loss, X0_h, basis) for p, a in zip(self.parts[side], cuts[:-1])]
        for p, rows in self.mapper.imap(_solve_part, tasks, name=f"als-{side}"):
            out[cuts[p] : cuts[p + 1]] = rows
        return out

    def users(self, V, U0=None):
        return self._half("user", V, U0)

    def items(self, U, V0=None, measure=None):
        if not self.loss.exact:
            return self._half("item", U, V0)
        V, gV = self._half("item", U, V0, with_gradient=True)
        self._keep_items_gradient(U, V, gV)
        return V

    def _rows(self, fn, user_side: tuple, item_side: tuple, name: str) -> tuple[list, list]:
        """``fn(part, first row, *side args, loss)`` over every by-user and by-item part in one map: each part
        holds its rows' whole sums, so users' rows come from the former and items' from the latter."""
        out = self.mapper.map(fn, self._tasks("user", user_side) + self._tasks("item", item_side), name=name)
        return out[: len(self.parts["user"])], out[len(self.parts["user"]) :]

    def _tasks(self, side: str, args: tuple) -> list:
        """(part, its first row, *args, loss) for every part of ``side``."""
        return [(p, int(a), *args, self.loss) for p, a in zip(self.parts[side], self.cuts[side][:-1])]

    def gradient(self, U, V, lam):
        """∇_U f from the by-user parts, ∇_V f from the by-item parts, Σ r² from the former: the flow's
        process holds O(users + items) of it."""
        U_h, V_h = self.mapper.put(U), self.mapper.put(V)
        users, items = self._rows(_gradient_part, (U_h, V_h, self.n, lam), (V_h, U_h, self.n, lam), "als-gradient")
        return sum(rss for _, rss in users), np.vstack([g for g, _ in users]), np.vstack([g for g, _ in items])

    def stationarity(self, U, V, lam, bound):
        """Σ r², ‖∇f‖² and the identity bound reduced from the parts' three numbers each: at 50M the
        gradient (users × k) and the bound's temporaries never reach this process. When V is the last exact
        items(U), the items' side comes from the ∇_V f that half-step returned (items × k, here) and only
        the by-user parts are mapped."""
        T_U, T_V, floor = als.bound_transforms(U.T @ U, V.T @ V) if bound else (None, None, None)
        U_h, V_h = self.mapper.put(U), self.mapper.put(V)
        gV = self._known_items_gradient(U, V, lam)
        if gV is None:
            users, items = self._rows(
                _stationarity_part,
                (U_h, V_h, self.n, lam, T_U, T_V, floor),
                (V_h, U_h, self.n, lam, T_V, T_U, floor),
                "als-stationarity",
            )
            return _stationarity_total(users, items, bound)
        users = self.mapper.map(
            _stationarity_part, self._tasks("user", (U_h, V_h, self.n, lam, T_U, T_V, floor)), name="als-stationarity"
        )
        return _stationarity_total(users, [_triple(V, gV, 0.0, lam, T_V, T_U, floor)], bound)

    def hessian_vector(self, U, V, dU, dV, lam):
        U_h, V_h, dU_h, dV_h = (self.mapper.put(a) for a in (U, V, dU, dV))
        users, items = self._rows(
            _hessian_part, (U_h, V_h, dU_h, dV_h, self.n, lam), (V_h, U_h, dV_h, dU_h, self.n, lam), "als-hessp"
        )
        return np.vstack(users), np.vstack(items)

    def curvature_grams(self, U, V):
        U_h, V_h = self.mapper.put(U), self.mapper.put(V)
        users, items = self._rows(_curvature_part, (U_h, V_h, self.n), (V_h, U_h, self.n), "als-curvature")
        return np.concatenate(users), np.concatenate(items)


@dataclass
class BlockHalfSteps(HalfSteps):
    """Half-steps with the factors themselves kept in row-block files where the parts are, never whole in
    any process: U in blocks of the by-user parts' rows, V in blocks of the by-item parts'
    (``models.blocks.Blocks``).

    Each part is written once as a compact file: its rows' (indptr, columns renumbered 0..c−1, y) and the c
    distinct columns it touches. A half-step's task reads it, reads just those c rows of the fixed side
    (``models.blocks.take_rows``), solves its rows and writes its block. The stopping rule's passes send back
    three numbers a part (a by-item part's come with its half-step, from the rows of U it read: ``items``'
    ``measure``, one read of U's rows a part and sweep fewer); the objective's norms and the balancing
    transforms' Grams are sums of the blocks'; Anderson's vectors are blocks too
    (``models.blocks.BlockVectors``). At 50M Amazon-like interactions (k = 32), whole factors are 2.5 GB (U) and
    0.8 GB (V): neither the flow's process nor a worker holds one, and a lost worker's task is rerun from the
    same files. The Newton polish needs the factors whole, so it is not offered here: training stops on the
    sweeps.
    """

    in_process = False

    def __init__(self, mapper, parts, data: Interactions, mu: float, ridge: float, loss=SQUARED):
        if parts.n_interactions != len(data):
            raise ValueError(f"the parts hold {parts.n_interactions} interactions, the data {len(data)}")
        self.mapper, self.ridge, self.n, self.loss = mapper, ridge, len(data), loss
        self.item_degree = data.item_degree()
        self.cuts = {"user": parts.user_cuts, "item": parts.item_cuts}
        self.scratch = Scratch(parts.root)
        self._measured = None  # ((V's paths, U's paths, λ), the by-item parts' triples): the last items(measure=λ)
        self.parts = {}
        for side, cuts in self.cuts.items():
            names = self.scratch.names(f"part-{side}", len(cuts) - 1)
            self.parts[side] = mapper.map(
                _compact_part, [(parts, side, p, mu, out) for p, out in enumerate(names)], name=f"als-compact-{side}"
            )

    def initial(self, n_users, n_items, k, seed):
        # One generator per block (seed, side, part): the same start for the same parts, wherever it is drawn.
        return (
            Blocks.random(self.mapper, self.scratch, self.cuts["user"], k, seed, 0),
            Blocks.random(self.mapper, self.scratch, self.cuts["item"], k, seed, 1),
        )

    def start(self, U, V):
        return (
            Blocks.split(self.mapper, self.scratch, U, self.cuts["user"]),
            Blocks.split(self.mapper, self.scratch, V, self.cuts["item"]),
        )

    def sqnorm(self, F: Blocks) -> float:
        return F.vdot()

    def accelerator(self, m, store):
        return anderson.Anderson(m, vectors=BlockVectors())  # the history is block files: no ``store``

    def close(self):
        for side in self.parts.values():
            spill.remove(side)

    def _half(self, side: str, F: Blocks, X0: Blocks | None) -> Blocks:
        basis = self._users_basis(F, X0) if side == "user" else None
        return Blocks.made_by(
            self.mapper,
            self.scratch,
            _solve_compact,
            [(*a, basis) for a in self._solve_args(side, F, X0)],
            self.cuts[side],
            F.k,
            f"als-{side}",
        )

    def _solve_args(self, side: str, F: Blocks, X0: Blocks | None) -> list:
        warm = X0 is not None and self.loss.warm_start
        return [
            (part, F.source, self.ridge, self.loss, Ref(X0.paths[p]) if warm else None)
            for p, part in enumerate(self.parts[side])
        ]

    def _degree_gram(self, V: Blocks) -> np.ndarray:
        """Σ_j deg_j V_j V_jᵀ summed over V's blocks (a k × k from each)."""
        cuts = self.cuts["item"]
        degree = PerBlock(self.item_degree[a:b] for a, b in zip(cuts[:-1], cuts[1:]))
        return V.reduce(als.degree_gram, degree, name="als-cg-basis")

    def users(self, V, U0=None):
        return self._half("user", V, U0)

    def items(self, U, V0=None, measure=None):
        """Every item's half-step; with ``measure`` = λ the measure of (U, V_new) that follows need not read
        the rows of U again (at 50M Amazon-like interactions a by-item part touches 1.5M users' rows: 370 MB
        read per part and pass). An exact half-step (the squared loss) writes its rows of ∇_V f beside V's,
        from its Grams, and the measure takes the items' side from those files, with the identity bound or
        without; otherwise each task returns its part's bound-free triple, from the rows of U it read."""
        if measure is None:
            return self._half("item", U, V0)
        args = self._solve_args("item", U, V0)
        if self.loss.exact and self._ridge_is_for(measure):
            outs, grads = self.scratch.names("als-item", len(args)), self.scratch.names("als-item-gradient", len(args))
            done = self.mapper.map(
                call_loaded,
                [(_solve_with_gradient, *a, self.n, out, g) for a, out, g in zip(args, outs, grads)],
                name="als-item",
            )
            V, gV = (
                Blocks(self.mapper, self.scratch, tuple(paths), np.asarray(self.cuts["item"]), U.k)
                for paths in zip(*done)
            )
            self._measured = (V.paths, U.paths, measure), gV
            return V
        outs = self.scratch.names("als-item", len(args))
        done = self.mapper.map(
            call_loaded, [(_solve_measured, *a, self.n, measure, out) for a, out in zip(args, outs)], name="als-item"
        )
        V = Blocks(self.mapper, self.scratch, tuple(path for path, _ in done), np.asarray(self.cuts["item"]), U.k)
        self._measured = (V.paths, U.paths, measure), [triple for _, triple in done]
        return V

    def stationarity(self, U: Blocks, V: Blocks, lam, bound):
        T_U, T_V, floor = als.bound_transforms(U.gram(), V.gram()) if bound else (None, None, None)
        key, kept = self._measured or (None, None)
        known = key == (V.paths, U.paths, lam)
        gV = kept if known and isinstance(kept, Blocks) else None  # ∇_V f from an exact items' half-step
        item_triples = kept if known and not bound and gV is None else None
        sides = (("user", U, V, (T_U, T_V, floor)),)
        if item_triples is None and gV is None:
            sides += (("item", V, U, (T_V, T_U, floor)),)
        tasks = [
            (_stationarity_compact, part, Ref(B.paths[p]), other.source, self.n, lam, *T, self.loss)
            for side, B, other, T in sides
            for p, part in enumerate(self.parts[side])
        ]
        if gV is not None:  # the items' side from V's and ∇_V f's blocks: no pass over the by-item parts
            tasks += [(_gradient_block_triple, Ref(v), Ref(g), lam, T_V, T_U, floor) for v, g in zip(V.paths, gV.paths)]
        out = self.mapper.map(call_loaded, tasks, name="als-stationarity")
        n_user = len(self.parts["user"])
        return _stationarity_total(out[:n_user], out[n_user:] if item_triples is None else item_triples, bound)

    def gradient(self, U, V, lam):
        raise NotImplementedError(
            "the factors are kept in blocks: the gradient is never gathered "
            "(``stationarity`` reduces it where the parts are)"
        )

    def hessian_vector(self, U, V, dU, dV, lam):
        raise NotImplementedError("the Newton polish needs the factors whole; train with PartHalfSteps for it")

    curvature_grams = hessian_vector


def _compact_part(parts, side: str, p: int, mu: float, out: str) -> str:
    """Part p of ``side`` as one file (``io.spill.save_arrays``): (indptr, columns as positions 0..c−1 in
    ``need``, y − μ) and ``need``, the c distinct columns, sorted: what a half-step's task reads."""
    indptr, cols, y = _load_part(parts, side, p, mu)
    need, local = np.unique(cols, return_inverse=True)
    return spill.save_arrays(out, indptr=indptr, cols=local.astype(np.int32), y=y, need=need)


def _read_compact(part: str, F: RowSource):
    a = spill.load_arrays(part)
    return (a["indptr"], a["cols"], a["y"]), take_rows(F, a["need"])


def _solve_compact(part: str, F: RowSource, ridge, loss, X0, basis=None):
    view, F_cols = _read_compact(part, F)
    return loss.solve(view, F_cols, ridge, X0, basis)


def _solve_measured(part: str, F: RowSource, ridge, loss, X0, n, lam, out: str):
    """``_solve_compact``'s rows written to ``out``, and the part's ``_stationarity_part`` triple at them
    (no transforms) from the same rows of F: (path, triple)."""
    view, F_cols = _read_compact(part, F)
    X = loss.solve(view, F_cols, ridge, X0)
    return spill.save_file(out, X), _stationarity_part(view, 0, X, F_cols, n, lam, None, None, None, loss)


def _solve_with_gradient(part: str, F: RowSource, ridge, loss, X0, n, out: str, out_gradient: str):
    """An exact half-step's rows written to ``out`` and their rows of ∇f (from the solve's Grams, k² a row:
    ``SquaredRows.solve_with_gradient``) to ``out_gradient``: (the two paths)."""
    view, F_cols = _read_compact(part, F)
    X, G = loss.solve_with_gradient(view, F_cols, ridge, n)
    return spill.save_file(out, X), spill.save_file(out_gradient, G)


def _gradient_block_triple(F, G, lam, T_own, T_other, floor) -> tuple[float, float, float]:
    """A part's ``_stationarity_part`` triple from its rows and their rows of ∇f, kept in block files: no pass
    over its entries. Σ of the loss terms is the by-user parts' (``_stationarity_total``), so 0 here."""
    return _triple(F, G, 0.0, lam, T_own, T_other, floor)


def _stationarity_compact(part: str, F_rows, F: RowSource, n, lam, T_own, T_other, floor, loss):
    view, F_cols = _read_compact(part, F)
    return _stationarity_part(view, 0, F_rows, F_cols, n, lam, T_own, T_other, floor, loss)


@dataclass
class ALSMF:
    """ALS matrix factorisation trained to a stationary point.

    Parameters
    ----------
    k : rank
    lam : λ in the objective above (the ridge in each solve is λ|D|/2); None = ``default_lam(|D|)``
    tol : stop when ‖∇f‖ (Frobenius over U and V) ≤ tol (when ``identity_tol`` is None)
    identity_tol : stop when the bound on the representer identity's relative error,
        max(ε_item, ε_user) of ``kernels.als.identity_bound``, is ≤ identity_tol: a target whose score
        is at least cos θ of ‖Ũ_i‖‖Ṽ_j‖ then sums to it within identity_tol / cos θ on both sides.
        None: stop on the gradient norm ``tol``
    max_sweeps : ALS sweeps at most before the polish
    polish_iters : trust-region Newton iterations at most
    anderson : sweeps the Anderson step combines (``kernels.anderson``); 0 = plain ALS
    anderson_store : what holds the Anderson history (``kernels.anderson.Anderson``'s ``store``)
    seed : initialisation seed (deterministic for a seed)
    loss : ``SQUARED`` (ratings centred by μ) or ``BCERows(w)`` (0/1 labels, μ = 0: ``models.implicit_mf``);
        the half-steps are built with it
    cg_steps : the squared loss's users' half-step takes this many warm-started conjugate-gradient steps from
        the users' previous rows instead of the exact solve (``kernels.als.ridge_cg_rows``); 0 = exact. The
        first sweep and every items' half-step stay exact, so V is stationary given U after every sweep.
    """

    k: int = DEFAULT_K
    lam: float | None = None
    tol: float = 1e-9
    identity_tol: float | None = None
    max_sweeps: int = 300
    polish_iters: int = 200
    anderson: int = ANDERSON_MEMORY
    seed: int = 0
    anderson_store: Callable = list  # makes each Anderson history list; ``io.spill.SpillList`` keeps it in files
    loss: SquaredRows | BCERows = SQUARED
    cg_steps: int = DEFAULT_CG_STEPS

    def fit(self, data: Interactions, half_steps=None, init: tuple[np.ndarray, np.ndarray] | None = None) -> MFModel:
        """Train on ``data``.

        ``half_steps(data, mu, ridge, loss=self.loss) -> HalfSteps`` runs the two half-steps elsewhere, e.g.
        ``functools.partial(PartHalfSteps, mapper, parts)`` maps them over partitions; by default they run here.
        ``init=(U, V)`` starts from given factors instead of the seeded random ones (e.g. a retraining
        after deleting a few ratings, started from the original optimum).

        Every sweep ends with an exact item half-step (squared loss; the users' is ``cg_steps`` CG steps), so
        unless the Newton polish ran, the returned V is stationary given U to rounding; BCE's warm one-step
        half-steps are not exact, and only the measured ‖∇f‖ says how stationary the pair is. The budget's last
        sweep is a plain one (an Anderson combination could be refused, and the accepted U is not kept while a
        trial is computed).
        """
        if self.cg_steps < 0:
            raise ValueError(f"cg_steps={self.cg_steps}: give the users' CG steps a sweep (≥ 1), or 0 for exact solves")
        t0 = time.perf_counter()
        # exact: a streamed load (``interactions.TableSummary``) gives the same μ
        mu = data.rating_mean() if self.loss.centred else 0.0
        n = len(data)
        lam = self.lam if self.lam is not None else default_lam(n)
        ridge = lam * n / 2.0
        loss = replace(self.loss, cg_steps=self.cg_steps) if isinstance(self.loss, SquaredRows) else self.loss
        half_steps = (half_steps or LocalHalfSteps)(data, mu, ridge, loss=loss)
        try:
            return self._fit(data, half_steps, loss, init, mu, lam, t0)
        finally:
            half_steps.close()

    def _fit(self, data, half_steps: HalfSteps, loss, init, mu: float, lam: float, t0: float) -> MFModel:
        n = len(data)
        U, V = (
            half_steps.initial(data.n_users, data.n_items, self.k, self.seed)
            if init is None
            else half_steps.start(*init)
        )
        state = {"gnorm": np.inf, "bound": None, "objective": np.inf}  # at the last accepted (U, V)
        history, done, sweeps = [], False, 0
        accel = half_steps.accelerator(self.anderson, self.anderson_store) if self.anderson else None
        X = V  # the Anderson iterate: each sweep maps it to items(users(X))
        for sweeps in range(1, self.max_sweeps + 1):
            # The accepted U is not kept beside the trial's: users × k is the largest array here (256 MB at
            # 50M, k = 64). Only a combination can be refused, and the budget's last sweep is a plain one.
            # An iterative half-step (BCE's Newton, the squared loss's CG steps) starts from the accepted U (and
            # BCE's items' from X), so then the accepted U stays alive (and is sent) during the users' half-step:
            # one more users × k. The first sweep's start is random, and after a refused combination the
            # accepted U is gone: those sweeps' users' half-steps are exact (BCE's from a cold start).
            U0 = U if loss.warm_start and sweeps > 1 else None
            U = U_new = None
            U_new = half_steps.users(X, U0)
            U0 = None
            # The items' half-step can take the items' side of the measure below with it (``HalfSteps.items``'
            # ``measure``): always when it solves exactly, else only when the measure is bound-free.
            V_new = half_steps.items(
                U_new,
                X if loss.warm_start and not loss.exact else None,
                measure=lam if self.identity_tol is None or loss.exact else None,
            )
            trial = {}
            done = self._measure(U_new, V_new, half_steps, n, lam, trial)
            progress.update("train: ALS sweeps", sweeps, self.max_sweeps, f"‖∇f‖={trial['gnorm']:.1e}")
            if X is not V and trial["objective"] > state["objective"] + UPHILL_SLACK * abs(state["objective"]):
                # The combination went uphill (plain ALS never does): it may be heading for a saddle such
                # as U = V = 0. Forget it and take a plain sweep from the last accepted point.
                log.debug("ALS sweep %d: the Anderson step raised f; plain sweep from the last point", sweeps)
                accel.reset()
                X, done = V, False
                continue
            U, V, state = U_new, V_new, trial
            history.append(state["gnorm"])
            log.debug(
                "ALS sweep %d: ‖∇f‖=%.2e, identity bound %s (%.1fs)",
                sweeps,
                state["gnorm"],
                state["bound"],
                time.perf_counter() - t0,
            )
            if done or self._stalled(history):
                break
            if accel:
                accel.push(V, X)
            # The last sweep of the budget is plain (never refused): it ends where a model can be returned.
            X = accel.extrapolate() if accel and sweeps + 1 < self.max_sweeps else V
        if accel:
            accel.reset()  # its arrays (or files) go now, not when the trainer is collected
        if not history:  # no sweep, or none accepted: measure where we are
            done = self._measure(U, V, half_steps, n, lam, state)
        newton = 0
        if not done and self.polish_iters > 0 and not half_steps.in_process:
            log.warning(
                "ALS-MF: %d sweeps left ‖∇f‖=%.2e above its stop; the Newton polish needs the factors in "
                "one process and they are kept on the workers, so training ends here",
                sweeps,
                state["gnorm"],
            )
        elif not done and self.polish_iters > 0:
            U, V, _, newton = self._polish(U, V, half_steps, n, lam)  # its passes over D where the half-steps run
            self._measure(U, V, half_steps, n, lam, state)
        gnorm, bound = state["gnorm"], state["bound"]
        log.info(
            "ALS-MF k=%d λ=%g: %d sweeps + %d Newton steps, ‖∇f‖=%.2e, identity bound %s, %.1fs",
            self.k,
            lam,
            sweeps,
            newton,
            gnorm,
            bound,
            time.perf_counter() - t0,
        )
        info = {
            "sweeps": sweeps,
            "newton_iters": newton,
            "seed": self.seed,
            "objective": state["objective"],
            "seconds": time.perf_counter() - t0,
        }
        if bound is not None:
            info.update(identity_tol=self.identity_tol, identity_bound={"item": bound[0], "user": bound[1]})
        model = MFModel(U, V, mu, lam, n, grad_norm=gnorm, info=info)
        model.check_not_degenerate(data)
        return model

    def converged(self, model: MFModel) -> bool:
        """Whether a model this trainer fitted met its stopping rule (not its budget)."""
        bound = model.info.get("identity_bound")
        if self.identity_tol is not None and bound is not None:
            return max(bound.values()) <= self.identity_tol
        return model.grad_norm is not None and model.grad_norm <= self.tol

    def _measure(self, U, V, half_steps: HalfSteps, n: int, lam, state: dict) -> bool:
        """f, ‖∇f‖ (and the identity bound, when asked for) into ``state``; whether the stopping rule holds.
        The passes over D are the half-steps' (``HalfSteps.stationarity``): over the parts, on the workers."""
        rss, gsq, bound = half_steps.stationarity(U, V, lam, bound=self.identity_tol is not None)
        state["objective"] = float(rss / n + 0.5 * lam * (half_steps.sqnorm(U) + half_steps.sqnorm(V)))
        state["gnorm"], state["bound"] = float(np.sqrt(gsq)), bound
        if self.identity_tol is None:
            return state["gnorm"] <= self.tol
        return max(bound) <= self.identity_tol

    @staticmethod
    def _stalled(history: list[float]) -> bool:
        """Whether the last STALL_SWEEPS sweeps failed to halve the best gradient norm before them: then
        Newton's quadratic rate wins (the Anderson sweeps are not monotone, so one sweep says little)."""
        return len(history) > STALL_SWEEPS and min(history[-STALL_SWEEPS:]) > 0.5 * min(history[:-STALL_SWEEPS])

    def _polish(self, U, V, half_steps: HalfSteps, n: int, lam):
        """Newton polish on f with exact Hessian-vector products: block-Jacobi-preconditioned, damped
        Newton-CG when the k×k blocks fit in PRECOND_ELEMENTS, else scipy trust-ncg. Every pass over D
        (f and ∇f, the Hessian products, the blocks) is the half-steps': over the parts, on the workers."""
        nU = U.size
        shapeU, shapeV = U.shape, V.shape
        cache, calls = {}, {"hessp": 0}

        def split(x):
            # The same (U, V) objects for the same x: the local half-steps keep r for them.
            if cache.get("x") is not x:
                cache["x"], cache["UV"] = x, (x[:nU].reshape(shapeU), x[nU:].reshape(shapeV))
            return cache["UV"]

        def fun_grad(x):
            rss, gU, gV = half_steps.gradient(*split(x), lam)
            return rss / n + 0.5 * lam * (x @ x), np.concatenate([gU.ravel(), gV.ravel()])

        def hessp(x, p):
            calls["hessp"] += 1
            hU, hV = half_steps.hessian_vector(*split(x), p[:nU].reshape(shapeU), p[nU:].reshape(shapeV), lam)
            return np.concatenate([hU.ravel(), hV.ravel()])

        x0 = np.concatenate([U.ravel(), V.ravel()])
        t0 = time.perf_counter()
        if (U.shape[0] + V.shape[0]) * self.k**2 <= PRECOND_ELEMENTS:
            # Damped Newton-CG with the per-row k×k blocks as preconditioner (kernels/newton.py).
            def blocks_at(x):
                A, B = half_steps.curvature_grams(*split(x))
                return np.concatenate([A, B]) + lam * np.eye(self.k)

            x, gnorm, steps, products = newton_pcg(
                fun_grad,
                hessp,
                blocks_at,
                x0,
                self.tol,
                lam,
                self.polish_iters,
                callback=newton_progress(self.polish_iters),
            )
            Ux, Vx = split(x)
            log.debug("Newton polish: %d steps, %d Hessian-vector products", steps, products)
            return Ux.copy(), Vx.copy(), gnorm, steps

        def report_step(xk):
            log.debug(
                "Newton step: %d Hessian-vector products so far (%.1fs)", calls["hessp"], time.perf_counter() - t0
            )

        res = minimize(
            fun_grad,
            x0,
            jac=True,
            hessp=hessp,
            method="trust-ncg",
            callback=report_step,
            options={"gtol": self.tol, "maxiter": self.polish_iters},
        )
        Ux, Vx = split(res.x)
        _, gU, gV = half_steps.gradient(Ux, Vx, lam)
        log.debug("Newton polish: %d iterations, %d Hessian-vector products", res.nit, calls["hessp"])
        return Ux.copy(), Vx.copy(), float(np.sqrt(np.sum(gU * gU) + np.sum(gV * gV))), int(res.nit)
