"""Model policy: what a flow fits on, which trainer, and whether a stored model is reused.

A refresh trains ``DEFAULT_KIND`` unless it names a kind: biased MF for explicit ratings, iALS for implicit feedback
(``policy_kinds.fit_kind``, over the parts on a mapper; in this process with ``select``). The other flows, and a
refresh that names them, train ALS-MF (``models.als.trainer.ALSMF``) or BCE MF on positives and sampled negatives
(``models.implicit_mf.ImplicitMF``) here, over the parts. A model is stored
under a name made of its data's fingerprint and every hyperparameter and budget (``io.model_store.model_path``),
so a run reuses exactly the model it would train. Every trainer takes the same budget knobs: ``max_sweeps``
(alternating sweeps) and ``newton_steps`` (the Newton polish's steps).

Plain Python: messages go to ``logger`` (this module's by default; the flows pass their run's logger).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

from ..io import model_store
from ..io.spill import SpillList
from .als.block_half_steps import BlockHalfSteps
from .als.part_half_steps import PartHalfSteps
from .als.trainer import ALSMF, MIN_TARGET_COS, default_lam
from .base import FactorModel
from .implicit_mf import ImplicitMF, ImplicitModel, looks_implicit, sample_negatives, training_table
from .warm import WarmStart

log = logging.getLogger(__name__)

# What a refresh trains when no model kind is named: by the data (ratings, or implicit feedback: a single rating
# value). Validation decides these (docs/model.md); ``--implicit`` asks for BCE on sampled negatives instead.
DEFAULT_KIND = {"ratings": "biased", "implicit": "ials"}


def resolve_kind(kind: str | None, implicit: bool) -> str:
    """The model kind a flow trains: ``kind`` if named, else ``DEFAULT_KIND`` for the data."""
    return kind or DEFAULT_KIND["implicit" if implicit else "ratings"]


def kind_of(model: FactorModel) -> str:
    """The ``dxplain train --model`` name of a stored model: its explanation follows it."""
    return _kind(model.kind, model.loss)


def stored_kind(path: str) -> str:
    """``kind_of`` a model store from its attributes alone (the factors stay on disk): what table a flow explains
    it against (iALS: the interactions as they are; BCE: positives and sampled negatives)."""
    attrs = model_store.model_attrs(path)
    return _kind(attrs.get("kind"), attrs.get("loss", "squared"))


def _kind(kind: str | None, loss: str) -> str:
    from .biased_mf import KIND as BIASED

    if kind == BIASED:
        return "biased"
    return {"ials": "ials", "bce": "bce"}.get(loss, "mf")


# BCE training stops at ‖∇f‖ ≤ IDENTITY_RTOL·λ: the representer identity's residual in the factors is
# ∇f/λ, so this bounds it in the factors' own units (docs/methods.md §1).
IDENTITY_RTOL = 1e-8


def _store_tags(implicit: bool, k: int, lam, neg_weight: float, seed: int, identity_tol, budget: dict) -> dict:
    """The hyperparameters a stored model is named by, in the order of its name (``model_store.model_path``)."""
    if implicit:
        tags = {"bce-k": k, "lam": lam, "w": neg_weight, "s": seed}
    else:
        tags = {"k": k, "lam": lam, "s": seed, "identity": identity_tol}
    return {**tags, "sweeps": budget.get("max_sweeps"), "newton": budget.get("newton_steps")}


def table_to_fit(ds, implicit: bool, neg_samples: int, seed: int, logger=log):
    """What the model is fitted on and explained against, and whether it is implicit feedback.

    Explicit ratings: the interactions themselves (squared-loss ALS-MF). Implicit feedback (``implicit``,
    or a single rating value, as in click, purchase and review logs): every interaction is a positive
    (y = 1) and ``neg_samples`` uniform unobserved items per positive are negatives (y = 0), the table a
    BCE model is fitted on and its representer attributes over.

    Returns
    -------
    table : Interactions
        ``ds.interactions``, or the BCE training table (|P|·(1 + neg_samples) rows).
    implicit : bool
    """
    data = ds.interactions
    detected = looks_implicit(data)
    if not (implicit or detected):
        return data, False
    nu, ni = sample_negatives(data, neg_samples, seed)
    table = training_table(data, nu, ni)
    logger.info(
        "implicit feedback (%s): BCE MF on %d positives and %d sampled negatives (%d per positive)",
        "a single rating value" if detected else "--implicit",
        len(data),
        len(nu),
        neg_samples,
    )
    return table, True


def warn_if_capped(trainer: ImplicitMF, m: ImplicitModel, logger=log) -> None:
    """Say so when BCE training stopped on its budget (--max-sweeps, --newton-steps) short of rtol·λ."""
    if m.grad_norm > trainer.rtol * m.lam:
        logger.warning(
            "training stopped at ‖∇f‖=%.1e, above its stop %.1e (rtol·λ), on its budget "
            "(--max-sweeps, --newton-steps): the model is short of stationary, so scores and "
            "attributions follow the representer identity only approximately",
            m.grad_norm,
            trainer.rtol * m.lam,
        )


def train_implicit(trainer: ImplicitMF, table, mapper, parts, blocks: bool = False) -> ImplicitModel:
    """BCE MF on a training table (positives and sampled negatives) by alternating half-steps over its
    parts, on the workers: the flow's process holds the factors, not the terms; with ``blocks``, not the
    factors either (``BlockHalfSteps``: U and V in row blocks where the parts are)."""
    return trainer.fit_alternating(
        table, partial(BlockHalfSteps if blocks else PartHalfSteps, mapper, parts), anderson_store=SpillList
    )


def train_or_load(
    name: str,
    data,
    model: str | None,
    out: str,
    k: int,
    lam: float | None,
    seed: int,
    mapper,
    parts,
    budget: dict | None = None,
    implicit: bool = False,
    neg_weight: float = 1.0,
    fidelity_tol: float | None = None,
    blocks: bool = False,
    logger=log,
    spec=None,
    warm: WarmStart | None = None,
):
    """Use ``model`` if given; else reuse the model trained on this exact table, else train and store one.

    ``warm`` (``models.warm``): train from the previous model's factors instead of the seeded random start, to
    the same stopping rule; the model is stored under the cold name's tags plus ``startwarm`` (a cold fit, e.g.
    ``refresh --cold``, never reuses it), and a cold model of this exact table is reused first. BCE's fits start
    cold (its trainer takes no start). ``m.info`` records ``start`` and ``cold_sweeps`` (the sweeps of the last
    cold fit of this lineage).

    ``spec`` (``models.catalog.TrainSettings``): a model kind named by the flow. Biased MF, iALS and any kind's
    ``select`` are trained by ``policy_kinds.fit_kind`` and named by ``policy_kinds.kind_tags``; ``mf`` and ``bce``
    without ``select`` as below (``k``, ``lam``, ``seed`` and ``implicit`` then say the same as ``spec``).

    Explicit data: ALS-MF, its half-steps mapped over ``parts`` (each task reads its part once and keeps
    it for every sweep); ``budget`` caps ALS sweeps and Newton steps (``max_sweeps``, ``newton_steps``), and
    a capped model is stored under its own name. ``fidelity_tol`` (the refresh's ``--tol``) trains until
    the gradient's bound on the identity's relative error is ≤ fidelity_tol·MIN_TARGET_COS
    (``ALSMF.identity_tol``); None trains to ‖∇f‖ ≤ ``ALSMF.tol``. Either is part of the model's name.
    Implicit data (``table_to_fit``): BCE MF on the
    positives and sampled negatives over the parts, to the stationarity the representer identity needs or
    within ``budget`` (sweeps and Newton steps again, a capped model under its own name).

    ``blocks``: the factors stay in row-block files beside the parts (``models.blocks``), trained so
    (``BlockHalfSteps``), stored and read back a block at a time: never whole in this process.
    The Newton polish needs them whole, so training ends on the sweeps, and the model is named for that.

    Returns
    -------
    model : FactorModel or ImplicitModel
    path : str
        Where it is stored (``model`` when given).
    """
    where = (mapper, parts) if blocks else None
    if model:
        logger.info("loading model %s", model)
        m = FactorModel.load(model, data, blocks=where)
        m.check_not_degenerate(data)
        return m, model
    budget = dict(budget or {})
    if blocks and budget.get("newton_steps", 1) != 0:
        logger.warning(
            "the factors stay in row-block files (a prepared dataset): training ends on its sweeps, "
            "without the Newton polish (it needs them in one process)"
        )
        budget["newton_steps"] = 0
    if warm is not None and (implicit or (spec is not None and spec.select) or blocks):
        logger.info("warm start: not for %s; training from a cold start", "--select" if not implicit else "BCE MF")
        warm = None
    if spec is not None and (spec.model in ("biased", "ials") or spec.select):
        return _train_or_load_kind(name, data, out, mapper, parts, budget, spec, fidelity_tol, logger, warm)
    identity_tol = None
    if not implicit:
        lam = lam if lam is not None else default_lam(len(data))
        identity_tol = None if fidelity_tol is None else fidelity_tol * MIN_TARGET_COS
    tags = _store_tags(implicit, k, lam, neg_weight, seed, identity_tol, budget)
    path = model_store.model_path(out, name, data.fingerprint(), **tags)
    for found in _reusable(out, name, data, tags, warm):
        logger.info("reusing model %s (same data fingerprint and hyperparameters)", found)
        m = FactorModel.load(found, data, blocks=where)
        return (ImplicitModel.from_stored(m) if implicit else m), str(found)
    if warm is not None:
        path = model_store.model_path(out, name, data.fingerprint(), **tags, start="warm")
    if implicit:
        trainer = ImplicitMF(k=k, lam=lam, neg_weight=neg_weight, rtol=IDENTITY_RTOL, seed=seed, **budget)
        m = train_implicit(trainer, data, mapper, parts, blocks)
        logger.info(
            "trained BCE MF k=%d λ=%g w=%g: ‖∇f‖=%.1e after %d sweeps + %d Newton steps in %.1fs → %s",
            k,
            m.lam,
            neg_weight,
            m.grad_norm,
            m.info["sweeps"],
            m.info["newton_iters"],
            m.info["seconds"],
            path,
        )
        warn_if_capped(trainer, m, logger)
    else:
        # The Anderson history in files: 0.6 GB at 50M (k = 64) that the flow's process does not hold.
        trainer = ALSMF(k=k, lam=lam, seed=seed, identity_tol=identity_tol, anderson_store=SpillList, **budget)
        m = trainer.fit(
            data,
            half_steps=partial(BlockHalfSteps if blocks else PartHalfSteps, mapper, parts),
            init=None if warm is None else (warm.U, warm.V),
        )
        m = started(m, warm, logger)
        logger.info(
            "trained ALS-MF k=%d λ=%g: ‖∇f‖=%.1e, identity bound %s after %d sweeps + %d Newton steps in %.1fs → %s",
            k,
            lam,
            m.grad_norm,
            m.info.get("identity_bound"),
            m.info["sweeps"],
            m.info["newton_iters"],
            m.info["seconds"],
            path,
        )
        if not trainer.converged(m):
            logger.warning(
                "training stopped at ‖∇f‖=%.1e (identity bound %s), short of its stopping rule (budget "
                "%s): attributions will sum to the score only approximately; the run's fidelity error "
                "says by how much",
                m.grad_norm,
                m.info.get("identity_bound"),
                budget or "default",
            )
    m.save(path, data)
    return m, str(path)


def warm_from_latest(out, name: str, data, kind: str, width: int, forgotten=None, logger=log) -> WarmStart | None:
    """The warm start from the model of the run ``out``'s LATEST names, when it is of this lineage: the same
    dataset name (the model store's prefix), the same model kind and factor width, and none of its ids since
    forgotten (``dxplain forget``: a model that saw them is no start; the fit is cold). None otherwise, with why."""
    from pathlib import PurePosixPath

    from ..errors import InputError
    from ..io import runs
    from ..io.atomic import exists, join
    from .warm import warm_start

    if not exists(join(out, runs.LATEST)):
        return None
    try:
        summary = runs.read_manifest(runs.resolve_run(out))["summary"]
    except InputError:
        return None
    path = summary.get("model")
    why = None
    if not path or not model_store.exists(path):
        why = f"the last run's model {path} is gone"
    elif summary.get("model_kind") != kind:
        why = f"the last run's model is {summary.get('model_kind')}, this run trains {kind}"
    elif not PurePosixPath(str(path)).name.startswith(f"{name}-"):
        why = f"the last run's model was fitted on other data than {name!r}"
    if why is None:
        U, V, attrs = model_store.read_model(path)
        ids = model_store.read_model_ids(path)
        if U.shape[1] != width:
            why = f"the last run's model has {U.shape[1]} factor columns, this run {width}"
        elif forgotten and (forgotten.forgets(ids[0], "user").any() or forgotten.forgets(ids[1], "item").any()):
            why = "the last run's model saw ids forgotten since"
    if why is not None:
        logger.info("cold start: %s", why)
        return None
    info = attrs.get("info") or {}
    cold_sweeps = info.get("cold_sweeps", info.get("sweeps") if info.get("start", "cold") == "cold" else None)
    return warm_start(str(path), U, V, ids, data, int(attrs.get("n_train") or 0), cold_sweeps)


def _reusable(out, name, data, tags: dict, warm) -> list:
    """The stored models of this exact table and these settings a run may reuse: the cold fit's, and, for a run
    that would start warm, a warm fit's too."""
    names = [model_store.model_path(out, name, data.fingerprint(), **tags)]
    if warm is not None:
        names.append(model_store.model_path(out, name, data.fingerprint(), **tags, start="warm"))
    return [p for p in names if model_store.exists(p)]


def started(m: FactorModel, warm: WarmStart | None, logger=log) -> FactorModel:
    """``m`` with its start in ``info`` (``start``, ``cold_sweeps``, and the warm start's record), logged."""
    sweeps = m.info.get("sweeps")
    if warm is None:
        return replace(m, info={**m.info, "start": "cold", "cold_sweeps": sweeps})
    record = warm.record(m.n_train, sweeps)
    logger.info(
        "warm start from %s: %d rows added, %d new users, %d new items; %s sweeps (the last cold fit: %s)",
        warm.source,
        record["rows_added"],
        warm.users_new,
        warm.items_new,
        sweeps,
        warm.cold_sweeps,
    )
    return replace(m, info={**m.info, "start": "warm", "cold_sweeps": warm.cold_sweeps, "warm": record})


def _train_or_load_kind(name, data, out, mapper, parts, budget: dict, spec, fidelity_tol, logger, warm=None):
    """``train_or_load`` for the kinds of ``policy_kinds``: reuse the model of these tags, else fit and store it."""
    from .policy_kinds import fit_kind, kind_tags

    tags = kind_tags(spec, data, budget, fidelity_tol)
    for found in _reusable(out, name, data, tags, warm):
        logger.info("reusing model %s (same data fingerprint, model kind and settings)", found)
        return FactorModel.load(found, data), str(found)
    path = model_store.model_path(out, name, data.fingerprint(), **tags, **({"start": "warm"} if warm else {}))
    m = started(fit_kind(spec, data, mapper, parts, budget, fidelity_tol, logger, warm), warm, logger)
    logger.info(
        "trained %s k=%d λ=%g %s: ‖∇f‖=%s, identity bound %s after %s sweeps in %.1fs → %s",
        spec.model,
        spec.k,
        m.lam,
        {key: v for key, v in m.settings.items() if key not in ("objective", "selected", "bias_columns")},
        m.grad_norm,
        m.info.get("identity_bound", m.info.get("miss_bound")),
        m.info.get("sweeps"),
        m.info.get("seconds", float("nan")),
        path,
    )
    m.save(path, data)
    return m, str(path)
