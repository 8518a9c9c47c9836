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
half-steps of ``models.biased_half_steps`` (``BiasedHalfSteps`` in this process, ``BiasedPartHalfSteps`` over the
partitioned interactions on a mapper), whose gradients and Hessian products are those of the augmented model
projected onto the free coordinates. Its stopping rule reads their bound, which here is absolute: every target's
two sides sum to its score within ``miss_tol`` (rating units), so within miss_tol/|s| relative.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ..errors import InputError
from ..interactions import Interactions
from .als.trainer import ALSMF, ANDERSON_MEMORY, DEFAULT_CG_STEPS, DEFAULT_K, DEFAULT_RIDGE
from .base import FactorModel
from .biased_half_steps import BiasedHalfSteps, fixed_column, longest_row

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
# Biased MF's Anderson sweeps cross plateaus of tens of sweeps without halving ‖∇f‖ and then converge, while its
# Newton polish from such a plateau takes damped steps and hundreds of Hessian products, so it waits this many
# sweeps for a halving before the polish
# (``ALSMF.stall_sweeps``; ``python -m benchmarks.als.converged_ratings`` and ``biased_parts`` measure both).
STALL_SWEEPS = 100


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


def longest_free_row(model: FactorModel) -> float:
    """The longest row of either side's free coordinates (the fixed column of each side left out)."""
    U, V = np.asarray(model.U), np.asarray(model.V)
    w = U.shape[1]
    return max(
        longest_row(np.delete(U, fixed_column("item", w), axis=1)),
        longest_row(np.delete(V, fixed_column("user", w), axis=1)),
    )


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
        (``biased_half_steps.MissBound``): the identity then holds within miss_tol/|s| relative
    tol : the Newton polish (when the sweeps stall) stops at ‖∇f‖ ≤ tol; None = the ‖∇f‖ that bounds the miss by
        miss_tol at the factors of each of its rounds (``_polish``)
    max_sweeps, newton_steps, anderson, cg_steps, seed, anderson_store : as ``ALSMF``'s (``io.spill.SpillList`` keeps
        the Anderson history in files, not in the flow's process)
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
    anderson_store: Callable = list  # makes each Anderson history list

    def resolved(self, n_train: int) -> tuple[float, float]:
        """(λ, λ_b) for |D| = ``n_train``."""
        lam = self.lam if self.lam is not None else 2.0 * DEFAULT_RIDGE / n_train
        lam_bias = self.lam_bias if self.lam_bias is not None else default_lam_bias(n_train)
        return lam, lam_bias

    def fit(
        self, data: Interactions, half_steps=None, init: tuple[np.ndarray, np.ndarray] | None = None
    ) -> FactorModel:
        """Train on ``data``.

        ``half_steps(data, mu, ridge, loss=..., kappa=κ) -> HalfSteps`` runs the two half-steps elsewhere, as
        ``ALSMF.fit``'s: ``functools.partial(BiasedPartHalfSteps, mapper, parts)`` maps them over the partitioned
        interactions (``models.biased_half_steps``; ``data`` may then be the table's ``interactions.TableSummary``),
        the Newton polish's passes too; by default ``BiasedHalfSteps`` runs them here, over the whole table.
        ``init=(Ũ, Ṽ)`` starts from given augmented factors (their fixed columns are reset to κ)."""
        if self.k < 0:
            raise InputError(f"k={self.k}: the rank of the factors is ≥ 0 (0 = the biases alone)")
        lam, lam_bias = self.resolved(len(data))
        if not (lam > 0 and lam_bias > 0):
            raise InputError(f"λ = {lam}, λ_b = {lam_bias}: both must be > 0 (κ = √(λ/λ_b))")
        kappa = kappa_of(lam, lam_bias)
        half_steps = partial(half_steps or BiasedHalfSteps, kappa=kappa)
        sweeps = ALSMF(
            k=self.k + 2,
            lam=lam,
            identity_tol=self.miss_tol,
            max_sweeps=self.max_sweeps,
            newton_steps=0,
            anderson=self.anderson,
            anderson_store=self.anderson_store,
            seed=self.seed,
            cg_steps=self.cg_steps,
            stall_sweeps=STALL_SWEEPS,
            rescale=True,
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

        The polish stops when a step meets the bound, or on ‖∇f‖ ≤ tol: the bound is at most ‖∇f‖ times the
        longest free row over λ, so tol = miss_tol·λ/that row delivers miss_tol (each round takes it at its start).
        Near rounding ‖∇f‖ can rise again while f falls by a rounding error, so the best round, not the last, is
        kept."""

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
