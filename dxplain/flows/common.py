"""What every flow shares: loading, partitioning, training or reusing the model, the mapper, stage timing.

A flow reads as config → io → mapper → io. ``open_mapper`` is the one place that decides between this
process and a Dask cluster; algorithms take the mapper it yields and never branch on it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from .. import ingest
from ..config import Settings
from ..datasets import resolve_dataset
from ..datasets.registry import resolve_prepared
from ..errors import DxplainError
from ..io import model_store, partitions, runs
from ..io.atomic import Location, join
from ..io.dataset_folders import read_catalogue_ids
from ..io.spill import SpillList
from ..mapper import LocalMapper, Mapper, peak_rss_mib
from ..models.base import FactorModel
from ..models.implicit_mf import ImplicitMF, ImplicitModel, looks_implicit, sample_in_parts, sample_negatives
from ..models.implicit_mf import training_table as implicit_table
from ..models.mf import ALSMF, MIN_TARGET_COS, BlockHalfSteps, PartHalfSteps, default_lam

# BCE training stops at ‖∇f‖ ≤ IDENTITY_RTOL·λ: the representer identity's residual in the factors is
# ∇f/λ, so this bounds it in the factors' own units (docs/methods.md §1).
IDENTITY_RTOL = 1e-8


def transient(task_, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry what may pass (I/O, a lost worker), never a user's bad input."""
    try:
        state.result()
    except DxplainError:
        return False
    except Exception:  # noqa: BLE001 - anything else may be transient
        return True
    return False


@contextlib.contextmanager
def open_mapper(settings: Settings, in_memory: bool = False, shared: str | None = None) -> Iterator[Mapper]:
    """This process (``in_memory``), or a Dask cluster: ``settings.scheduler`` or a LocalCluster sized for
    the machine. The only branch between the two in the flows.

    ``shared`` is a location the workers write to: a cluster refuses one they cannot see (``memory://``)
    before it starts.
    """
    if in_memory:
        yield LocalMapper()
        return
    if shared is not None:
        runs.check_shared(shared)
    from ..distributed.cluster import connect
    from ..distributed.mapper import DaskMapper

    with connect(settings) as client:
        yield DaskMapper(client)


@contextlib.contextmanager
def stage(seconds: dict, name: str, peaks: dict | None = None, workers: tuple | None = None):
    """Record the wall seconds of one stage of a flow (reported in its summary) and, into ``peaks``, this
    process's peak RSS (VmHWM, MiB) at its end: the first stage whose value jumps is the one that set it.
    ``workers`` = (mapper, dict): the same for the workers (the largest VmHWM among them), read only when
    the stage succeeded (a failed one may have lost a worker, and the error matters more)."""
    t = time.perf_counter()
    try:
        yield
        if workers is not None:
            mapper, into = workers
            peak = max(mapper.peak_rss_mib()["workers"].values(), default=None)  # none in one process
            if peak is not None:
                into[name] = peak
    finally:
        seconds[name] = round(time.perf_counter() - t, 2)
        if peaks is not None:
            peaks[name] = peak_rss_mib()


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=transient, cache_policy=NO_CACHE)
def load_data(dataset: str, settings: Settings):
    ds = resolve_dataset(dataset, settings)
    get_run_logger().info(
        "dataset %s: %d interactions, %d users, %d items",
        ds.name,
        len(ds.interactions),
        ds.interactions.n_users,
        ds.interactions.n_items,
    )
    return ds


