"""``IALSHalfSteps``: the iALS half-steps and the measure of a sweep, mapped over the interactions' parts.

A part is a CSR slice of one side's rows with its confidences, preferences and ridge weights (``load_ials_part``);
each row's whole sum is in its part, and the unobserved entries enter through the other side's Gram, computed
once per half-step here and sent with the factors. In process the table is one part per side
(``IALSHalfSteps.local``); over ``io.partitions`` parts on any mapper it is ``IALSHalfSteps.over_parts``
(the part files of ALS-MF, read by ``models.als.part_half_steps.load_part``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..interactions import Interactions
from ..kernels import ials
from ..mapper import LocalMapper
from .als.half_steps import csr_view
from .als.part_half_steps import load_part
from .threads import numba_owns_the_cores


def ials_part(indptr, cols, r, alpha: float, convention: str) -> tuple:
    """(indptr, cols, c, p, w) of a CSR slice of stored values r (``kernels.ials.confidence``, ``ridge_weights``)."""
    c, p = ials.confidence(r, alpha, convention)
    w = ials.ridge_weights(indptr, r, convention)
    return (np.asarray(indptr, np.int64), np.asarray(cols, np.int64), c, p, w)


def ridge_weights_of(data: Interactions, convention: str) -> dict:
    """Each side's ridge weights w (``kernels.ials.ridge_weights``), O(users + items)."""
    return {
        side: ials.ridge_weights(indptr, r, convention)
        for side, (indptr, _, r) in ((s, csr_view(data, data.rating, s)) for s in ("user", "item"))
    }


def load_ials_part(parts, side: str, p: int, alpha: float, convention: str) -> tuple:
    """Part p of ``side`` from ``io.partitions`` parts, as ``ials_part``."""
    return ials_part(*load_part(parts, side, p, 0.0), alpha, convention)


GRAMS_KEPT = 3  # a sweep's U and V, and the next sweep's start


def _part_weights(part) -> np.ndarray:
    return part[4]


def _solve_part(part, F, G, lam: float) -> np.ndarray:
    indptr, cols, c, p, w = part
    with numba_owns_the_cores():  # its shared rows' solve is BLAS beside numba's loops, on a worker too
        return ials.half_step(indptr, cols, c, p, F, lam * w, G)


def _measure_part(part, a: int, X, F, G, lam: float) -> tuple[float, float, float, float]:
    """A part's (data term, its rows' penalty Σ λ w ‖X_r‖², Σ of its gradient rows squared, its rows' identity
    bound): four numbers back, not the gradient."""
    indptr, w = part[0], part[4]
    g, data, penalty = _gradient_part(part, a, X, F, G, lam)
    rows = X[a : a + len(indptr) - 1]
    return data, penalty, float(np.sum(g * g)), ials.identity_bound(rows, g, lam * w, F)


def _gradient_part(part, a: int, X, F, G, lam: float) -> tuple[np.ndarray, float, float]:
    """A part's rows of ∇f, its data term and its rows' penalty (the Newton polish's ``fun_grad``)."""
    indptr, cols, c, p, w = part
    rows = X[a : a + len(indptr) - 1]
    with numba_owns_the_cores():
        g, data = ials.gradient_rows(indptr, cols, c, p, rows, F, lam * w, G)
    return g, data, ials.penalty(rows, lam * w)


def _hessian_part(part, a: int, X, F, dX, dF, G, S, lam: float) -> np.ndarray:
    indptr, cols, c, p, w = part
    m = len(indptr) - 1
    with numba_owns_the_cores():  # its dense products are BLAS beside numba's loop
        return ials.hessian_vector_rows(indptr, cols, c, p, X[a : a + m], F, dX[a : a + m], dF, lam * w, G, S)


def _curvature_part(part, F, G, lam: float) -> np.ndarray:
    indptr, cols, c, _, w = part
    with numba_owns_the_cores():
        return ials.curvature_rows(indptr, cols, c, F, lam * w, G)


def _confidences_one(part) -> bool:
    return bool(np.all(part[2] == 1.0))


def _preference_part(part, x) -> np.ndarray:
    indptr, cols, _, p, _ = part
    return ials.preference_product(indptr, cols, p, x)


@dataclass
class Measure:
    """What a measure of (U, V) found: f, ‖∇f‖ and the identity bound (ε_item, ε_user) (``kernels.ials``)."""

    objective: float = np.inf
    gnorm: float = np.inf
    bound: tuple = (np.inf, np.inf)


