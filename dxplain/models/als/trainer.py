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
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize

from ... import progress
from ...interactions import Interactions
from ...kernels.newton import newton_pcg
from ...progress import newton_progress
from ..base import FactorModel
from ..threads import numba_owns_the_cores
from .half_steps import HalfSteps, LocalHalfSteps
from .losses import SQUARED, BCERows, SquaredRows

log = logging.getLogger(__name__)

# Defaults picked on a validation split of ml-100k (``python -m benchmarks.als.select_lambda``, docs/model.md).
# The loss is an average over D, so the ridge in every ALS solve is λ|D|/2: a fixed λ regularises a
# light user ever harder as the data grows. The default therefore fixes the ridge, not λ:
# λ = 2·DEFAULT_RIDGE/|D|, which is the validated λ = 3e-4 on ml-100k.
DEFAULT_K = 32
DEFAULT_RIDGE = 15.0
# Anderson memory: the sweeps to the identity bound fall as m grows to about 10 and no further. A combination
# that raises f by more than UPHILL_SLACK (relative; rounding near the optimum) is dropped for a plain sweep:
# unguarded, the combinations can lead to the saddle U = V = 0. The sweeps go to Newton when STALL_SWEEPS of
# them do not halve ‖∇f‖: a Newton step (its preconditioner's k×k blocks and many Hessian products) costs
# several sweeps, so it is the fallback, not the finish.
ANDERSON_MEMORY = 10
UPHILL_SLACK = 1e-12
STALL_SWEEPS = 30
# The users' half-step by this many warm-started CG steps (``ALSMF.cg_steps``); 0 = the exact solve.
DEFAULT_CG_STEPS = 4
# A run's --tol bounds |Σ attributions − s|/|s| per target; the gradient bounds it by ε/cos θ
# (``kernels.als.identity_bound``), so a refresh trains to ε ≤ tol·MIN_TARGET_COS: within tol for every
# target whose score is at least a tenth of ‖Ũ_i‖‖Ṽ_j‖ (``python -m benchmarks.als.converged_fit`` measures the spare).
MIN_TARGET_COS = 0.1
# Block-Jacobi preconditioning stores (n_users + n_items)·k² floats: up to 1 GB, else plain trust-ncg.
PRECOND_ELEMENTS = 1 << 27


def default_lam(n_train: int) -> float:
    """λ = 2·DEFAULT_RIDGE/|D|: the ridge λ|D|/2 of every solve fixed at DEFAULT_RIDGE for ``n_train`` = |D|."""
    return 2.0 * DEFAULT_RIDGE / n_train


@dataclass
class SweepState:
    """What a measure of (U, V) found: f, ‖∇f‖ and the identity bound (ε_item, ε_user) when asked for."""

    objective: float = np.inf
    gnorm: float = np.inf
    bound: tuple | None = None