@dataclass(frozen=True)
class Training:
    """What a flow trains on: the table whole (``Interactions``), or, read by tasks from a prepared
    dataset (``source``), its ``TableSummary``, the rows left to the parts."""

    name: str
    data: object  # Interactions | TableSummary
    implicit: bool
    source: Location | None = None  # the prepared dataset folder (or sampled D) holding interactions.parquet


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=transient, cache_policy=NO_CACHE)
def load_training(
    dataset: str, settings: Settings, mapper: Mapper, implicit: bool, neg_samples: int, seed: int
) -> Training:
    """A prepared dataset is scanned by tasks (``ingest.scan_source``): this process keeps ids, degrees
    and rating statistics, O(users + items). Implicit feedback from it (``implicit``, or a single rating
    value) is partitioned as positives and its negatives sampled by tasks (``sampled_training``). A bare
    file or a URL is loaded whole."""
    folder = resolve_prepared(dataset, settings)
    if folder is not None:
        t = time.perf_counter()
        summary = ingest.scan_source(mapper, folder / "interactions.parquet", *read_catalogue_ids(folder))
        get_run_logger().info(
            "dataset %s: %d interactions, %d users, %d items (scanned by tasks in %.1fs)",
            folder.name,
            len(summary),
            summary.n_users,
            summary.n_items,
            time.perf_counter() - t,
        )
        positives = Training(folder.name, summary, False, folder)
        detected = looks_implicit(summary)
        if not (implicit or detected):
            return positives
        get_run_logger().info(
            "implicit feedback (%s): every interaction a positive, %d sampled negatives per positive",
            "a single rating value" if detected else "--implicit",
            neg_samples,
        )
        return sampled_training(positives, settings.out, mapper, neg_samples, seed)
    ds = load_data.fn(dataset, settings)
    data, implicit = training_table.fn(ds, implicit, neg_samples, seed)
    return Training(ds.name, data, implicit)


def sampled_training(positives: Training, out: str, mapper: Mapper, per_positive: int, seed: int) -> Training:
    """The BCE training table D = P ∪ N of a scanned dataset's interactions (all positives): P in parts,
    then each by-user part's negatives sampled by a task that writes its rows of D
    (``implicit_mf.sample_in_parts``); ``partition`` then parts D from those files. Nothing of D here."""
    t = time.perf_counter()
    P_parts = partition.fn(positives, out, mapper)
    source = join(P_parts.root, f"sampled-m{per_positive}-s{seed}")
    summary = sample_in_parts(mapper, P_parts, per_positive, seed, join(source, "interactions.parquet"))
    get_run_logger().info(
        "sampled %d negatives for %d positives in %d tasks (%.1fs)",
        len(summary) - len(positives.data),
        len(positives.data),
        len(P_parts.user_cuts) - 1,
        time.perf_counter() - t,
    )
    return Training(positives.name, summary, True, source)


@task(cache_policy=NO_CACHE)
def partition(training: Training, out: str, mapper: Mapper):
    """The training table as by-user and by-item Parquet parts: what training and explanation shards
    read. A scanned table's parts are written by tasks from its file (``ingest.stream_partitions``)."""
    t = time.perf_counter()
    root = partitions.store_path(out, training.name, training.data)
    if training.source is not None:
        parts = ingest.stream_partitions(mapper, join(training.source, "interactions.parquet"), training.data, root)
    else:
        parts = partitions.write_partitions(root, training.data)
    get_run_logger().info(
        "interactions in %d by-user and %d by-item parts at %s (%.1fs)",
        len(parts.user_cuts) - 1,
        len(parts.item_cuts) - 1,
        parts.root,
        time.perf_counter() - t,
    )
    return parts


@task(cache_policy=NO_CACHE)
def training_table(ds, implicit: bool, neg_samples: int, seed: int):
    """What the model is fitted on and explained against, and whether it is implicit feedback.

    Explicit ratings: the interactions themselves (squared-loss ALS-MF). Implicit feedback (``implicit``,
    or a single rating value, as in click, purchase and review logs): every interaction is a positive
    (y = 1) and ``neg_samples`` uniform unobserved items per positive are negatives (y = 0), the table a
    BCE model is fitted on and its representer attributes over.
    """
    data = ds.interactions
    detected = looks_implicit(data)
    if not (implicit or detected):
        return data, False
    nu, ni = sample_negatives(data, neg_samples, seed)
    table = implicit_table(data, nu, ni)
    get_run_logger().info(
        "implicit feedback (%s): BCE MF on %d positives and %d sampled negatives (%d per positive)",
        "a single rating value" if detected else "--implicit",
        len(data),
        len(nu),
        neg_samples,
    )
    return table, True


def warn_if_capped(trainer: ImplicitMF, m: ImplicitModel) -> None:
    """Say so when BCE training stopped on its budget (--max-sweeps, --newton-steps) short of rtol·λ."""
    if m.grad_norm > trainer.rtol * m.lam:
        get_run_logger().warning(
            "training stopped at ‖∇f‖=%.1e, above its stop %.1e (rtol·λ), on its budget "
            "(--max-sweeps, --newton-steps): the model is short of stationary, so scores and "
            "attributions follow the representer identity only approximately",
            m.grad_norm,
            trainer.rtol * m.lam,
        )


