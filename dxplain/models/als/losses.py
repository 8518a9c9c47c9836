"""What a part's rows cost: the loss strategies that the half-steps and the stopping rule's passes call.

Each strategy solves a part's rows given the fixed side's factors and gives its rows of ∇f, of a Hessian
product and of the Hessian's diagonal blocks, through the ``kernels.als`` (squared loss) or ``kernels.bce``
(weighted binary cross-entropy) row passes. A part is (indptr, columns, y) of its rows, each row's whole sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...kernels import als, bce


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
    (the row's previous factors): one step a sweep converges in about as many sweeps as solving every
    half-step to rounding, at a fraction of the solves."""

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
