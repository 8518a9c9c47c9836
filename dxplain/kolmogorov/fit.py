"""IKM (Algorithm 1 of the Kolmogorov-model paper): block-coordinate descent, θ sharded by users and ψ by items.

Each BCD iteration n

1. puts Θ once; every item shard forms S_i, v_i (e.2) from its sparse items × users block and solves (Q₂)
   by SDR + randomisation or exhaustive search, keeping its incumbent ψ when that is better;
2. puts Ψ once; every user shard forms Q_u, r_u (e.1) from its users × items block and solves (Q₁) by
   Frank–Wolfe started at its previous θ.

Neither step can raise E = Σ_𝒦 (θ_uᵀψ_i − p_ui)² + λΣ‖θ_u‖² + μΣ1ᵀψ_i (Lemma 1), so ``trace`` (E after each
half-step) is non-increasing from the first ψ-step on. The blocks are sent to the workers once
(``mapper.persist``); the random streams depend on (seed, iteration, shard start) only, so a LocalMapper
and a DaskMapper with the same shards give the same model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..interactions import Interactions, equal_cuts
from ..kernels import kolmogorov as K
from ..mapper import LocalMapper, Mapper
from .data import check_options

SOLVERS = ("sdr", "exhaustive")
STEPS = ("pairwise", "exact", "simple")


@dataclass
class KolmogorovModel:
    """θ (users × D, rows on the simplex) and ψ (items × D, binary); P[u likes i] = θ_uᵀψ_i."""

    theta: np.ndarray
    psi: np.ndarray
    lam: float = 0.0
    mu: float = 0.0
    info: dict = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return self.theta.shape[1]

    def predict(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """p̂_ui = θ_uᵀψ_i for index arrays u, i."""
        return np.einsum("nd,nd->n", self.theta[u], self.psi[i].astype(np.float64))


# --- tasks (module level so Dask can ship them) -------------------------------------------------------


def _rows(P, lo: int, hi: int):
    """Rows lo:hi of a CSR matrix: one shard's block, kept on the worker for every iteration."""
    return P[lo:hi]


# Rows solved at once inside a task. A task's shard grows with the data (shards are a few per worker), so
# its temporaries would too: the ψ-step's randomisation holds rows × draws × (D + 1) floats (2.9 GB for a
# 166k-item shard at 10M interactions) and Frank–Wolfe a few rows × D × D copies. Solving a bounded
# slice of rows at a time keeps a worker's peak independent of the data size.
PSI_ROWS = 16_384
THETA_ROWS = 65_536


def _slices(n: int, size: int):
    return [slice(a, min(a + size, n)) for a in range(0, n, size)] or [slice(0, 0)]


def psi_task(
    block,
    Theta: np.ndarray,
    Psi: np.ndarray | None,
    mu: float,
    solver: str,
    seed: int,
    it: int,
    lo: int,
    check: bool,
    rows: int | None = None,
) -> dict:
    """(Q₂) for the item shard from row ``lo``: ψ, Σ g_i, and (``check``) how often SDR misses the exhaustive
    optimum. ``Psi`` is the previous ψ of every item (the incumbents; None at first), broadcast like Θ, so
    no task carries its slice in the graph. Solved ``rows`` items at a time."""
    rng = np.random.default_rng([seed, it, lo])
    psi, g, errors, errors_rounded, steps = [], 0.0, 0, 0, 0
    for sl in _slices(block.shape[0], rows or PSI_ROWS):
        S, v = K.block_stats(block[sl], Theta)
        c = v - mu / 2
        psi0 = None if Psi is None else Psi[lo + sl.start : lo + sl.stop]
        if solver == "exhaustive":
            p, gp = K.exhaustive_psi(S, c)
        else:
            p, info = K.sdr_psi(S, c, psi0, rng)
            gp = K.psi_objective(S, c, p)
            if check:
                _, best = K.exhaustive_psi(S, c)
                tol = 1e-9 * (1 + np.abs(best))
                errors_rounded += int(np.sum(K.psi_objective(S, c, info["rounded"]) > best + tol))
                errors += int(np.sum(gp > best + tol))
            steps = max(steps, int(info["newton_steps"].max(initial=0)))
        psi.append(p)
        g += float(gp.sum())
    out = {"psi": np.concatenate(psi), "g": g}
    if solver != "exhaustive":
        out["newton_steps"] = steps
        if check:
            out.update(errors=errors, errors_rounded=errors_rounded)
    return out


def theta_task(
    block, Psi: np.ndarray, Theta: np.ndarray, lo: int, lam: float, step: str, fw_iters: int, rows: int | None = None
) -> dict:
    """(Q₁) for the user shard from row ``lo``: θ from Frank–Wolfe started at the current θ, and Σ f_u.
    ``Theta`` is every user's θ, already broadcast for the ψ-step: slicing it here keeps θ⁰ out of the
    task graph (at 10M interactions the slices were 61 MiB per task). Solved ``rows`` users at a time."""
    Psi = Psi.astype(np.float64)
    theta, f, iterations = [], 0.0, 0
    for sl in _slices(block.shape[0], rows or THETA_ROWS):
        Q, r = K.block_stats(block[sl], Psi)
        t, info = K.frank_wolfe(Q, r, Theta[lo + sl.start : lo + sl.stop], lam=lam, step=step, max_iter=fw_iters)
        theta.append(t)
        f += float(info["objective"].sum())
        iterations = max(iterations, int(info["iterations"]))
    return {"theta": np.concatenate(theta), "f": f, "iterations": iterations}


