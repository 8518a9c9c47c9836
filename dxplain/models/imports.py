"""Factors trained elsewhere, made explainable with the loss they were trained on.

A factor pair trained by ``implicit``'s ``AlternatingLeastSquares`` for its default 15 iterations is far from a
stationary point of its loss, and the representer identity holds only at one. Two honest routes
(``import_ials``), and the model records which one it took (``settings["import"]``):

- ``polish``: train on from the imported factors to stationarity (``models.ials.IALS``, ``init``), then explain
  the polished model; the record says how many sweeps and seconds it took, how far the factors moved and how
  many users' top-N lists changed.
- ``resolve``: keep the items' factors and solve every user's row exactly against them (one exact half-step,
  what ``implicit``'s own ``explain`` does for a user). Each user's row is then stationary given V, so the side
  over the user's own items sums to the score exactly; the other side (an item's users) does not, and the run's
  fidelity says by how much.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..errors import InputError
from ..interactions import Interactions
from ..kernels.topn import top_n_unseen
from .base import FactorModel
from .ials import DEFAULT_ALPHA, IALS, OBJECTIVE, check_data, check_settings
from .ials_half_steps import IALSHalfSteps

ROUTES = ("polish", "resolve")
COMPARE_AT = 20  # the top-N whose changes the polish reports


def _top_n(U: np.ndarray, V: np.ndarray, data: Interactions, n: int, batch: int = 1024) -> np.ndarray:
    """Every user's top-n unseen items (n_users, n), in batches of users."""
    out = np.empty((len(U), n), np.int64)
    ptr, items = data.user_indptr, data.item.astype(np.intp)
    for a in range(0, len(U), batch):
        b = min(a + batch, len(U))
        out[a:b] = top_n_unseen(U[a:b], V, ptr[a : b + 1] - ptr[a], items[ptr[a] : ptr[b]], n)[0]
    return out


def import_ials(
    U: np.ndarray,
    V: np.ndarray,
    data: Interactions,
    convention: str = "implicit",
    alpha: float = DEFAULT_ALPHA,
    lam: float | None = None,
    route: str = "polish",
    trainer: IALS | None = None,
) -> FactorModel:
    """An iALS model of the imported factors (U, V) aligned to ``data``, by ``route`` (module docstring)."""
    if route not in ROUTES:
        raise InputError(f"--route {route!r}: give one of {', '.join(ROUTES)}")
    check_settings(convention, alpha, lam)
    check_data(data)
    t0 = time.perf_counter()
    trainer = trainer or IALS(k=U.shape[1], lam=lam, alpha=alpha, convention=convention)
    trainer = replace(trainer, k=U.shape[1], lam=lam, alpha=alpha, convention=convention)
    if route == "polish":
        m = trainer.fit(data, init=(U, V))
        before, after = _top_n(U, V, data, COMPARE_AT), _top_n(m.U, m.V, data, COMPARE_AT)
        changed = int(np.any(np.sort(before, axis=1) != np.sort(after, axis=1), axis=1).sum())
        record = {
            "route": route,
            "sweeps": m.info["sweeps"],
            "newton_steps": m.info["newton_iters"],
            "seconds": time.perf_counter() - t0,
            "converged": m.info["converged"],
            "moved": {"user": _moved(U, m.U), "item": _moved(V, m.V)},
            f"users_top{COMPARE_AT}_changed": changed,
        }
        return replace(m, kind="imported-ials", settings={**m.settings, "import": record})
    hs = IALSHalfSteps.local(data, trainer.lam_, alpha, convention)
    try:
        U_solved = hs.users(V)
    finally:
        hs.close()
    record = {"route": route, "seconds": time.perf_counter() - t0, "moved": {"user": _moved(U, U_solved), "item": 0.0}}
    settings = {"convention": convention, "alpha": float(alpha), "objective": OBJECTIVE[convention], "import": record}
    return FactorModel(
        U_solved, V, 0.0, trainer.lam_, len(data), loss="ials", kind="imported-ials", info={}, settings=settings
    )


def _moved(before: np.ndarray, after: np.ndarray) -> float:
    """‖after − before‖_F / ‖before‖_F."""
    return float(np.linalg.norm(after - before) / max(np.linalg.norm(before), np.finfo(float).tiny))
