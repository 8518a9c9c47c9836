"""Confidence-weighted ALS (iALS; Hu, Koren & Volinsky 2008) trained to a stationary point.

    f(U, V) = Σ_{all u,i} c_ui (p_ui − ⟨U_u, V_i⟩)² + λ (Σ_u w_u ‖U_u‖² + Σ_i w_i ‖V_i‖²)

with the confidences, preferences and ridge weights of a named convention (``kernels.ials``):

- ``implicit``: what the ``implicit`` library's ``AlternatingLeastSquares(regularization=λ, alpha=α)`` minimises:
  c = α|r| on stored entries (a stored 0 leaves the sum), 1 elsewhere; p = 1[r > 0]; w = 1.
- ``spark``: what Spark MLlib's ``ALS(implicitPrefs=True, regParam=λ, alpha=α)`` minimises: c = 1 + α|r|,
  p = 1[r > 0], w = the row's count of r > 0.

The representer identity holds at a stationary point only, on both sides, with the raw factors (Spark's
weighting leaves UᵀU ≠ VᵀV, so the factors are never balanced), so training stops on the bound that the
gradient puts on the identity's relative error (``kernels.ials.identity_bound``), not on a count of sweeps.

Solver: sweeps of two exact half-steps (each row's k×k solve against the other side's Gram). f's data term depends
on UVᵀ only, so (U P, V P⁻¹) for any invertible P changes only the penalty, whose curvature in those directions
is λ: small, and plain ALS crawls along them. After each sweep V is therefore rescaled by the P that minimises the
penalty (``kernels.balance.balancing_transform``, identity at a stationary point), and the sweeps are
Anderson-accelerated on V (``kernels.anderson``; a combination that raises f is dropped for a plain sweep, as in
``models.als``); sweeps that stall end in a Newton polish (``IALS._polish``). Where every confidence is 1 and w = 1
f is unweighted MF, whose optimum (P's truncated SVD, soft-thresholded) is the start (``IALS.start``).
This is a trainer of its own rather than ``models.als.ALSMF`` with another loss strategy: ALSMF's objective is
an average over D with a (λ/2)-ridge and its bound uses the balanced factors, neither of which is iALS's, and
its strategies see only a part's stored entries, where iALS's rows also need the other side's whole Gram.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from .. import progress
from ..errors import InputError
from ..interactions import Interactions
from ..kernels import anderson
from ..kernels.balance import rescaling
from ..kernels.ials import CONVENTIONS
from ..kernels.newton import newton_pcg
from ..progress import newton_progress
from .als.trainer import PRECOND_ELEMENTS, FlatPair, stalled
from .base import FactorModel
from .ials_half_steps import IALSHalfSteps, Measure
from .threads import numba_owns_the_cores

log = logging.getLogger(__name__)

DEFAULT_K = 32
# Each library's own default: implicit's ``regularization`` and Spark's ``regParam``; both default α to 1.
DEFAULT_LAM = {"implicit": 0.01, "spark": 0.1}
DEFAULT_ALPHA = 1.0
# The bound is ε/cos θ per target: ε ≤ 1e-7 keeps every target with cos θ ≥ 0.1 within 1e-6 relative.
IDENTITY_TOL = 1e-7
ANDERSON_MEMORY = 10
UPHILL_SLACK = 1e-12  # a combination raising f by more than this (relative; rounding near the optimum) is dropped
INIT_SCALE = 0.01  # implicit's start: uniform on [0, 0.01)
# At implicit's defaults (λ = 0.01) the sweeps cross plateaus of ~100 sweeps and then converge, where the Newton
# polish from the plateau costs several times more; some fits never leave theirs (k = 64 on ml-100k's ratings ≥ 4:
# 2,000 sweeps at ‖∇f‖ ≈ 4e-4). So the polish waits this many sweeps for a halving of ‖∇f‖.
STALL_SWEEPS = 100
STARTS = ("auto", "spectral", "random")

OBJECTIVE = {
    "implicit": "Σ_all c (p − ⟨U_u,V_i⟩)² + λ(‖U‖² + ‖V‖²), c = α|r| stored (0 for a stored 0), 1 unobserved",
    "spark": "Σ_all c (p − ⟨U_u,V_i⟩)² + λ(Σ n_u‖U_u‖² + Σ n_i‖V_i‖²), c = 1 + α|r|, n = positive count",
}


def check_settings(convention: str, alpha: float, lam: float | None) -> None:
    """Refuse settings the loss has no meaning for, naming the value and the fix (InputError)."""
    if convention not in CONVENTIONS:
        raise InputError(f"unknown iALS convention {convention!r}: use one of {', '.join(CONVENTIONS)}")
    if not np.isfinite(alpha) or alpha <= 0:
        raise InputError(f"alpha = {alpha!r}: the confidence scale must be a positive number (e.g. 1.0, 40.0)")
    if lam is not None and (not np.isfinite(lam) or lam <= 0):
        raise InputError(
            f"lam = {lam!r}: iALS's explanation divides by λ, so λ must be positive "
            f"(implicit's default regularization is {DEFAULT_LAM['implicit']}, Spark's regParam {DEFAULT_LAM['spark']})"
        )


def check_data(data) -> None:
    """Refuse stored values that are not finite (a confidence needs |r|); ``data``: the table or its
    ``TableSummary`` (whose range says whether a value is not finite)."""
    lo, hi = data.rating_range()
    if len(data) and not (np.isfinite(lo) and np.isfinite(hi)):
        bad = lo if not np.isfinite(lo) else hi
        raise InputError(f"a stored value is {bad}: iALS's confidences need finite values (drop or fill them)")


@dataclass
class IALS:
    """iALS trained to a stationary point (module docstring).

    Parameters
    ----------
    k : rank
    lam : λ, as ``implicit``'s ``regularization`` or Spark's ``regParam``; None = that library's default
    alpha : α, as the library's ``alpha``
    convention : ``implicit`` or ``spark``
    identity_tol : stop when the bound on the identity's relative error, max(ε_item, ε_user), is ≤ this; None:
        stop on ‖∇f‖ ≤ ``tol``
    tol : the gradient-norm stop when ``identity_tol`` is None
    max_sweeps : sweeps at most (one half-step of each side a sweep)
    anderson : sweeps the Anderson step combines; 0 = plain ALS
    seed : the seeded start (uniform on [0, INIT_SCALE), as ``implicit``'s)
    balance : rescale V after each sweep to the penalty's minimum along UVᵀ's invariances (module docstring);
        False: plain exact sweeps (with ``anderson`` = 0, ``implicit``'s own iteration with exact solves)
    newton_steps : when the sweeps stall (``stall_sweeps`` of them without halving the best ‖∇f‖ before them),
        at most this many block-Jacobi-preconditioned Newton steps finish the fit (``_polish``); 0: sweeps only
    stall_sweeps : the window of that rule
    start : ``auto``: the spectral start when every confidence is 1 and w = 1 (the ``implicit`` convention with
        α|r| = 1 on every stored entry: its defaults on 0/1 data), where it is f's own optimum and the first sweep
        meets the bound; the random start otherwise. ``spectral``: the unweighted problem's optimum
        (``IALSHalfSteps.spectral_start``: P's k largest singular triplets, soft-thresholded at λ) in any case; where
        the confidences differ it is only a start (on ml-100k no nearer than the random one: 891 sweeps against
        890 over six settings), and its components dropped by the threshold (σ ≤ λ) take the random start's
        values. ``random``: ``implicit``'s own start (uniform on [0, INIT_SCALE)). Random throughout when k is not
        below both sides' lengths.
    """

    k: int = DEFAULT_K
    lam: float | None = None
    alpha: float = DEFAULT_ALPHA
    convention: str = "implicit"
    identity_tol: float | None = IDENTITY_TOL
    tol: float = 1e-9
    max_sweeps: int = 2000
    anderson: int = ANDERSON_MEMORY
    seed: int = 0
    balance: bool = True
    newton_steps: int = 200
    stall_sweeps: int = STALL_SWEEPS
    start: str = "auto"

    @property
    def lam_(self) -> float:
        return DEFAULT_LAM.get(self.convention, 0.0) if self.lam is None else self.lam

    def fit(self, data, half_steps=None, init: tuple[np.ndarray, np.ndarray] | None = None) -> FactorModel:
        """Train on ``data`` (stored values r; the unobserved entries are every pair not stored).

        ``half_steps(data, lam, alpha, convention) -> IALSHalfSteps``: where the half-steps run; by default the
        whole table in this process (``IALSHalfSteps.local``), or ``partial(IALSHalfSteps.over_parts, mapper,
        parts)``. ``init=(U, V)`` starts from given factors (e.g. an imported model, polished to stationarity);
        the first sweep solves U from V.

        Every accepted sweep ends with an exact items' half-step, so V is stationary given U to rounding and
        the user side's identity (an item's users) holds to rounding; the stop bounds the item side's.
        """
        check_settings(self.convention, self.alpha, self.lam)
        if self.start not in STARTS:
            raise InputError(f"start = {self.start!r}: use one of {', '.join(STARTS)}")
        check_data(data)
        if init is not None and (init[0].shape != (data.n_users, self.k) or init[1].shape != (data.n_items, self.k)):
            raise InputError(
                f"the start factors have shapes {init[0].shape} and {init[1].shape}, the data needs "
                f"({data.n_users}, {self.k}) and ({data.n_items}, {self.k}): give factors of these users and items"
            )
        t0 = time.perf_counter()
        lam = self.lam_
        hs = (half_steps or IALSHalfSteps.local)(data, lam, self.alpha, self.convention)
        try:
            with numba_owns_the_cores():
                U, V, start = self._start(data, hs, init)
                U, V, state, sweeps, stuck = self._sweeps(hs, U, V)
                newton = 0
                if stuck:
                    U, V, newton = self._polish(hs, U, V)
                    # The rows with w = 0 exactly 0, as their exact solves leave them (no positive entry: a zero
                    # right-hand side). Not a last exact sweep: from the plateau's ill-conditioned point one
                    # can raise the bound the polish met (k = 64 on ml-100k: 1e-7 to 2e-7).
                    U, V = hs.unweighted_zeroed(U, V)
                    state = hs.measure(U, V)
        finally:
            hs.close()
        seconds = time.perf_counter() - t0
        converged = self._done(state)
        log.info(
            "iALS (%s) k=%d λ=%g α=%g, %s start: %d sweeps + %d Newton steps, ‖∇f‖=%.2e, identity bound %s, %.2fs%s",
            self.convention,
            self.k,
            lam,
            self.alpha,
            start,
            sweeps,
            newton,
            state.gnorm,
            state.bound,
            seconds,
            "" if converged else " (stopped on its budget)",
        )
        info = {
            "start": start,
            "sweeps": sweeps,
            "newton_iters": newton,
            "seed": self.seed,
            "objective": state.objective,
            "seconds": seconds,
            "converged": converged,
            "identity_tol": self.identity_tol,
            "identity_bound": {"item": state.bound[0], "user": state.bound[1]},
        }
        model = FactorModel(
            U,
            V,
            0.0,
            lam,
            len(data),
            loss="ials",
            kind="ials",
            grad_norm=state.gnorm,
            info=info,
            settings={
                "convention": self.convention,
                "alpha": float(self.alpha),
                "objective": OBJECTIVE[self.convention],
            },
        )
        model.check_not_degenerate(data)
        return model

    def converged(self, model: FactorModel) -> bool:
        """Whether a model this trainer fitted met its stopping rule (not its budget)."""
        return bool(model.info.get("converged"))

    def _done(self, state: Measure) -> bool:
        if self.identity_tol is None:
            return state.gnorm <= self.tol
        return max(state.bound) <= self.identity_tol

    def _start(self, data: Interactions, hs: IALSHalfSteps, init) -> tuple[np.ndarray, np.ndarray, str]:
        """(U, V, which start): the given factors, the spectral start, or the seeded random one."""
        if init is not None:
            return np.array(init[0], np.float64), np.array(init[1], np.float64), "given"
        rng = np.random.default_rng(self.seed)
        U0, V0 = rng.random((data.n_users, self.k)) * INIT_SCALE, rng.random((data.n_items, self.k)) * INIT_SCALE
        if self.start == "random":
            return U0, V0, "random"
        uniform = hs.every_confidence_one()
        factors = hs.spectral_start(self.k, self.seed) if uniform or self.start == "spectral" else None
        if factors is None:
            if uniform or self.start == "spectral":
                log.warning("iALS: no spectral start (k = %d, or ARPACK failed); the random one", self.k)
            return U0, V0, "random"
        U, V = factors
        if not uniform:
            # A column 0 on both sides stays 0 under exact sweeps (its rows' systems have no right-hand side there):
            # the unweighted optimum's dropped components (σ ≤ λ) would stay dropped in a problem that may want them.
            dead = np.all(U == 0.0, axis=0) & np.all(V == 0.0, axis=0)
            U[:, dead], V[:, dead] = U0[:, dead], V0[:, dead]
        return U, V, "spectral"

    def _polish(self, hs: IALSHalfSteps, U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Damped Newton-CG (``kernels.newton.newton_pcg``) from where the sweeps stalled, each row's Hessian block
        (twice its half-step's matrix) the preconditioner, every pass over the data on the half-steps' mapper; it
        stops when a step's gradient meets the identity bound (or ‖∇f‖ ≤ ``tol`` without one). Small λ leaves f
        nearly flat along coupled directions of U and V, where the exact sweeps can crawl for thousands of sweeps
        (docs/model.md). The blocks take (users + items)·k² floats: beyond
        ``PRECOND_ELEMENTS`` the fit ends with its sweeps. Returns (U, V, Newton steps)."""
        if (len(U) + len(V)) * self.k**2 > PRECOND_ELEMENTS:
            log.warning("iALS: the sweeps stalled; the Newton polish's blocks would not fit, so training ends here")
            return U, V, 0
        flat = FlatPair(U.shape, V.shape)
        split = flat.split  # the same (U, V) objects for the same x: a step's passes put them once (``_point``)

        def fun_grad(x):
            f, gU, gV = hs.gradient(*split(x))
            return f, flat.join(gU, gV)

        def hessp(x, d):
            return flat.join(*hs.hessian_vector(*split(x), *flat.views(d)))

        def stop(x, g):
            if self.identity_tol is None:
                return False
            return max(hs.bound(*split(x), *flat.views(g))) <= self.identity_tol

        x, _, steps, products = newton_pcg(
            fun_grad,
            hessp,
            lambda x: hs.curvature_blocks(*split(x)),
            flat.join(U, V),
            self.tol if self.identity_tol is None else 0.0,
            2.0 * self.lam_,
            self.newton_steps,
            callback=newton_progress(self.newton_steps),
            stop=stop,
        )
        log.debug("iALS Newton polish: %d steps, %d Hessian-vector products", steps, products)
        Ux, Vx = split(x)
        return Ux.copy(), Vx.copy(), steps

    def _balanced(self, hs, U, V):
        """V P⁻¹ for the P of ``kernels.balance.rescaling`` (from the w-weighted Grams): of all (U R, V R⁻ᵀ), which
        leave UVᵀ and so the data term as they are, the least penalty, reached without a rotation. The next sweep
        solves U afresh, so only V is rescaled."""
        if not self.balance:
            return V
        P = rescaling(hs.weighted_gram("user", U), hs.weighted_gram("item", V))
        if P is None:
            return V
        rescaled = V @ P[1]
        return rescaled if np.all(np.isfinite(rescaled)) else V

    def _sweeps(self, hs: IALSHalfSteps, U: np.ndarray, V: np.ndarray):
        """Exact sweeps V ← items(users(X)) from X = V, with X the Anderson combination of the last sweeps'. Returns
        (U, V, their measure, sweeps, whether they stopped on a stall)."""
        state, sweeps, history, stuck = Measure(), 0, [], False
        accel = anderson.Anderson(self.anderson) if self.anderson else None
        X = image = V
        combined = False  # whether X is an Anderson combination (a plain sweep never raises f)
        for sweeps in range(1, self.max_sweeps + 1):
            U_new = hs.users(X)
            V_new = hs.items(U_new)
            trial = hs.measure(U_new, V_new)
            progress.update("train: iALS sweeps", sweeps, self.max_sweeps, f"bound={max(trial.bound):.1e}")
            if combined and trial.objective > state.objective + UPHILL_SLACK * abs(state.objective):
                # Forget the combinations and sweep plainly from the last accepted point's rescaled V: unguarded,
                # they can lead to a saddle such as U = V = 0.
                log.debug("iALS sweep %d: the Anderson step raised f; plain sweep from the last point", sweeps)
                accel.reset()
                X, combined = image, False
                continue
            U, V, state = U_new, V_new, trial
            log.debug("iALS sweep %d: f=%.10e ‖∇f‖=%.2e bound %s", sweeps, state.objective, state.gnorm, state.bound)
            history.append(state.gnorm)
            stuck = self.newton_steps > 0 and stalled(history, self.stall_sweeps)
            if self._done(state) or stuck:
                break
            image = self._balanced(hs, U, V)
            if accel:
                accel.push(image, X)
            # The budget's last sweep is plain (never refused): it ends where a model can be returned.
            combined = bool(accel) and sweeps + 1 < self.max_sweeps
            X = accel.extrapolate() if combined else image
        if accel:
            accel.reset()
        if not np.isfinite(state.objective):  # no sweep accepted (max_sweeps 0): measure the start
            state = hs.measure(U, V)
        return U, V, state, sweeps, stuck