def train_implicit(trainer: ImplicitMF, table, mapper: Mapper, parts, blocks: bool = False) -> ImplicitModel:
    """BCE MF on a training table (positives and sampled negatives) by alternating half-steps over its
    parts, on the workers: the flow's process holds the factors, not the terms; with ``blocks``, not the
    factors either (``models.mf.BlockHalfSteps``: U and V in row blocks where the parts are)."""
    return trainer.fit_alternating(
        table, partial(BlockHalfSteps if blocks else PartHalfSteps, mapper, parts), anderson_store=SpillList
    )


@task(cache_policy=NO_CACHE)
def train_or_load(
    name: str,
    data,
    model: str | None,
    out: str,
    k: int,
    lam: float | None,
    seed: int,
    mapper: Mapper,
    parts,
    budget: dict | None = None,
    implicit: bool = False,
    neg_weight: float = 1.0,
    fidelity_tol: float | None = None,
    blocks: bool = False,
):
    """Use ``model`` if given; else reuse the model trained on this exact table, else train and store one.

    Explicit data: ALS-MF, its half-steps mapped over ``parts`` (each task reads its part once and keeps
    it for every sweep); ``budget`` caps ALS sweeps and Newton steps (``max_sweeps``, ``polish_iters``), and
    a capped model is stored under its own name. ``fidelity_tol`` (the refresh's ``--tol``) trains until
    the gradient's bound on the identity's relative error is ≤ fidelity_tol·MIN_TARGET_COS
    (``ALSMF.identity_tol``); None trains to ‖∇f‖ ≤ ``ALSMF.tol``. Either is part of the model's name.
    Implicit data (``training_table``): BCE MF on the
    positives and sampled negatives over the parts, to the stationarity the representer identity needs or
    within ``budget`` (sweeps and Newton steps again, a capped model under its own name).

    ``blocks``: the factors stay in row-block files beside the parts (``models.blocks``), trained so
    (``models.mf.BlockHalfSteps``), stored and read back a block at a time: never whole in this process.
    The Newton polish needs them whole, so training ends on the sweeps, and the model is named for that.
    """
    logger = get_run_logger()
    where = (mapper, parts) if blocks else None
    if model:
        logger.info("loading model %s", model)
        m = FactorModel.load(model, data, blocks=where)
        m.check_not_degenerate(data)
        return m, model
    budget = dict(budget or {})
    if blocks and budget.get("polish_iters", 1) != 0:
        logger.warning(
            "the factors stay in row-block files (a prepared dataset): training ends on its sweeps, "
            "without the Newton polish (it needs them in one process)"
        )
        budget["polish_iters"] = 0
    if implicit:
        path = model_store.model_path(
            out,
            name,
            data.fingerprint(),
            **{"bce-k": k},
            lam=lam,
            w=neg_weight,
            s=seed,
            sweeps=budget.get("max_sweeps"),
            newton=budget.get("polish_iters"),
        )
    else:
        lam = lam if lam is not None else default_lam(len(data))
        identity_tol = None if fidelity_tol is None else fidelity_tol * MIN_TARGET_COS
        path = model_store.model_path(
            out,
            name,
            data.fingerprint(),
            k=k,
            lam=lam,
            s=seed,
            identity=identity_tol,
            sweeps=budget.get("max_sweeps"),
            newton=budget.get("polish_iters"),
        )
    if model_store.exists(path):
        logger.info("reusing model %s (same data fingerprint and hyperparameters)", path)
        m = FactorModel.load(path, data, blocks=where)
        return (ImplicitModel.from_stored(m) if implicit else m), str(path)
    if implicit:
        caps = {"max_iter" if key == "max_sweeps" else key: v for key, v in budget.items()}  # ImplicitMF's names
        trainer = ImplicitMF(k=k, lam=lam, neg_weight=neg_weight, rtol=IDENTITY_RTOL, seed=seed, **caps)
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
        warn_if_capped(trainer, m)
    else:
        # The Anderson history in files: 0.6 GB at 50M (k = 64) that the flow's process does not hold.
        trainer = ALSMF(k=k, lam=lam, seed=seed, identity_tol=identity_tol, anderson_store=SpillList, **budget)
        m = trainer.fit(data, half_steps=partial(BlockHalfSteps if blocks else PartHalfSteps, mapper, parts))
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
