"""The nightly explanation refresh.

scan the interactions (tasks over a prepared dataset's row groups; this process keeps ids and degrees) →
partition them by tasks (by user, by item) → train (or load) the model, ALS shards reading
the parts → preprocess (Ũ, Ṽ, α beside the parts) → shard users over Dask: each shard's targets
(recommended or supplied) → the user side per range of items, all shards' targets on them at once → each shard
explains its item side, gathers its user side and writes one Parquet file atomically → manifest →
move LATEST.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pyarrow.compute as pc
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ..config import Settings
from ..errors import InputError
from ..explain.representer import PREDICTION, check_explainable
from ..io import runs
from ..io.forgotten import read_forgotten
from ..io.lock import out_lock
from ..io.targets import read_targets
from ..kernels.ials import CONVENTIONS
from ..models.als.trainer import DEFAULT_K
from ..models.catalog import MODELS, TrainSettings
from ..models.policy import kind_of, stored_kind, warm_from_latest
from ..params import CLUSTER, FACTORS, SAMPLED_NEGATIVES, Interval, OneOf, validate
from ..refresh import PassResults, RefreshJob, alpha_pass, run_passes, run_summary, shard_count, shard_users
from ..reporting import diff
from .common import load_training, open_mapper, partition, stage, train_or_load

CONSTRAINTS = {
    **FACTORS,
    "top_n": Interval(int, 1, example=10),
    "top_k": Interval(int, 0, example=10),
    "top_unobserved": Interval(int, 0, example=5),
    **CLUSTER,
    "max_sweeps": Interval(int, 1, example=60),
    "newton_steps": Interval(int, 0),
    **SAMPLED_NEGATIVES,
    "tol": Interval(float, 0, open_low=True, example=1e-4),
    "keep": Interval(int, 1, example=7),
    "model_kind": OneOf(*MODELS),
    "convention": OneOf(*CONVENTIONS),
    "alpha": Interval(float, 0, open_low=True, example=1.0),
    "lam_bias": Interval(float, 0, open_low=True, example=1e-4),
    "lock_wait": Interval(float, 0, example=600),
}


def check_kind_options(values: dict) -> None:
    """Refuse a model kind's settings that do not go together (InputError), before anything runs: iALS's
    ``convention``/``alpha`` and biased MF's ``lam_bias`` with another kind, ``select`` with BCE, ``implicit`` (BCE
    on sampled negatives) with a ratings model, or settings that train a model beside a given ``model`` store."""
    kind = values.get("model_kind")
    trains = [name for name in ("convention", "alpha", "lam_bias") if values.get(name) is not None]
    if values.get("select"):
        trains.append("select")
    if values.get("model") and trains:
        flags = ", ".join("--" + n.replace("_", "-") for n in trains)
        raise InputError(f"{flags}: settings of a model to train; --model gives a stored one: drop them, or --model")
    if kind is None:
        if values.get("convention") is not None or values.get("alpha") is not None:
            raise InputError("--convention and --alpha are iALS's settings: pass --model-kind ials with them")
        if values.get("lam_bias") is not None:
            raise InputError("--lam-bias is biased MF's setting: pass --model-kind biased with it")
        return
    spec = TrainSettings(
        model=kind,
        lam_bias=values.get("lam_bias"),
        convention=values.get("convention"),
        alpha=values.get("alpha"),
        select=bool(values.get("select")),
    )
    spec.check("--model-kind")
    if values.get("implicit") and kind in ("mf", "biased"):
        raise InputError(
            f"--implicit trains BCE on sampled negatives; --model-kind {kind} fits ratings: drop --implicit, or "
            "pass --model-kind bce (or ials, which needs no sampled negatives)"
        )


@task(cache_policy=NO_CACHE)
def preprocess(m, data, parts, top_n: int, top_k: int, targets, mapper, top_unobserved: int = 0) -> RefreshJob:
    """The model's factors here (balanced for the plain models); α, B and Bx by tasks over the parts
    (``refresh.alpha``), α written beside them for the shards to read; the job that the passes share."""
    logger = get_run_logger()
    if m.lam is None:
        logger.warning(
            "the model has no λ (imported factors): global importance omits the factor "
            "1/(λ|D|), so importances are relative — their ranking and signs are unchanged, "
            "but they do not sum to the score"
        )
    check_explainable(m, data)
    parts, factors = alpha_pass(m, parts, mapper, data)
    return RefreshJob(
        parts, factors, data.item_degree(), top_n=top_n, top_k=top_k, targets=targets, top_unobserved=top_unobserved
    )


def model_settings(m) -> dict:
    """The loss's settings a run's summary shows (iALS: convention, alpha; biased MF: lam_bias, kappa), and the
    values ``select`` chose (without its grid, which the model store keeps)."""
    out = {key: v for key, v in m.settings.items() if key not in ("objective", "bias_columns", "fixed_columns")}
    if "selected" in out:
        out["selected"] = {key: v for key, v in out["selected"].items() if key != "grid"}
    return out


@task(cache_policy=NO_CACHE)
def explain_all(job: RefreshJob, data, n_shards: int, run_dir: str, mapper) -> PassResults:
    """The three passes (``refresh.passes``): shard entries and the passes' task results."""
    return run_passes(mapper, job, shard_users(data, n_shards), run_dir)