class FlatPair:
    """(U, V) as the one vector x a Newton polish works on: ``split(x)`` gives views of x, the same two objects for
    the same x (half-steps key their caches on the arrays), and ``join`` flattens a pair of U's and V's shapes."""

    def __init__(self, shape_U: tuple, shape_V: tuple):
        self.shapes, self.n_U = (shape_U, shape_V), int(np.prod(shape_U))
        self._x, self._pair = None, None

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._x is not x:
            self._x, self._pair = x, self.views(x)
        return self._pair

    def views(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """v's U and V parts (new views each call: for directions and gradients)."""
        return v[: self.n_U].reshape(self.shapes[0]), v[self.n_U :].reshape(self.shapes[1])

    def join(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.concatenate([a.ravel(), b.ravel()])


def stalled(history: list[float], window: int) -> bool:
    """Whether the last ``window`` sweeps failed to halve the best gradient norm before them: then
    Newton's quadratic rate wins (the Anderson sweeps are not monotone, so one sweep says little)."""
    return len(history) > window and min(history[-window:]) > 0.5 * min(history[:-window])


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
    newton_steps : Newton steps of the polish at most (damped Newton-CG's steps, or trust-ncg's iterations)
    anderson : sweeps the Anderson step combines (``kernels.anderson``); 0 = plain ALS
    anderson_store : what holds the Anderson history (``kernels.anderson.Anderson``'s ``store``)
    seed : initialisation seed (deterministic for a seed)
    loss : ``SQUARED`` (ratings centred by μ) or ``BCERows(w)`` (0/1 labels, μ = 0: ``models.implicit_mf``);
        the half-steps are built with it
    cg_steps : the squared loss's users' half-step takes this many warm-started conjugate-gradient steps from
        the users' previous rows instead of the exact solve (``kernels.als.ridge_cg_rows``); 0 = exact. The
        first sweep and every items' half-step stay exact, so V is stationary given U after every sweep.
    stall_sweeps : the sweeps go to the Newton polish when this many of them do not halve the best ‖∇f‖ before
        them (``stalled``)
    rescale : after each accepted sweep that another sweep follows, rescale (U, V) to the penalty's least along
        UVᵀ's invariances (``HalfSteps.rescaled``; the scores stay, f falls by the penalty's drop): ALS's sweeps
        cross those directions slowly (biased MF trains so). Factors in this process only (``HalfSteps.in_process``).
    """

    k: int = DEFAULT_K
    lam: float | None = None
    tol: float = 1e-9
    identity_tol: float | None = None
    max_sweeps: int = 300
    newton_steps: int = 200
    anderson: int = ANDERSON_MEMORY
    seed: int = 0
    anderson_store: Callable = list  # makes each Anderson history list; ``io.spill.SpillList`` keeps it in files
    loss: SquaredRows | BCERows = SQUARED
    cg_steps: int = DEFAULT_CG_STEPS
    stall_sweeps: int = STALL_SWEEPS
    rescale: bool = False

    def fit(
        self, data: Interactions, half_steps=None, init: tuple[np.ndarray, np.ndarray] | None = None
    ) -> FactorModel:
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
        if self.rescale and not half_steps.in_process:
            half_steps.close()
            raise ValueError(f"{type(half_steps).__name__}: the rescaling between sweeps needs the factors here")
        try:
            with numba_owns_the_cores():
                return self._fit(data, half_steps, loss, init, mu, lam, t0)
        finally:
            half_steps.close()

    def _fit(self, data, half_steps: HalfSteps, loss, init, mu: float, lam: float, t0: float) -> FactorModel:
        n = len(data)
        U, V = (
            half_steps.initial(data.n_users, data.n_items, self.k, self.seed)
            if init is None
            else half_steps.start(*init)
        )
        state = SweepState()  # at the last accepted (U, V)
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
            trial, done = self._measure(U_new, V_new, half_steps, n, lam)
            progress.update("train: ALS sweeps", sweeps, self.max_sweeps, f"‖∇f‖={trial.gnorm:.1e}")
            if X is not V and trial.objective > state.objective + UPHILL_SLACK * abs(state.objective):
                # The combination went uphill (plain ALS never does): it may be heading for a saddle such
                # as U = V = 0. Forget it and take a plain sweep from the last accepted point.
                log.debug("ALS sweep %d: the Anderson step raised f; plain sweep from the last point", sweeps)
                accel.reset()
                X, done = V, False
                continue
            U, V, state = U_new, V_new, trial
            history.append(state.gnorm)
            log.debug(
                "ALS sweep %d: ‖∇f‖=%.2e, identity bound %s (%.1fs)",
                sweeps,
                state.gnorm,
                state.bound,
                time.perf_counter() - t0,
            )
            if done or stalled(history, self.stall_sweeps):
                break
            if self.rescale and sweeps < self.max_sweeps:
                # A sweep follows and measures the rescaled pair before anything returns it; the data term stays,
                # so f there is state's less the penalty's drop, which the next trial is compared with.
                penalty = half_steps.sqnorm(U) + half_steps.sqnorm(V)
                U, V = half_steps.rescaled(U, V)
                drop = penalty - half_steps.sqnorm(U) - half_steps.sqnorm(V)
                state = replace(state, objective=state.objective - 0.5 * lam * drop)
            if accel:
                accel.push(V, X)
            # The last sweep of the budget is plain (never refused): it ends where a model can be returned.
            X = accel.extrapolate() if accel and sweeps + 1 < self.max_sweeps else V
        if accel:
            accel.reset()  # its arrays (or files) go now, not when the trainer is collected
        if not history:  # no sweep, or none accepted: measure where we are
            state, done = self._measure(U, V, half_steps, n, lam)
        newton = 0
        if not done and self.newton_steps > 0 and not half_steps.in_process:
            log.warning(
                "ALS-MF: %d sweeps left ‖∇f‖=%.2e above its stop; the Newton polish needs the factors in "
                "one process and they are kept on the workers, so training ends here",
                sweeps,
                state.gnorm,
            )
        elif not done and self.newton_steps > 0:
            U, V, _, newton = self._polish(U, V, half_steps, n, lam)  # its passes over D where the half-steps run
            state, _ = self._measure(U, V, half_steps, n, lam)
        gnorm, bound = state.gnorm, state.bound
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
            "objective": state.objective,
            "seconds": time.perf_counter() - t0,
        }
        if bound is not None:
            info.update(identity_tol=self.identity_tol, identity_bound={"item": bound[0], "user": bound[1]})
        model = FactorModel(U, V, mu, lam, n, grad_norm=gnorm, info=info)
        model.check_not_degenerate(data)
        return model

    def converged(self, model: FactorModel) -> bool:
        """Whether a model this trainer fitted met its stopping rule (not its budget)."""
        bound = model.info.get("identity_bound")
        if self.identity_tol is not None and bound is not None:
            return max(bound.values()) <= self.identity_tol
        return model.grad_norm is not None and model.grad_norm <= self.tol

    def _measure(self, U, V, half_steps: HalfSteps, n: int, lam) -> tuple[SweepState, bool]:
        """f, ‖∇f‖ (and the identity bound, when asked for) at (U, V), and whether the stopping rule holds.
        The passes over D are the half-steps' (``HalfSteps.stationarity``): over the parts, on the workers."""
        rss, gsq, bound = half_steps.stationarity(U, V, lam, bound=self.identity_tol is not None)
        state = SweepState(
            objective=float(rss / n + 0.5 * lam * (half_steps.sqnorm(U) + half_steps.sqnorm(V))),
            gnorm=float(np.sqrt(gsq)),
            bound=bound,
        )
        if self.identity_tol is None:
            return state, state.gnorm <= self.tol
        return state, max(bound) <= self.identity_tol

    def _polish(self, U, V, half_steps: HalfSteps, n: int, lam):
        """Newton polish on f with exact Hessian-vector products: block-Jacobi-preconditioned, damped
        Newton-CG when the k×k blocks fit in PRECOND_ELEMENTS, else scipy trust-ncg. Every pass over D
        (f and ∇f, the Hessian products, the blocks) is the half-steps': over the parts, on the workers.
        Newton-CG stops on ‖∇f‖ ≤ tol or, with an identity tolerance, as soon as a step's gradient meets the bound."""
        flat, calls = FlatPair(U.shape, V.shape), {"hessp": 0}
        split = flat.split  # the same (U, V) objects for the same x: the local half-steps keep r for them

        def fun_grad(x):
            rss, gU, gV = half_steps.gradient(*split(x), lam)
            return rss / n + 0.5 * lam * (x @ x), flat.join(gU, gV)

        def hessp(x, p):
            calls["hessp"] += 1
            return flat.join(*half_steps.hessian_vector(*split(x), *flat.views(p), lam))

        x0 = flat.join(U, V)
        t0 = time.perf_counter()
        if (U.shape[0] + V.shape[0]) * self.k**2 <= PRECOND_ELEMENTS:
            # Damped Newton-CG with the per-row k×k blocks as preconditioner (kernels/newton.py).
            def blocks_at(x):
                A, B = half_steps.curvature_grams(*split(x))
                diagonal = np.arange(self.k)
                A[:, diagonal, diagonal] += lam  # in place, not in a stacked copy of (users + items)·k² floats
                B[:, diagonal, diagonal] += lam
                return A, B

            def bound_met(x, g):
                # The identity bound from the gradient the step already has: O((users + items)·k), no pass over D.
                return max(half_steps.bound(*split(x), *flat.views(g), lam)) <= self.identity_tol

            x, gnorm, steps, products = newton_pcg(
                fun_grad,
                hessp,
                blocks_at,
                x0,
                self.tol,
                lam,
                self.newton_steps,
                callback=newton_progress(self.newton_steps),
                stop=bound_met if self.identity_tol is not None else None,
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
            options={"gtol": self.tol, "maxiter": self.newton_steps},
        )
        Ux, Vx = split(res.x)
        _, gU, gV = half_steps.gradient(Ux, Vx, lam)
        log.debug("Newton polish: %d iterations, %d Hessian-vector products", res.nit, calls["hessp"])
        return Ux.copy(), Vx.copy(), float(np.sqrt(np.sum(gU * gU) + np.sum(gV * gV))), int(res.nit)
