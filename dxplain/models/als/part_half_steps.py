"""``PartHalfSteps``: the ALS half-steps mapped over the partitioned interactions, one task per part, and
the task functions they map. A part is (indptr, columns, y − μ) of its rows (``load_part``), each row's
whole sum, so a part's task returns its rows of the new factors, of ∇f or of a Hessian product whole.
"""

from __future__ import annotations

import numpy as np

from ...interactions import Interactions
from .half_steps import HalfSteps, csr_view
from .losses import SQUARED


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


def load_part(parts, side: str, p: int, mu: float):
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


def stationarity_triple(F, g, loss_sum: float, lam: float, rule) -> tuple[float, float, float]:
    """(Σ of the loss terms, Σ g², the rows' bound by ``rule`` (``HalfSteps.bound_rules``; 0 without one)) of
    rows F and their rows g of ∇f: what a part sends back of a measure."""
    eps = 0.0 if rule is None else rule.rows(F, g, lam)
    return loss_sum, float(np.sum(g * g)), eps


def stationarity_part(part, a: int, F_rows, F_cols, n: int, lam: float, rule, loss) -> tuple[float, float, float]:
    """A part's Σ of its loss terms, Σ of its gradient rows squared, and its rows' bound by ``rule`` (0 without
    one): three numbers back, not the gradient."""
    g, loss_sum = _gradient_part(part, a, F_rows, F_cols, n, lam, loss)
    return stationarity_triple(_rows_of(part, a, F_rows), g, loss_sum, lam, rule)


def stationarity_total(users: list, items: list, bound: bool) -> tuple[float, float, tuple | None]:
    """Σ r² (from the by-user parts), ‖∇f‖² and the identity bound from the parts' ``stationarity_part``
    triples, in part order."""
    gsq = sum(g for _, g, _ in users) + sum(g for _, g, _ in items)
    eps = (max(e for _, _, e in users), max(e for _, _, e in items)) if bound else None
    return sum(rss for rss, _, _ in users), gsq, eps


class MappedHalfSteps(HalfSteps):
    """Half-steps that run as tasks on ``mapper`` over the parts of ``parts`` (``io.partitions.Partitions``),
    which must hold the same interactions as ``data``: what ``PartHalfSteps`` and
    ``block_half_steps.BlockHalfSteps`` share. ``ridge`` = λ|D|/2; ``loss`` as ``ALSMF.loss``."""

    def __init__(self, mapper, parts, data: Interactions, ridge: float, loss):
        if parts.n_interactions != len(data):
            raise ValueError(f"the parts hold {parts.n_interactions} interactions, the data {len(data)}")
        self.mapper, self.ridge, self.n, self.loss = mapper, ridge, len(data), loss
        self.item_degree = data.item_degree()
        self.cuts = {"user": parts.user_cuts, "item": parts.item_cuts}