@task(cache_policy=NO_CACHE)
def compare_with_previous(out: str, run_dir: str, ids: tuple) -> dict | None:
    """What changed since the run LATEST names (the one this run will replace): ``_meta/changes.parquet`` beside
    this run (``reporting.diff.changes``, from both runs' targets files) and its counts for the summary; None
    for the first run, or when the previous run has no targets file (written before they were). ``ids``: this
    run's (user ids, item ids)."""
    previous = runs.latest_run(out)
    before = None if previous is None else runs.read_meta_table(previous, runs.TARGETS)
    after = runs.read_meta_table(run_dir, runs.TARGETS)
    if before is None or after is None:
        return None
    if before.schema.field("user").type != after.schema.field("user").type:
        get_run_logger().info("changes: the previous run's ids are of another type; not compared")
        return None
    if read_forgotten(out):
        # The previous run's targets of ids forgotten since, or of ids forgetting left without rows (an item only a
        # forgotten user rated), leave no trace in this run: only ids this run's data still has are compared.
        known = pc.and_(
            pc.is_in(before["user"], value_set=ids[0].cast(before["user"].type)),
            pc.is_in(before["item"], value_set=ids[1].cast(before["item"].type)),
        )
        before = before.filter(known)
    changed = diff.changes(before, after)
    runs.write_meta_table(run_dir, runs.CHANGES, changed)
    found = {"from": str(previous).rstrip("/").rsplit("/", 1)[-1], **diff.counts(changed)}
    get_run_logger().info(
        "since %s: %d users' recommendations changed (%d entered, %d left); dxplain diff --out %s says why",
        found["from"],
        found["users_changed"],
        found["entered"],
        found["left"],
        out,
    )
    return found


@task(cache_policy=NO_CACHE)
def publish(out: str, run_dir: str, entries: list[dict], meta: dict) -> dict:
    manifest = {**meta, "shards": entries}
    runs.finish_run(out, run_dir, manifest)
    return manifest


