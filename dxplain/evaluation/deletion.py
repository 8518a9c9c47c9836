"""Case deletion (docs/methods.md §1 "Evaluation"): do the samples a method calls important really move the target?

For a target z′ and a method's importances I(·, z′): remove the top-k positive-importance training
samples, retrain with the same initialisation and solver, and record DEL₊(k) = prediction after −
prediction before; DEL₋ the same for the top-k negative ones. k_i = ⌈f_i·N⌉ for f = 1%…5%, N the
number of candidate training samples (the paper's k_i = 0.01·i·N): the same k for every method, capped
at the number of samples of that sign the method has. AUC-DEL± is the mean over the k sequence. A
faithful method has AUC-DEL₊ < 0 and AUC-DEL₋ > 0.

A *case* knows how to retrain without some rows and to predict the target; the harness is the same for
sparse linear models and for collaborative filtering.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy import stats

from .. import progress
from ..mapper import Mapper

log = logging.getLogger(__name__)

FRACTIONS = (0.01, 0.02, 0.03, 0.04, 0.05)


class Case(Protocol):
    n_targets: int

    def prediction(self, target: int, without: np.ndarray | None = None) -> float:
        """The target's prediction by the model retrained without the given training rows (None: as trained)."""


def deletion_sets(scores: np.ndarray, sign: int, fractions=FRACTIONS, N: int | None = None) -> list[np.ndarray]:
    """The top-k rows of the given sign by |importance|, k = ⌈f·N⌉ for each f (N: all candidates by
    default), at most as many as have that sign; ties go to the lower row."""
    s = sign * np.asarray(scores)
    N = len(s) if N is None else N
    rows = np.flatnonzero(s > 0)
    order = rows[np.argsort(-s[rows], kind="stable")]
    return [order[: max(1, int(np.ceil(f * N)))] for f in fractions] if len(order) else []


@dataclass(frozen=True)
class Job:
    """One deletion curve to measure: retrain once per set. A method that failed on the trial has no
    sets and says why in ``failure``; its curve is recorded as failed and the trial goes on."""

    target: int
    method: str
    sign: int
    sets: tuple
    failure: str | None = None


def plan_jobs(methods, n_targets: int, scores_of, fractions=FRACTIONS) -> tuple[list[Job], dict]:
    """Every (target, method, sign) deletion curve of a trial, and each method's ms per explained target.

    ``scores_of(method)`` gives, per target, (rows, importances): the candidate training rows (None: all
    rows) and their importance for that target. A method that raises is recorded, with the reason, as
    failed curves for every target (ms None), and the other methods go on.
    """
    jobs, ms = [], {}
    for method in methods:
        t0 = time.perf_counter()
        try:
            scores = scores_of(method)
        except Exception as exc:  # noqa: BLE001 - any failure of one explainer must not end the trial
            reason = f"{type(exc).__name__}: {exc}"
            log.warning(
                "case deletion: %s failed on this trial (%s); its curves are recorded as failed", method, reason
            )
            ms[method] = None
            jobs += [Job(t, method, sign, (), reason) for t in range(n_targets) for sign in (1, -1)]
            continue
        ms[method] = 1000 * (time.perf_counter() - t0) / n_targets
        for t, (rows, s) in enumerate(scores):
            for sign in (1, -1):
                sets = deletion_sets(s, sign, fractions)
                if sets:
                    jobs.append(Job(t, method, sign, tuple(sets if rows is None else (rows[x] for x in sets))))
    return jobs, ms


def curve_rows(trial: int, jobs: list[Job], curves: list[list[float]], fractions=FRACTIONS) -> list[dict]:
    """One row per (trial, target, method, sign, k): the long table the summaries are computed from; a
    failed method's curve is one row with delta NaN and its ``failure``."""
    rows = []
    for j, c in zip(jobs, curves):
        side = "DEL+" if j.sign > 0 else "DEL-"
        if j.failure is not None:
            rows.append(
                {
                    "trial": trial,
                    "target": j.target,
                    "method": j.method,
                    "side": side,
                    "fraction": float("nan"),
                    "k": 0,
                    "delta": float("nan"),
                    "failure": j.failure,
                }
            )
            continue
        rows += [
            {
                "trial": trial,
                "target": j.target,
                "method": j.method,
                "side": side,
                "fraction": f,
                "k": len(s),
                "delta": d,
                "failure": None,
            }
            for f, s, d in zip(fractions, j.sets, c)
        ]
    return rows


def deletion_curve(case: Case, target: int, sets: list[np.ndarray], base: float) -> list[float]:
    return [case.prediction(target, rows) - base for rows in sets]


def _job_curve(case: Case, job, base: list[float]) -> list[float]:
    return deletion_curve(case, job.target, list(job.sets), base[job.target])


def deletion_curves(mapper: Mapper, case: Case, jobs: list, base: list[float]) -> list[list[float]]:
    """Every job's deletion curve (one retraining per set), one mapper task per curve, in job order.

    The case (data and model) is sent to every worker once.
    """
    t0 = time.perf_counter()
    case_h = mapper.put(case, broadcast=True)
    step = max(1, len(jobs) // 10)

    def report(done, _):
        progress.update("evaluate: deletion curves", done, len(jobs), f"{done * len(jobs[0].sets)} retrainings")
        if done % step == 0 or done == len(jobs):
            log.info(
                "case deletion: %d/%d curves (%d retrainings) in %.1fs",
                done,
                len(jobs),
                done * len(jobs[0].sets),
                time.perf_counter() - t0,
            )

    return mapper.map(_job_curve, [(case_h, job, base) for job in jobs], name="deletion", report=report)


@dataclass
class Summary:
    mean: float
    half_width: float  # 95% CI half-width (t)
    count: int


def summarise(values) -> Summary:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if len(v) < 2:
        return Summary(float(v.mean()) if len(v) else float("nan"), float("nan"), len(v))
    return Summary(float(v.mean()), float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))), len(v))