class IALSHalfSteps:
    """The two exact half-steps and the sweep's measure, one task per part on ``mapper``.

    ``parts``: {"user": [part handles], "item": [...]}, each part from ``ials_part`` (or its handle, persisted
    where it was read); ``cuts``: each side's first row per part, then the row count.
    """

    def __init__(self, mapper, parts: dict, cuts: dict, lam: float, w: dict):
        self.mapper, self.parts, self.cuts, self.lam, self.w = mapper, parts, cuts, lam, w
        self._unweighted = {side: bool(np.all(ws == 1.0)) for side, ws in w.items()}
        self._grams = []  # (weak reference to F, FᵀF) of the last GRAMS_KEPT factors whose Gram was formed

    @classmethod
    def local(cls, data: Interactions, lam: float, alpha: float, convention: str) -> IALSHalfSteps:
        """Both sides whole, in this process."""
        parts, cuts = {}, {}
        for side, n in (("user", data.n_users), ("item", data.n_items)):
            parts[side] = [ials_part(*csr_view(data, data.rating, side), alpha, convention)]
            cuts[side] = np.array([0, n])
        return cls(LocalMapper(), parts, cuts, lam, {side: part[0][4] for side, part in parts.items()})

    @classmethod
    def over_parts(cls, mapper, parts, data: Interactions, lam: float, alpha: float, convention: str) -> IALSHalfSteps:
        """Over the parts of ``parts`` (``io.partitions.Partitions``, holding ``data``), each read once where its
        task runs and kept there for every sweep. Use as ``IALS.fit(data, functools.partial(
        IALSHalfSteps.over_parts, mapper, parts))``. ``data`` may be the flow's ``TableSummary``: the ridge weights
        then come from the parts (each holds its rows whole)."""
        if parts.n_interactions != len(data):
            raise ValueError(f"the parts hold {parts.n_interactions} interactions, the data {len(data)}")
        cuts = {"user": np.asarray(parts.user_cuts), "item": np.asarray(parts.item_cuts)}
        handles = {
            side: mapper.persist(
                load_ials_part,
                [(parts, side, p, alpha, convention) for p in range(len(c) - 1)],
                name=f"ials-load-{side}",
            )
            for side, c in cuts.items()
        }
        if hasattr(data, "rating"):
            w = ridge_weights_of(data, convention)
        else:
            w = {
                side: np.concatenate(mapper.map(_part_weights, [(h,) for h in hs], name=f"ials-weights-{side}"))
                for side, hs in handles.items()
            }
        return cls(mapper, handles, cuts, lam, w)

    def close(self) -> None:
        """The polish's last point goes (its copies on the workers with it); the parts go with this object."""
        self._last_point = None

    def weighted_gram(self, side: str, F: np.ndarray) -> np.ndarray:
        """Σ_r w_r F_r F_rᵀ over ``side``'s rows: what that side's penalty is, as a function of a k×k transform. With
        every w_r = 1 (implicit's convention) it is FᵀF, which the last measure formed if F is one of its factors."""
        if self._unweighted[side]:
            return self.gram(F)
        return (F * self.w[side][:, None]).T @ F

    def gram(self, F: np.ndarray) -> np.ndarray:
        """FᵀF, formed once for the same F: a sweep's half-step, measure and rescaling share the factors' Grams
        (n·k² each, the largest products of a sweep beside the row solves). F is never changed in place while it
        lives (every half-step, combination and rescaling makes new arrays)."""
        for ref, G in self._grams:
            if ref() is F:
                return G
        G = F.T @ F
        self._grams = [*self._grams[-(GRAMS_KEPT - 1) :], (weakref.ref(F), G)]
        return G

    def users(self, V: np.ndarray) -> np.ndarray:
        return self._half("user", V)

    def items(self, U: np.ndarray) -> np.ndarray:
        return self._half("item", U)

    def _half(self, side: str, F: np.ndarray) -> np.ndarray:
        F_h, G = self.mapper.put(F), self.gram(F)
        cuts = self.cuts[side]
        out = np.empty((int(cuts[-1]), F.shape[1]))
        tasks = [(part, F_h, G, self.lam) for part in self.parts[side]]
        for p, rows in self.mapper.imap(_solve_part, tasks, name=f"ials-{side}"):
            out[cuts[p] : cuts[p + 1]] = rows
        return out

    def measure(self, U: np.ndarray, V: np.ndarray) -> Measure:
        """f(U, V), ‖∇f‖ and the identity bound: one map over every part of both sides. The data term comes
        from the users' parts (each holds its users' whole sums, the unobserved entries through VᵀV)."""
        U_h, V_h = self.mapper.put(U), self.mapper.put(V)
        G_U, G_V = self.gram(U), self.gram(V)
        tasks = [(part, int(a), U_h, V_h, G_V, self.lam) for part, a in zip(self.parts["user"], self.cuts["user"])]
        tasks += [(part, int(a), V_h, U_h, G_U, self.lam) for part, a in zip(self.parts["item"], self.cuts["item"])]
        out = self.mapper.map(_measure_part, tasks, name="ials-measure")
        users, items = out[: len(self.parts["user"])], out[len(self.parts["user"]) :]
        f = sum(d for d, _, _, _ in users) + sum(pen for _, pen, _, _ in out)
        gsq = sum(g for _, _, g, _ in out)
        bound = (max(e for *_, e in users), max(e for *_, e in items))
        return Measure(objective=float(f), gnorm=float(np.sqrt(gsq)), bound=bound)

    def _sides(self, fn, user_args: tuple, item_args: tuple, name: str, first_row: bool = True) -> tuple[list, list]:
        """``fn(part, [its first row,] *args)`` over every part of both sides in one map: (users' results, items')."""
        tasks = [
            (part, *((int(a),) if first_row else ()), *args)
            for side, args in (("user", user_args), ("item", item_args))
            for part, a in zip(self.parts[side], self.cuts[side])
        ]
        out = self.mapper.map(fn, tasks, name=name)
        return out[: len(self.parts["user"])], out[len(self.parts["user"]) :]

    def _point(self, U: np.ndarray, V: np.ndarray) -> tuple:
        """Handles of (U, V) on the mapper, put once for the same two arrays: a Newton step's gradient, blocks and
        every Hessian product of its CG are at one point (as ``PartHalfSteps._point``). The arrays are the polish's
        own, never changed in place."""
        last = getattr(self, "_last_point", None)
        if last is None or last[0] is not U or last[1] is not V:
            self._last_point = last = (U, V, self.mapper.put(U), self.mapper.put(V))
        return last[2], last[3]

    def gradient(self, U: np.ndarray, V: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(f, ∇_U f, ∇_V f): the Newton polish's objective and gradient, one map over both sides' parts."""
        U_h, V_h = self._point(U, V)
        users, items = self._sides(
            _gradient_part, (U_h, V_h, self.gram(V), self.lam), (V_h, U_h, self.gram(U), self.lam), "ials-gradient"
        )
        f = sum(d for _, d, _ in users) + sum(pen for _, _, pen in users + items)
        return float(f), np.concatenate([g for g, _, _ in users]), np.concatenate([g for g, _, _ in items])

    def hessian_vector(self, U, V, dU, dV) -> tuple[np.ndarray, np.ndarray]:
        """H·(dU, dV) (``kernels.ials.hessian_vector_rows`` on both sides' parts)."""
        (U_h, V_h), dU_h, dV_h = self._point(U, V), self.mapper.put(dU), self.mapper.put(dV)
        S_V, S_U = V.T @ dV, U.T @ dU
        users, items = self._sides(
            _hessian_part,
            (U_h, V_h, dU_h, dV_h, self.gram(V), S_V + S_V.T, self.lam),
            (V_h, U_h, dV_h, dU_h, self.gram(U), S_U + S_U.T, self.lam),
            "ials-hessian",
        )
        return np.concatenate(users), np.concatenate(items)

    def curvature_blocks(self, U, V) -> tuple[np.ndarray, np.ndarray]:
        """Every row's diagonal k × k block of the Hessian, users' and items' ((users + items)·k² floats here)."""
        users, items = self._sides(
            _curvature_part,
            (self._point(U, V)[1], self.gram(V), self.lam),
            (self._point(U, V)[0], self.gram(U), self.lam),
            "ials-curvature",
            first_row=False,
        )
        return np.concatenate(users), np.concatenate(items)

    def spectral_start(self, k: int, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``kernels.ials.spectral_factors`` of the stored preferences at λ, each product P x (Pᵀ y) one map over the
        users' (items') parts: the unweighted problem's optimum, f's own when every c = 1 and w = 1. None when k is
        not below both sides' lengths."""
        shape = (int(self.cuts["user"][-1]), int(self.cuts["item"][-1]))
        return ials.spectral_factors(
            lambda x: self._preference_product("user", x),
            lambda y: self._preference_product("item", y),
            shape,
            k,
            self.lam,
            seed,
        )

    def every_confidence_one(self) -> bool:
        """Whether every stored c = 1 and every w = 1: then f is the unweighted problem (``spectral_start``'s)."""
        if not all(self._unweighted.values()):
            return False
        return all(self.mapper.map(_confidences_one, [(part,) for part in self.parts["user"]], name="ials-uniform"))

    def _preference_product(self, side: str, x: np.ndarray) -> np.ndarray:
        x_h = self.mapper.put(np.ravel(x))
        return np.concatenate(
            self.mapper.map(_preference_part, [(part, x_h) for part in self.parts[side]], name="ials-svd")
        )

    def unweighted_zeroed(self, U, V) -> tuple[np.ndarray, np.ndarray]:
        """(U, V) with the rows whose w = 0 set to 0: what an exact half-step gives them."""
        return tuple(np.where(self.w[side][:, None] > 0, X, 0.0) for side, X in (("user", U), ("item", V)))

    def bound(self, U, V, gU, gV) -> tuple[float, float]:
        """(ε_item, ε_user) from the whole gradient, as ``measure``'s (the users' rows bound the item side), rows with
        w = 0 (Spark's rows without a positive entry) left out: an exact half-step sets them to 0, which the
        Newton polish's iterate only approaches."""

        U, V = self.unweighted_zeroed(U, V)
        return (
            ials.identity_bound(U, gU, self.lam * self.w["user"], V),
            ials.identity_bound(V, gV, self.lam * self.w["item"], U),
        )
