"""A refresh's summary: counts, time and fidelity of a run, made once from what its passes return.

``run_summary`` merges the shards' manifest entries and the passes' task results (``passes.PassResults``)
with the run's facts into a ``RunSummary``, and refuses a run that explained nothing or (with ``strict``) one
whose attributions miss the score by more than ``tol``. ``RunSummary.as_dict`` is the manifest's ``summary``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import DegenerateError
from ..explain.run_rows import ERROR_DECADES


def quantile_bound(decades: list[dict[str, int]], q: float) -> float | None:
    """An upper bound on the q-quantile of the targets' relative error from their counts per decade
    (``explain.representer.decade_counts``, added up over shards): 10^(e+1) for the decade e that holds
    it (inf for the last, open decade); None without targets. Exact as a bound on the q-quantile taken as
    the smallest error that at least q of the targets reach (numpy's ``method="inverted_cdf"``), coarse
    by a decade."""
    counts = {}
    for d in decades:
        for e, c in d.items():
            counts[int(e)] = counts.get(int(e), 0) + c
    total = sum(counts.values())
    if total == 0:
        return None
    seen = 0
    for e in sorted(counts):
        seen += counts[e]
        if seen >= q * total:
            return float("inf") if e >= ERROR_DECADES[-1] else 10.0 ** (e + 1)
    return float("inf")


def task_seconds(census: list[dict], user_side: list[dict], entries: list[dict]) -> dict:
    """Seconds inside the tasks per pass, summed (CPU-side split of the stage's wall time): the census (the
    targets, recommended or supplied; its manifest key is ``plan``), the item-keyed user side, then the shards'
    gather, explain and write (kept shards, of an interrupted run, did theirs before)."""
    fresh = [e for e in entries if not e.get("resumed")]
    return {
        "plan": round(sum(c["seconds"] for c in census), 3),
        "user_side": round(sum(c["seconds"] for c in user_side), 3),
        **{p: round(sum(e.get(f"seconds_{p}", 0.0) for e in fresh), 3) for p in ("gather", "explain", "write")},
    }


def shard_totals(entries: list[dict], census: list[dict], user_side: list[dict]) -> dict:
    """Counts, throughput and fidelity of a run, merged from its shard entries and its passes' task results
    (the ``RunSummary`` fields from ``users`` to ``fidelity_max_abs_error``)."""
    seconds = task_seconds(census, user_side, entries)
    rows = sum(e["rows"] for e in entries)
    measured = [e for e in entries if e["targets"] > 0]
    return {
        "users": sum(e["users"] for e in entries),
        "targets": sum(e["targets"] for e in entries),
        "attributions": rows,
        "pairs_scored": sum(e.get("pairs_scored", 0) for e in entries),
        "shards": len(entries),
        "resumed_shards": sum(bool(e.get("resumed")) for e in entries),
        "user_side_tasks": len(user_side),
        "attributions_per_second": round(rows / max(sum(seconds.values()), 1e-9)),  # per task-second of work
        "task_seconds": seconds,
        # Over shards that explained something: a shard without targets has no error to report.
        "fidelity_max_rel_error": {
            s: max((e[f"max_rel_error_{s}"] for e in measured), default=None) for s in ("item", "user")
        },
        "fidelity_median_rel_error": {
            s: float(np.median([e[f"median_rel_error_{s}"] for e in measured])) if measured else None
            for s in ("item", "user")
        },
        "fidelity_p99_rel_error_below": {
            s: quantile_bound([e.get(f"rel_error_decades_{s}", {}) for e in measured], 0.99) for s in ("item", "user")
        },
        # In the score's units (a shard written before it was recorded counts as unknown: None).
        "fidelity_max_abs_error": {
            s: max((e[f"max_abs_error_{s}"] for e in measured), default=None)
            if all(f"max_abs_error_{s}" in e for e in measured)
            else None
            for s in ("item", "user")
        },
    }


def fidelity_warning(worst: float, tol: float, grad_norm: float | None, lam: float | None) -> str | None:
    """What to say of a run whose attributions miss the score by up to ``worst`` (relative), or None within
    ``tol``."""
    if not worst > tol:  # a NaN error gets no warning (its fidelity_ok is false)
        return None
    if grad_norm is not None:
        why = f"the model is not stationary enough (‖∇f‖ = {grad_norm:.1e})"
    elif lam is None:
        why = (
            "the imported factors have no λ, so importances are relative and are not meant to sum to the "
            "score; import them with the --lam and --mu they were fitted with"
        )
    else:
        why = (
            "the imported factors are not a stationary point of their objective on this data (exact "
            "attributions need the λ, μ and data they were fitted with, to convergence), or train here"
        )
    return f"fidelity: attributions miss the score by up to {worst:.1e} (relative), above --tol {tol:g}; {why}"


@dataclass(frozen=True)
class RunSummary:
    """A run's summary as its manifest holds it (field order is the manifest's key order)."""

    run: str
    dataset: str
    model: str
    users: int
    targets: int
    attributions: int
    pairs_scored: int
    shards: int
    resumed_shards: int
    user_side_tasks: int
    attributions_per_second: int
    task_seconds: dict  # per pass (``task_seconds``)
    fidelity_max_rel_error: dict  # per side: "item", "user"
    fidelity_median_rel_error: dict
    fidelity_p99_rel_error_below: dict
    fidelity_max_abs_error: dict  # per side, |Σ attributions − score| in the score's units
    seconds: float  # the flow's wall time up to the summary
    stage_seconds: dict  # per stage of the flow
    peak_rss_mib: dict  # {"flow": MiB, "workers": {address: MiB}}
    flow_peak_rss_mib_after_stage: dict
    worker_peak_rss_mib_after_stage: dict
    grad_norm: float | None
    loss: str
    prediction: str
    model_kind: str  # mf, biased, ials or bce: the formula the run explains with
    model_settings: dict  # the loss's settings (iALS: convention, alpha; biased MF: lam_bias, kappa; chosen ones)
    lam: float | None
    lam_known: bool
    top_n: int
    top_k: int
    targets_skipped_unseen: int
    forgotten_rows_dropped: int  # rows of ids ``dxplain forget`` listed, left out at load
    training_start: dict  # cold, warm (from which model, what it found, sweeps saved), or given (--model)
    fidelity_score_floor: float  # relative errors divide by max(|score|, this) (``extra_rows.score_floor``)
    fidelity_tol: float
    fidelity_ok: bool
    fidelity_warning: str | None = None  # only in the manifest when there is one
    changes: dict | None = None  # since the run before: its id, users whose top-N changed, entered, left

    def as_dict(self) -> dict:
        """The manifest's ``summary``."""
        d = dataclasses.asdict(self)
        if d["fidelity_warning"] is None:
            del d["fidelity_warning"]
        return d