@flow(name="dxplain-refresh", log_prints=True)
def refresh(
    dataset: str = "movielens-100k",
    model: str | None = None,
    out: str | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    top_n: int = 10,
    top_k: int = 10,
    top_unobserved: int = 0,
    targets: str | None = None,
    shards: int | None = None,
    k: int = DEFAULT_K,
    lam: float | None = None,
    seed: int = 0,
    in_memory: bool = False,
    max_sweeps: int | None = None,
    newton_steps: int | None = None,
    implicit: bool = False,
    neg_samples: int = 4,
    neg_weight: float = 1.0,
    tol: float = 1e-4,
    strict: bool = False,
    keep: int | None = None,
    skip_unseen: bool = False,
    model_kind: str | None = None,
    convention: str | None = None,
    alpha: float | None = None,
    lam_bias: float | None = None,
    select: bool = False,
    lock_wait: float = 3600.0,
    cold: bool = False,
) -> dict:
    """Explain every user's top-N recommendations (or a supplied target list) and publish the run.

    Parameters
    ----------
    dataset : str
        Dataset name or path (prepared folder, Parquet, CSV).
    model : str
        A model store (.zarr), explained with its own formula (ALS-MF, BCE, biased MF or iALS); default: train the
        --model-kind model (reused while the data and settings are unchanged).
    model_kind : str
        The model to train, as `dxplain train --model`: mf (ALS-MF), biased (biased MF, μ + b_u + c_i + ⟨U_u,V_i⟩),
        ials (confidence-weighted ALS) or bce (BCE with sampled negatives); default biased for
        ratings, ials for implicit feedback (``models.policy.DEFAULT_KIND``: what won on validation, docs/model.md).
    convention : str
        iALS: implicit (the implicit library's loss) or spark (Spark MLlib's); default implicit.
    alpha : float
        iALS: the confidence scale α, as the library's alpha (default 1).
    lam_bias : float
        Biased MF: λ_b on the biases (default 6/|D|, a ridge of 3 per solve).
    select : bool
        Choose λ (and λ_b for biased, α for ials) on a seeded validation split, then refit on all the data (in this
        process, on the whole table); the chosen values are in the run summary's model_settings.
    top_n : int
        Recommendations explained per user.
    top_k : int
        Top positive and negative attributions per target and side; 0 = all.
    top_unobserved : int
        iALS: the items the user never touched whose terms of the unobserved row are largest in |importance|, this
        many per target, as rows of kind unobserved_term on the item side (already counted in the unobserved row).
    targets : str
        Parquet/CSV of (user, item) to explain instead of the top-N.
    skip_unseen : bool
        Drop target pairs whose user or item the training data lacks (newer than the data), and say how
        many (default: an error naming them).
    k : int
        Rank when training.
    lam : float
        λ when training (default 30/|D|, a ridge of 15 per solve: 3e-4 on ml-100k, chosen on validation; iALS:
        the library's own default, 0.01 for implicit, 0.1 for spark).
    seed : int
        Initialisation (and negative sampling) seed when training.
    max_sweeps : int
        Cap ALS sweeps when training (default: up to 300, until the identity bound meets ``tol`` or they stall).
    newton_steps : int
        Cap the Newton polish after stalled sweeps (default: up to 200, until ‖∇f‖ ≤ 1e-9); 0 = ALS only.
    implicit : bool
        Treat the data as implicit feedback of positives only: every interaction a positive, explained through BCE MF
        with sampled negatives. Data with a single rating value is detected as implicit feedback without it (and
        trains iALS unless ``model_kind`` says bce).
    neg_samples : int
        Implicit feedback: uniform unobserved items sampled per positive as negatives.
    neg_weight : float
        Implicit feedback: weight of a negative term in the BCE loss.
    tol : float
        Relative fidelity error (|Σ attributions − score| / |score|) above which the run says so. Training
        stops when the gradient bounds that error by tol for every target whose score is at least a
        tenth of ‖Ũ_i‖‖Ṽ_j‖ (``models.als.trainer.MIN_TARGET_COS``): a looser tol trains fewer sweeps. Biased
        MF divides by max(|score|, 1% of the ratings' range) and trains to the absolute miss tol × that.
    strict : bool
        Refuse to publish a run whose fidelity error exceeds ``tol``.
    keep : int
        After publishing, delete all but this many newest complete runs, and the part stores and models
        that only the deleted runs used (default: keep every run and store).
    cold : bool
        Train from the seeded random start. By default a refresh whose LATEST run has a model of the same dataset
        name, kind and rank starts from its factors (new users and items at 0) and trains to the same stopping
        rule (``models.warm``); the summary's ``training_start`` says which start it took.
    lock_wait : float
        Seconds to wait for another refresh (or forget) of the same --out to finish before refusing; 0 = refuse at
        once. A lock left by a killed refresh is taken over at once (``io.lock``).
    out, scheduler, workers, shards, in_memory
        Where results go and where the work runs (``dxplain.cli.common.run_options``).

    ``max_sweeps`` / ``newton_steps`` cap training (default: train to ``tol``'s identity bound). A capped model
    stops short of the optimum, so its attributions sum to the score only approximately: the
    summary's fidelity error says by how much: above ``tol`` (relative) the run says so, and ``strict``
    refuses to publish it.

    Implicit feedback (a single rating value) is explained through iALS, whose attributions add one row per target
    and side for the unobserved entries. With ``implicit`` (or ``model_kind`` bce) a BCE model is fitted on the
    positives and ``neg_samples`` sampled negatives per positive (weight ``neg_weight``): attributions then credit
    positives that pushed the item up and sampled negatives that pushed it down, and ``prediction`` is σ(score).
    """
    validate(CONSTRAINTS, locals())
    check_kind_options(locals())
    spec = TrainSettings(
        model=model_kind or ("bce" if implicit else None),  # --implicit: every interaction a positive, BCE's reading
        k=k,
        lam=lam,
        lam_bias=lam_bias,
        convention=convention,
        alpha=alpha,
        select=select,
        seed=seed,
        neg_samples=neg_samples,
        neg_weight=neg_weight,
    )
    settings = Settings.from_env(scheduler=scheduler, workers=workers, out=out)
    # One refresh of an output folder at a time: a second waits (or refuses), a killed one's lock is taken over.
    with out_lock(settings.out, lock_wait, "refresh", get_run_logger()):
        t0, started, seconds, peaks, worker_peaks = time.perf_counter(), time.time(), {}, {}, {}
        with open_mapper(settings, in_memory, shared=settings.out) as mapper:
            at_end = (mapper, worker_peaks)
            with stage(
                seconds, "load", peaks, at_end
            ):  # a prepared dataset by tasks: this process keeps ids and degrees
                # A given model is explained against the table its loss was fitted on (iALS: the interactions as they
                # are, even when they look like BCE's positives).
                table_spec = TrainSettings(model=stored_kind(model)) if model else spec
                training = load_training(dataset, settings, mapper, implicit, neg_samples, seed, table_spec)
                data, implicit = training.data, training.implicit
                kind = stored_kind(model) if model else training.kind
                if top_unobserved and kind != "ials":
                    raise InputError(
                        f"--top-unobserved {top_unobserved}: the terms of iALS's unobserved row; this run's model is "
                        f"{kind}: drop --top-unobserved, or train iALS (--model-kind ials)"
                    )
                # Bad input fails before any training.
                supplied, unseen = read_targets(targets, data, skip_unseen) if targets else (None, 0)
                if unseen:
                    get_run_logger().warning(
                        "--skip-unseen: %d target pair(s) name users or items the training data "
                        "lacks; explaining the other %d",
                        unseen,
                        len(supplied),
                    )
                if model:  # read once, here: fitted on these data, checked before the parts are written and before
                    # any training (an implicit prepared dataset's positives are parted, and its negatives sampled,
                    # while loading)
                    m, model_path = train_or_load(training.name, data, model, settings.out, k, lam, seed, mapper, None)
                    if model_kind is not None and kind_of(m) != model_kind:
                        raise InputError(
                            f"--model {model} is a {kind_of(m)} model, --model-kind says {model_kind}: drop "
                            "--model-kind (a stored model is explained with its own formula) or give a model of that "
                            "kind"
                        )
            n_targets = len(supplied) if supplied is not None else data.n_users * top_n
            n_shards = shards or shard_count(settings.workers, data, n_targets, top_k)
            with stage(seconds, "partition", peaks, at_end):
                parts = partition(training, settings.out, mapper)
            with stage(seconds, "train", peaks, at_end):
                if not model:
                    warm = None
                    if not cold:
                        width = k + 2 if training.kind == "biased" else k
                        warm = warm_from_latest(
                            settings.out,
                            training.name,
                            data,
                            training.kind,
                            width,
                            training.forgotten,
                            get_run_logger(),
                        )
                    budget = {
                        name: v
                        for name, v in (("max_sweeps", max_sweeps), ("newton_steps", newton_steps))
                        if v is not None
                    }
                    m, model_path = train_or_load(
                        name=training.name,
                        data=data,
                        model=None,  # one given with --model was read while loading
                        out=settings.out,
                        k=k,
                        lam=lam,
                        seed=seed,
                        mapper=mapper,
                        parts=parts,
                        budget=budget,
                        implicit=implicit,
                        neg_weight=neg_weight,
                        fidelity_tol=tol,
                        spec=replace(spec, model=training.kind),
                        warm=warm,
                    )
                mapper.release_memory()  # what training freed, before the explanation's working set
            with stage(seconds, "preprocess", peaks, at_end):
                job = preprocess(m, data, parts, top_n, top_k, supplied, mapper, top_unobserved)
            # Same plan, same output: an interrupted run of this plan is resumed rather than started afresh.
            plan = {
                "data": data.fingerprint(),
                "model": model_path,
                "grad_norm": m.grad_norm,
                "top_n": top_n,
                "top_k": top_k,
                **({"top_unobserved": top_unobserved} if top_unobserved else {}),  # earlier plans stay resumable
                "shards": n_shards,
                "targets": runs.sha256_file(targets) if targets else None,
            }
            run_dir, resumed = runs.start_run(settings.out, plan)
            # What --keep may delete with this run once it is pruned: never a model given with --model.
            runs.record_stores(run_dir, [parts.root, training.source, None if model else model_path])
            if resumed:
                get_run_logger().info(
                    "resuming interrupted run %s: shards matching their recorded hash are kept", run_dir
                )
            with stage(seconds, "recommend_explain_write", peaks, at_end):  # targets, attributions, shard files
                results = explain_all(job, data, n_shards, str(run_dir), mapper)
            memory = mapper.peak_rss_mib()
        changes = compare_with_previous(settings.out, str(run_dir), (data.user_ids, data.item_ids))
        # Refuses a run that explained nothing (or, with --strict, one above --tol) before it is published.
        summary = run_summary(
            results.entries,
            results.census,
            results.user_side,
            tol,
            strict,
            run=str(run_dir),
            dataset=dataset,
            model=model_path,
            seconds=round(time.perf_counter() - t0, 2),
            stage_seconds=dict(seconds),
            peak_rss_mib=memory,
            flow_peak_rss_mib_after_stage=dict(peaks),
            worker_peak_rss_mib_after_stage=worker_peaks,
            grad_norm=m.grad_norm,
            loss=m.loss,
            prediction=PREDICTION[m.loss],
            model_kind=kind_of(m),
            model_settings=model_settings(m),
            fidelity_score_floor=job.pre.score_floor,
            lam=m.lam,
            lam_known=m.lam is not None,
            top_n=top_n,
            top_k=top_k,
            targets_skipped_unseen=unseen,
            forgotten_rows_dropped=training.dropped,
            changes=changes,
            training_start=(
                {"start": "given"}
                if model
                else m.info.get("warm") or {"start": m.info.get("start"), "sweeps": m.info.get("sweeps")}
            ),
        )
        if summary.fidelity_warning is not None:
            get_run_logger().warning(summary.fidelity_warning)  # the CLI repeats it as one line on stderr
        manifest_summary = summary.as_dict()
        with stage(seconds, "publish", peaks):
            publish(settings.out, str(run_dir), results.entries, {"summary": manifest_summary})
        # The flow returns the manifest's summary with the publish stage timed too, and what --keep deleted.
        returned = {**manifest_summary, "stage_seconds": seconds, "flow_peak_rss_mib_after_stage": peaks}
        if keep is not None:
            returned["pruned_runs"], returned["pruned_stores"], failed = runs.prune(
                settings.out, keep, training.name, started
            )
            get_run_logger().info(
                "--keep %d: deleted %d older run(s), and %d store(s) only they used%s",
                keep,
                len(returned["pruned_runs"]),
                len(returned["pruned_stores"]),
                "".join(f"\n  {s}" for s in returned["pruned_stores"]),
            )
            if failed:
                get_run_logger().warning(
                    "--keep: %d store(s) could not be deleted (delete them by hand):%s",
                    len(failed),
                    "".join(f"\n  {s}" for s in failed),
                )
        get_run_logger().info(
            "refresh done: %d users, %d targets, %d attributions from %d scored pairs in %.1fs (%s; %d "
            "attributions/s in tasks); "
            "fidelity rel. error item median %.1e, p99 < %.0e, max %.1e; user median %.1e, p99 < %.0e, max %.1e "
            "(tol %g); peak RSS MiB %s; LATEST → %s",
            summary.users,
            summary.targets,
            summary.attributions,
            summary.pairs_scored,
            summary.seconds,
            ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items()),
            summary.attributions_per_second,
            *(
                getattr(summary, f"fidelity_{stat}")[side]
                for side in ("item", "user")
                for stat in ("median_rel_error", "p99_rel_error_below", "max_rel_error")
            ),
            tol,
            {"flow": memory["flow"], "workers": sorted(memory["workers"].values())},
            run_dir,
        )
        return returned