# --- the fit ----------------------------------------------------------------------------------------


def fit_ikm(
    data: Interactions,
    dim: int,
    iterations: int = 5,
    solver: str = "sdr",
    lam: float = 0.0,
    mu: float = 0.0,
    step: str = "pairwise",
    fw_iters: int = 2000,
    seed: int = 0,
    check: bool = False,
    mapper: Mapper | None = None,
    shards: int | None = None,
    log=None,
) -> KolmogorovModel:
    """Fit a Kolmogorov model to ``data`` whose ``rating`` holds p_ui ∈ [0, 1].

    Parameters
    ----------
    data : the training pairs with p_ui in ``rating``
    dim : D, the number of elementary events (≥ 2)
    iterations : BCD iterations (the paper uses 5)
    solver : ``sdr`` (SDR + randomisation, Table 2) or ``exhaustive`` (all 2^D vectors; D ≤ 16)
    lam, mu : λ (ℓ2 on θ, A.5) and μ (ℓ1 on ψ, A.6)
    step, fw_iters : Frank–Wolfe step rule (``kernels.kolmogorov.frank_wolfe``) and its iterations at most
    check : with ``sdr``, also run exhaustive search on every ψ-step and count SDR's misses
    mapper, shards : where the shard tasks run and how many of each side (default 2 per worker)

    Returns
    -------
    KolmogorovModel with ``info``: ``train_objective`` (E after each iteration), ``trace`` (after each
    half-step), ``seconds``, and with ``check`` the error counts.
    """
    check_options(dim, solver, check, 0.0, 1.0)
    mapper = mapper or LocalMapper()
    shards = shards or 2 * mapper.workers
    t0 = time.perf_counter()
    p = data.rating
    ucuts = equal_cuts(data.user_indptr, shards)
    icuts = equal_cuts(data.item_indptr, shards)
    Pu, Pi = mapper.put(data.by_user(p)), mapper.put(data.by_item(p))
    ublocks = mapper.persist(_rows, [(Pu, int(a), int(b)) for a, b in zip(ucuts[:-1], ucuts[1:])], "km-users")
    iblocks = mapper.persist(_rows, [(Pi, int(a), int(b)) for a, b in zip(icuts[:-1], icuts[1:])], "km-items")
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.ones(dim), size=data.n_users)
    psi = Ps = None
    pp = float(p @ p)
    trace, objective, errors = [], [], {"errors": 0, "errors_rounded": 0, "items": 0}
    for it in range(iterations):
        Th = mapper.put(theta, broadcast=True)
        res = mapper.map(
            psi_task,
            [(blk, Th, Ps, mu, solver, seed, it, int(a), check) for blk, a in zip(iblocks, icuts[:-1])],
            f"km-psi-{it}",
        )
        psi = np.concatenate([r["psi"] for r in res])
        trace.append(sum(r["g"] for r in res) + pp + lam * float(np.sum(theta * theta)))
        if check:
            for key in ("errors", "errors_rounded"):
                errors[key] += sum(r[key] for r in res)
            errors["items"] += data.n_items
        Ps = mapper.put(psi, broadcast=True)
        res = mapper.map(
            theta_task,
            [(blk, Ps, Th, int(a), lam, step, fw_iters) for blk, a in zip(ublocks, ucuts[:-1])],
            f"km-theta-{it}",
        )
        theta = np.concatenate([r["theta"] for r in res])
        trace.append(sum(r["f"] for r in res) + pp + mu * float(psi.sum()))
        objective.append(trace[-1])
        if log:
            log(f"IKM iteration {it + 1}/{iterations}: E = {trace[-1]:.6g} (after ψ-step {trace[-2]:.6g})")
    info = {
        "train_objective": objective,
        "trace": trace,
        "seconds": round(time.perf_counter() - t0, 2),
        "solver": solver,
        "step": step,
        "shards": [len(ucuts) - 1, len(icuts) - 1],
    }
    if check and solver == "sdr":
        info["sdr_vs_exhaustive_error"] = errors["errors"] / max(1, errors["items"])
        info["sdr_rounded_vs_exhaustive_error"] = errors["errors_rounded"] / max(1, errors["items"])
    return KolmogorovModel(theta, psi, lam, mu, info)


def split_pairs(data: Interactions, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random (train mask, held-out mask) over the pairs of ``data``."""
    held = np.random.default_rng(seed).random(len(data)) < fraction
    return ~held, held


def select_regularisers(
    data: Interactions,
    dim: int,
    lams,
    mus,
    iterations: int = 3,
    seed: int = 0,
    mapper: Mapper | None = None,
    shards: int | None = None,
    **kw,
) -> tuple[float, float, list]:
    """λ and μ from a coarse grid by RMSE of p on a 10% validation split of the training pairs (App. A.7)."""
    tr, va = split_pairs(data, 0.1, seed + 1)
    sub = data.subset(tr)
    scores = []
    for lam in lams:
        for mu in mus:
            m = fit_ikm(sub, dim, iterations, lam=lam, mu=mu, seed=seed, mapper=mapper, shards=shards, **kw)
            err = m.predict(data.user[va], data.item[va]) - data.rating[va]
            scores.append({"lam": lam, "mu": mu, "rmse_p": float(np.sqrt(np.mean(err**2)))})
    best = min(scores, key=lambda s: s["rmse_p"])
    return best["lam"], best["mu"], scores