def run_summary(
    entries: list[dict], census: list[dict], user_side: list[dict], tol: float, strict: bool, **facts
) -> RunSummary:
    """The run's summary from its passes' results (``passes.PassResults``' fields) and ``facts`` (the other
    ``RunSummary`` fields but the fidelity verdict's).

    Refuses (``DegenerateError``) a run that explains nothing, and with ``strict`` one whose attributions
    miss the score by more than ``tol``, relative: called before the run is published, so a refused run
    never moves LATEST.
    """
    totals = shard_totals(entries, census, user_side)
    if totals["targets"] == 0 or totals["attributions"] == 0:
        raise DegenerateError(
            f"the run explained nothing ({totals['targets']} targets, {totals['attributions']} "
            f"attributions), so it is not published and LATEST stays where it was; check the "
            f"targets, or the data (users with no unseen item have no recommendation)"
        )
    worst = max(totals["fidelity_max_rel_error"].values())  # not None: some target was explained
    warning = fidelity_warning(worst, tol, facts["grad_norm"], facts["lam"])
    if warning is not None and strict:
        raise DegenerateError(warning + ": --strict refuses to publish it")
    return RunSummary(**totals, **facts, fidelity_tol=tol, fidelity_ok=bool(worst <= tol), fidelity_warning=warning)
