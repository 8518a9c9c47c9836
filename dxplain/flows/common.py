"""What every flow shares: loading, partitioning, training or reusing the model, the mapper, stage timing.

A flow reads as config → io → mapper → io. ``open_mapper`` is the one place that decides between this
process and a Dask cluster; algorithms take the mapper it yields and never branch on it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from .. import ingest
from ..config import Settings
from ..datasets import resolve_dataset
from ..datasets.registry import resolve_prepared
from ..errors import DxplainError
from ..forgotten import Forgotten
from ..io import partitions, runs
from ..io.atomic import Location, join
from ..io.dataset_folders import read_catalogue_ids
from ..io.forgotten import FORGOTTEN, read_forgotten
from ..io.tables import parquet_shape
from ..mapper import LocalMapper, Mapper, peak_rss_mib
from ..models import policy
from ..models.implicit_mf import looks_implicit, sample_in_parts


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
    implicit: bool  # the BCE training table: positives and sampled negatives
    source: Location | None = None  # the prepared dataset folder (or sampled D) holding interactions.parquet
    kind: str | None = None  # the model kind resolved for a flow that named one (``models.policy.resolve_kind``)
    forgotten: Forgotten | None = None  # ids whose rows the parts leave out (``dxplain forget``)
    dropped: int = 0  # the rows of forgotten ids left out at load


def resolved_kind(spec, implicit: bool) -> str:
    """The model kind of ``spec`` (a ``models.catalog.TrainSettings`` whose ``model`` None means the data's
    default, ``policy.resolve_kind``), its settings checked against it (``--model-kind``'s messages)."""
    kind = policy.resolve_kind(spec.model, implicit)
    replace(spec, model=kind).check("--model-kind")
    return kind


def in_process(spec, kind: str) -> bool:
    """Whether the kind trains in this process on the whole table: any kind's ``select`` (biased MF, ALS-MF and
    iALS train over the parts)."""
    return bool(spec.select)


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=transient, cache_policy=NO_CACHE)
def folder_name(folder) -> str:
    """A dataset folder's own name (its last path part), for a local folder and a URL alike."""
    return str(folder).rstrip("/").rsplit("/", 1)[-1]


def load_training(
    dataset: str, settings: Settings, mapper: Mapper, implicit: bool, neg_samples: int, seed: int, spec=None
) -> Training:
    """A prepared dataset is scanned by tasks (``ingest.scan_source``): this process keeps ids, degrees
    and rating statistics, O(users + items). Implicit feedback from it (``implicit``, or a single rating
    value) is partitioned as positives and its negatives sampled by tasks (``sampled_training``). A bare
    file or a URL is loaded whole.

    ``spec`` (a flow that names a model kind, ``models.catalog.TrainSettings``): negatives are sampled for the
    BCE model only, and a kind that trains in this process (``in_process``) gets the table whole; the kind
    resolved for the data is ``Training.kind``."""
    forgotten = read_forgotten(settings.out) or None
    folder = resolve_prepared(dataset, settings)
    if folder is not None:
        t = time.perf_counter()
        file = join(folder, "interactions.parquet")
        summary = ingest.scan_source(mapper, file, *read_catalogue_ids(folder), forgotten=forgotten)
        get_run_logger().info(
            "dataset %s: %d interactions, %d users, %d items (scanned by tasks in %.1fs)",
            folder_name(folder),
            len(summary),
            summary.n_users,
            summary.n_items,
            time.perf_counter() - t,
        )
        dropped = forgetting(forgotten, parquet_shape(file)[1] - len(summary), settings.out)
        detected = looks_implicit(summary)
        kind = None if spec is None else resolved_kind(spec, implicit or detected)
        if kind is not None and in_process(spec, kind):
            get_run_logger().info("%s trains in this process: the table is loaded whole", kind)
            ds = without_forgotten(load_data.fn(dataset, settings), forgotten)
            return Training(ds.name, ds.interactions, False, None, kind, forgotten, dropped)
        positives = Training(folder_name(folder), summary, False, folder, kind, forgotten, dropped)
        if (kind != "bce") if kind is not None else not (implicit or detected):
            return positives
        get_run_logger().info(
            "implicit feedback (%s): every interaction a positive, %d sampled negatives per positive",
            "a single rating value" if detected else "--implicit",
            neg_samples,
        )
        return replace(sampled_training(positives, settings.out, mapper, neg_samples, seed), kind=kind, dropped=dropped)
    ds = load_data.fn(dataset, settings)
    n = len(ds.interactions)
    ds = without_forgotten(ds, forgotten)
    dropped = forgetting(forgotten, n - len(ds.interactions), settings.out)
    if spec is not None:
        kind = resolved_kind(spec, implicit or looks_implicit(ds.interactions))
        if kind != "bce":
            return Training(ds.name, ds.interactions, False, None, kind, forgotten, dropped)
        implicit = True
    else:
        kind = None
    data, implicit = policy.table_to_fit(ds, implicit, neg_samples, seed, get_run_logger())
    return Training(ds.name, data, implicit, None, kind, forgotten, dropped)


def without_forgotten(ds, forgotten: Forgotten | None):
    """The dataset with the forgotten ids' rows (and ids left without rows) removed from its interactions."""
    if not forgotten:
        return ds
    return replace(ds, interactions=forgotten.drop_from(ds.interactions)[0])


def forgetting(forgotten: Forgotten | None, dropped: int, out) -> int:
    """Say what ``dxplain forget``'s list left out of this load; the rows dropped."""
    if forgotten:
        get_run_logger().info(
            "forgotten ids (%s): %d user(s) and %d item(s) listed, %d row(s) of theirs dropped at load",
            join(out, FORGOTTEN),
            len(forgotten.users),
            len(forgotten.items),
            dropped,
        )
    return dropped


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
        parts = ingest.stream_partitions(
            mapper, join(training.source, "interactions.parquet"), training.data, root, forgotten=training.forgotten
        )
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


def warn_if_capped(trainer, m) -> None:
    """``models.policy.warn_if_capped``, said in the run's log."""
    policy.warn_if_capped(trainer, m, get_run_logger())


@task(cache_policy=NO_CACHE)
def train_or_load(*args, **kwargs):
    """``models.policy.train_or_load`` (fit or reuse the model, the same arguments) as a task that logs to the run."""
    return policy.train_or_load(*args, **kwargs, logger=get_run_logger())
