"""The model policy for the kinds beyond a flow's defaults: biased MF, iALS, and any kind's ``select``.

``models.policy.train_or_load`` calls these when a flow names a model kind (``models.catalog.TrainSettings``, as
``dxplain train`` takes it): ``kind_tags`` names the stored model by its kind and settings, ``fit_kind`` trains it.

- ``biased``: ``BiasedMF``, its half-steps over the parts on the mapper where the flow has parts (in this process
  otherwise), to the miss that keeps every target within the
  flow's ``--tol`` of max(|s|, the score floor) (``models.biased_mf.score_floor``);
- ``ials``: ``IALS`` over the parts on the mapper (``IALSHalfSteps.over_parts``), to the identity bound
  tol·MIN_TARGET_COS (relative, as ALS-MF's), or in this process without parts;
- ``select``: the kind's validation search (``catalog.select_mf``, ``biased_select.select``,
  ``ials_select.select``) in this process on the whole table, then the refit on all of it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

from ..errors import InputError
from .als.trainer import ALSMF, MIN_TARGET_COS
from .base import FactorModel
from .catalog import TrainSettings

log = logging.getLogger(__name__)


def _whole(data, what: str):
    if not hasattr(data, "rating"):  # a TableSummary: the rows are in the parts only
        raise InputError(
            f"{what} trains in this process on the whole table, which this flow holds in parts only: "
            "give the data as a file (Parquet/CSV) or let the flow load it whole"
        )
    return data


def _warn_capped(logger, stopped: str, bound, stop: float) -> None:
    logger.warning(
        "%s %s, above its stop %.1e, on its budget (--max-sweeps, --newton-steps): attributions sum to the "
        "score only approximately; the run's fidelity error says by how much",
        stopped,
        bound,
        stop,
    )


def _biased_trainer(spec: TrainSettings, data, budget: dict, fidelity_tol: float | None):
    from .biased_mf import BiasedMF, score_floor

    trainer = BiasedMF(k=spec.k, lam=spec.lam, lam_bias=spec.lam_bias, seed=spec.seed, **budget)
    if fidelity_tol is not None:
        trainer = replace(trainer, miss_tol=fidelity_tol * score_floor(data))
    return trainer


def _ials_trainer(spec: TrainSettings, budget: dict, fidelity_tol: float | None):
    from .ials import DEFAULT_ALPHA, IALS, IDENTITY_TOL, check_settings

    convention = spec.convention or "implicit"
    alpha = spec.alpha if spec.alpha is not None else DEFAULT_ALPHA
    check_settings(convention, alpha, spec.lam)
    identity_tol = IDENTITY_TOL if fidelity_tol is None else fidelity_tol * MIN_TARGET_COS
    sweeps = {key: budget[key] for key in ("max_sweeps", "newton_steps") if key in budget}
    return IALS(
        k=spec.k, lam=spec.lam, alpha=alpha, convention=convention, seed=spec.seed, identity_tol=identity_tol, **sweeps
    )


def kind_tags(spec: TrainSettings, data, budget: dict, fidelity_tol: float | None) -> dict:
    """The hyperparameters a stored model of ``spec``'s kind is named by (``io.model_store.model_path``): kind,
    rank, the loss's settings (resolved defaults, so a default and the same value given share a model), seed,
    stopping rule, budget, and whether its settings were selected (the given ones then restrict the grid)."""
    selected = 1 if spec.select else None
    budget_tags = {"sweeps": budget.get("max_sweeps"), "newton": budget.get("newton_steps")}
    if spec.model == "biased":
        t = _biased_trainer(spec, data, budget, fidelity_tol)
        lam, lam_bias = t.resolved(len(data))
        if spec.select:
            lam, lam_bias = spec.lam, spec.lam_bias
        return {
            "biased-k": spec.k,
            "lam": lam,
            "lamb": lam_bias,
            "s": spec.seed,
            "miss": t.miss_tol,
            "select": selected,
            **budget_tags,
        }
    if spec.model == "ials":
        t = _ials_trainer(spec, budget, fidelity_tol)
        lam, alpha = (spec.lam, spec.alpha) if spec.select else (t.lam_, t.alpha)
        return {
            "ials-k": spec.k,
            "conv": t.convention,
            "lam": lam,
            "a": alpha,
            "s": spec.seed,
            "identity": t.identity_tol,
            "select": selected,
            "sweeps": budget.get("max_sweeps"),
        }
    identity_tol = None if fidelity_tol is None else fidelity_tol * MIN_TARGET_COS  # mf --select: λ from its grid
    return {"k": spec.k, "s": spec.seed, "identity": identity_tol, "select": selected, **budget_tags}


def fit_kind(
    spec: TrainSettings, data, mapper, parts, budget: dict, fidelity_tol: float | None, logger=log, warm=None
) -> FactorModel:
    """Train the model ``spec`` names (module docstring); ``budget`` caps sweeps (and biased MF's Newton steps);
    ``warm`` (``models.warm.WarmStart``, not with ``select``) starts from its factors."""
    init = None if warm is None else (warm.U, warm.V)
    if spec.model == "biased":
        trainer = _biased_trainer(spec, data, budget, fidelity_tol)
        if spec.select:
            from .biased_select import select

            lams = None if spec.lam is None else (spec.lam,)
            biases = None if spec.lam_bias is None else (spec.lam_bias,)
            data = _whole(data, "biased MF's --select")
            return select(data, ks=(spec.k,), lams=lams, lam_biases=biases, seed=spec.seed, trainer=trainer)
        if parts is None:
            m = trainer.fit(_whole(data, "biased MF"), init=init)
        else:  # the half-steps as tasks over the parts; the Anderson history in files, as ALS-MF's
            from ..io.spill import SpillList
            from .biased_half_steps import BiasedPartHalfSteps

            trainer = replace(trainer, anderson_store=SpillList)
            m = trainer.fit(data, half_steps=partial(BiasedPartHalfSteps, mapper, parts), init=init)
        if not trainer.converged(m):
            _warn_capped(logger, "biased MF stopped at a miss bound", m.info.get("miss_bound"), trainer.miss_tol)
        return m
    if spec.model == "ials":
        trainer = _ials_trainer(spec, budget, fidelity_tol)
        if spec.select:
            from .ials_select import select

            lams = None if spec.lam is None else (spec.lam,)
            alphas = None if spec.alpha is None else (spec.alpha,)
            return select(_whole(data, "iALS --select"), trainer, lams=lams, alphas=alphas, seed=spec.seed)
        if parts is not None:
            from .ials_half_steps import IALSHalfSteps

            m = trainer.fit(data, half_steps=partial(IALSHalfSteps.over_parts, mapper, parts), init=init)
        else:
            m = trainer.fit(data, init=init)
        if not trainer.converged(m):
            _warn_capped(
                logger, "iALS stopped at an identity bound", m.info.get("identity_bound"), trainer.identity_tol
            )
        return m
    if spec.model == "mf" and spec.select:
        from .catalog import select_mf

        identity_tol = None if fidelity_tol is None else fidelity_tol * MIN_TARGET_COS
        trainer = ALSMF(k=spec.k, lam=spec.lam, seed=spec.seed, identity_tol=identity_tol, **budget)
        return select_mf(_whole(data, "--select"), trainer, spec.seed)
    raise ValueError(f"fit_kind trains biased, ials and --select; {spec.model!r} is models.policy's own")