class PartHalfSteps(MappedHalfSteps):
    """Half-steps mapped over the partitioned interactions, one task per part.

    Each part is read once (``mapper.persist``) and kept where it was read for every sweep; per
    half-step the fixed factor matrix travels (and, for BCE, the warm start), and each task returns its
    rows of the new factors.
    On a cluster, a worker lost mid-training loses nothing: the scheduler re-reads its parts elsewhere.
    Use as ``ALSMF.fit(data, half_steps=functools.partial(PartHalfSteps, mapper, parts))``. ``loss`` is what
    the rows cost: ``SQUARED`` (ALS) or ``BCERows(w)`` (implicit feedback, y the 0/1 label).
    """

    def __init__(self, mapper, parts, data: Interactions, mu: float, ridge: float, loss=SQUARED):
        super().__init__(mapper, parts, data, ridge, loss)
        self.parts = {
            side: mapper.persist(
                load_part, [(parts, side, p, mu) for p in range(len(cuts) - 1)], name=f"als-load-{side}"
            )
            for side, cuts in self.cuts.items()
        }

    def _half(self, side: str, F: np.ndarray, X0: np.ndarray | None, with_gradient: bool = False):
        # To one worker every half-step; the others fetch it from their peer (see ``distributed.cluster.scatter``).
        loss = self.rows_loss(side)
        F_h = self.mapper.put(F)
        X0_h = self.mapper.put(X0) if X0 is not None and loss.warm_start else None
        cuts = self.cuts[side]
        out = np.empty((int(cuts[-1]), F.shape[1]))
        if with_gradient:  # an exact half-step: its rows of ∇f too (O(rows · k) back, like the rows)
            grad = np.empty_like(out)
            tasks = [(p, int(a), F_h, self.ridge, loss, self.n) for p, a in zip(self.parts[side], cuts[:-1])]
            for p, (rows, g) in self.mapper.imap(_solve_part_with_gradient, tasks, name=f"als-{side}"):
                out[cuts[p] : cuts[p + 1]], grad[cuts[p] : cuts[p + 1]] = rows, g
            return out, grad
        # Each part's rows into place as it finishes: no list of parts beside the stacked copy.
        basis = self._users_basis(F, X0) if side == "user" else None
        tasks = [(p, int(a), F_h, self.ridge, loss, X0_h, basis) for p, a in zip(self.parts[side], cuts[:-1])]
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
        """(part, its first row, *args, the side's loss) for every part of ``side``."""
        loss = self.rows_loss(side)
        return [(p, int(a), *args, loss) for p, a in zip(self.parts[side], self.cuts[side][:-1])]

    def _point(self, U, V) -> tuple:
        """Handles of (U, V) on the workers, put once for the same two arrays: the Newton polish's passes at one
        point (its gradient, curvature blocks and every Hessian product of the step's CG) send it once, not per
        pass. The arrays are the polish's own, never changed in place."""
        last = getattr(self, "_last_point", None)
        if last is None or last[0] is not U or last[1] is not V:
            self._last_point = last = (U, V, self.mapper.put(U), self.mapper.put(V))
        return last[2], last[3]

    def close(self) -> None:
        """The last point's handles go (their copies on the workers with them)."""
        self._last_point = None
        super().close()

    def gradient(self, U, V, lam):
        """∇_U f from the by-user parts, ∇_V f from the by-item parts, Σ r² from the former: the flow's
        process holds O(users + items) of it."""
        U_h, V_h = self._point(U, V)
        users, items = self._rows(_gradient_part, (U_h, V_h, self.n, lam), (V_h, U_h, self.n, lam), "als-gradient")
        return sum(rss for _, rss in users), np.vstack([g for g, _ in users]), np.vstack([g for g, _ in items])

    def stationarity(self, U, V, lam, bound):
        """Σ r², ‖∇f‖² and the identity bound reduced from the parts' three numbers each: at 50M the
        gradient (users × k) and the bound's temporaries never reach this process. When V is the last exact
        items(U), the items' side comes from the ∇_V f that half-step returned (items × k, here) and only
        the by-user parts are mapped."""
        rule_U, rule_V = self.bound_rules(U, V) if bound else (None, None)
        U_h, V_h = self.mapper.put(U), self.mapper.put(V)
        gV = self._known_items_gradient(U, V, lam)
        if gV is None:
            users, items = self._rows(
                stationarity_part, (U_h, V_h, self.n, lam, rule_U), (V_h, U_h, self.n, lam, rule_V), "als-stationarity"
            )
            return stationarity_total(users, items, bound)
        users = self.mapper.map(
            stationarity_part, self._tasks("user", (U_h, V_h, self.n, lam, rule_U)), name="als-stationarity"
        )
        return stationarity_total(users, [stationarity_triple(V, gV, 0.0, lam, rule_V)], bound)

    def hessian_vector(self, U, V, dU, dV, lam):
        (U_h, V_h), dU_h, dV_h = self._point(U, V), self.mapper.put(dU), self.mapper.put(dV)
        users, items = self._rows(
            _hessian_part, (U_h, V_h, dU_h, dV_h, self.n, lam), (V_h, U_h, dV_h, dU_h, self.n, lam), "als-hessp"
        )
        return np.vstack(users), np.vstack(items)

    def curvature_grams(self, U, V):
        U_h, V_h = self._point(U, V)
        users, items = self._rows(_curvature_part, (U_h, V_h, self.n), (V_h, U_h, self.n), "als-curvature")
        return np.concatenate(users), np.concatenate(items)
