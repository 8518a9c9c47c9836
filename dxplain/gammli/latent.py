"""Stage 3: latent interactions, the group-constrained ALS of the paper's eq. 4, on the stage-2 residuals.

    min_{U,V} Σ_Ω w_uj (m_uj − ⟨U_u,V_j⟩)² + λ(‖U − Ũ‖² + ‖V − Ṽ‖²) + μ(‖U‖² + ‖V‖²),     (eq. 4′)

Ũ_u is the mean of U over u's cluster; μ = RIDGE_SHARE·λ is ours (see RIDGE_SHARE).

Squared loss: m = y − η₁₂. Logistic: the paper's gradient-boosting residual (§3, Step 4), which with labels
y' = 2y − 1 and η the log-odds is m = 2y'/(1 + exp(y'η₁₂)) = 2(y − p₁₂); the fitted ⟨U_u,V_j⟩ is added to
η. (A weighted IRLS on the working response diverged on near-separable labels: tiny weights, huge
responses.) The weights w are ones either way; the kernels keep them for a weighted variant.

Every user and item of the feature tables has a row: one with no training rows has A_u = (λ+μ)I, so its
optimum is its cluster's mean shrunk by λ/(λ+μ): the paper's cold start (§4.3) falls out of the objective.

Each half-step is exact (``kernels.gammli.group_rows``) and mapped over entity-range parts, twice: the
per-cluster moments (reduced here into the cluster means), then the rows. A sweep ends with the user
half-step, so at the returned factors the user side of the training-data identity,
(λ+μ)U_u − λŨ_{k(u)} = Σ_j w_uj(m_uj − ⟨U_u,V_j⟩) V_j, holds to rounding and the item side to the
convergence tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..io.gammli_model import write_residuals_file
from ..kernels import gammli as G
from .additive import fit_groups, put_one, reduce_in_order, rows

# μ = RIDGE_SHARE·λ in eq. 4′. Eq. 4 alone leaves the cluster means unpenalised, and its infimum need not be
# attained: on the classification simulation the factors drifted to U → 0, V → ∞ without converging.
RIDGE_SHARE = 0.01


def residual(task: str, y: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """What stage 3 fits: y − η (squared loss) or the boosting residual 2(y − σ(η)) (logistic)."""
    return y - eta if task == "regression" else 2.0 * (y - G.sigmoid(eta))


def latent_part(part: dict, side: str, lo: int, hi: int, base, task: str, use: str) -> dict:
    """CSR of the part's rows over its entity range [lo, hi) of ``side``, with targets m and weights w."""
    u, i, y = rows(part, use)
    own, other = (u, i) if side == "user" else (i, u)
    order = np.lexsort((other, own))
    u, i, y, own, other = u[order], i[order], y[order], own[order], other[order]
    indptr = np.searchsorted(own - lo, np.arange(hi - lo + 1)).astype(np.int64)
    return {
        "indptr": indptr,
        "cols": other.astype(np.int64),
        "m": residual(task, y, base.eta(u, i)),
        "w": np.ones(len(u)),
        "lo": lo,
        "hi": hi,
    }


@dataclass(frozen=True)
class LatentGroups:
    """The clusters of eq. 4: every user's group ``gu`` (of ``K``) and every item's group ``gi`` (of ``L``)."""

    gu: np.ndarray
    gi: np.ndarray
    K: int
    L: int


def _moments(p, F, lam, groups, n_groups):
    return G.group_moments(
        p["indptr"], p["cols"], p["m"], p["w"], F, lam, RIDGE_SHARE * lam, groups[p["lo"] : p["hi"]], n_groups
    )


def _rows(p, F, lam, groups, means):
    return G.group_rows(
        p["indptr"], p["cols"], p["m"], p["w"], F, lam, RIDGE_SHARE * lam, groups[p["lo"] : p["hi"]], means
    )


def half_step(mapper, parts, F: np.ndarray, lam: float, groups_h, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact minimiser over one side's factors given the other side's ``F``; and its cluster means."""
    F_h = put_one(mapper, F)
    S, t, counts = reduce_in_order(
        mapper.imap(_moments, [(p, F_h, lam, groups_h, n_groups) for p in parts], name="gammli-moments"),
        lambda a, b: tuple(x + y for x, y in zip(a, b)),
    )
    means = G.group_means(S, t, counts, lam)
    return np.vstack(mapper.map(_rows, [(p, F_h, lam, groups_h, means) for p in parts], name="gammli-rows")), means


def group_als(
    mapper,
    user_parts,
    item_parts,
    groups: LatentGroups,
    lam: float,
    rank: int,
    seed: int = 0,
    tol: float = 1e-10,
    max_sweeps: int = 500,
    init=None,
) -> dict:
    """Alternate exact half-steps (items, then users) until the largest factor change is ≤ tol·scale."""
    rng = np.random.default_rng(seed)
    U = rng.normal(scale=0.1, size=(len(groups.gu), rank)) if init is None else init[0]
    V = np.zeros((len(groups.gi), rank)) if init is None else init[1]
    gu_h, gi_h = put_one(mapper, groups.gu, broadcast=True), put_one(mapper, groups.gi, broadcast=True)
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):
        V_new, Vt = half_step(mapper, item_parts, U, lam, gi_h, groups.L)
        U_new, Ut = half_step(mapper, user_parts, V_new, lam, gu_h, groups.K)
        change = max(np.abs(U_new - U).max(), np.abs(V_new - V).max())
        scale = max(np.abs(U_new).max(), np.abs(V_new).max(), 1e-12)
        U, V = U_new, V_new
        if change <= tol * scale:
            break
    return {"U": U, "V": V, "U_group": Ut, "V_group": Vt, "sweeps": sweeps, "change": float(change / scale)}


def fit_latent(
    mapper,
    parts_by_side: dict,
    base,
    task,
    use,
    groups: LatentGroups,
    lam,
    rank,
    seed=0,
    tol=1e-10,
    max_sweeps=500,
    init=None,
) -> dict:
    """Stage 3 on the residuals of ``base`` over ``use`` rows; ``parts_by_side[side]`` = [(part, lo, hi)].
    Returns the factors, the cluster means, and the persisted parts (for the training residuals)."""
    base_h = put_one(mapper, base, broadcast=True)
    lp = {
        side: mapper.persist(
            latent_part, [(p, side, lo, hi, base_h, task, use) for p, lo, hi in ps], name=f"gammli-latent-{side}"
        )
        for side, ps in parts_by_side.items()
    }
    fit = group_als(mapper, lp["user"], lp["item"], groups, lam, rank, seed, tol, max_sweeps, init)
    fit["parts"] = lp
    return fit


# A backfitting round's stage 3 is warm-started and only needs to move the residual the additive terms see
# next; the last fit goes to the caller's tolerance.
BACKFIT_TOL = 1e-6
BACKFIT_SWEEPS = 100


@dataclass(frozen=True)
class LatentOffset:
    """⟨U_u, V_i⟩ as the fixed offset of an additive refit (it has the ``eta`` of an ``Additive``)."""

    U: np.ndarray
    V: np.ndarray

    def eta(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        return np.einsum("nk,nk->n", self.U[u], self.V[i])


def fit_backfitted(
    mapper,
    parts,
    parts_by_side: dict,
    additive,
    smooth,
    task,
    use,
    groups: LatentGroups,
    lam,
    rank,
    seed,
    rounds: int,
    tol: float,
    max_sweeps: int,
    grams: list | None = None,
) -> tuple:
    """Stage 3 after ``rounds`` of backfitting; (additive, its D per term or None if unchanged, latent fit,
    the rounds' sweeps).

    Stages 1–2 are fitted with no latent part, so where the features and the latent groups are correlated
    the additive terms soak up latent variation they can only mimic. A round refits the additive terms
    jointly on y − ⟨U,V⟩ and the latent part, warm and loosely, on the new residual; the last stage 3 goes
    to ``tol``, so the latent training-data identity holds at its optimum as without backfitting.
    ``grams``: the Gram of ``additive``'s terms over ``use`` rows (``additive.fit_groups``), for squared loss.
    """
    lat, D, sweeps = None, None, []
    for r in range(rounds + 1):
        last = r == rounds
        init = None if lat is None else (lat["U"], lat["V"])
        if init is not None:
            (additive,), (D,) = fit_groups(
                mapper, parts, [additive.terms], LatentOffset(*init), task, smooth, use=use, grams=grams
            )
        round_tol, round_sweeps = (tol, max_sweeps) if last else (BACKFIT_TOL, min(BACKFIT_SWEEPS, max_sweeps))
        lat = fit_latent(
            mapper, parts_by_side, additive, task, use, groups, lam, rank, seed, round_tol, round_sweeps, init
        )
        if not last:
            sweeps.append(lat["sweeps"])
    return additive, D, lat, sweeps


def _training_residuals(p, U, V, lam):
    """(own entity, other entity, e = w(m − ⟨U,V⟩)) of a user-side part: what the attributions are made of."""
    own = np.repeat(np.arange(p["lo"], p["hi"]), np.diff(p["indptr"]))
    e = p["w"] * (p["m"] - np.einsum("nk,nk->n", U[own], V[p["cols"]]))
    return own, p["cols"], e


def training_residuals(mapper, user_parts, U, V, lam) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every training row's (user, item, e) sorted by user, gathered for the stored model."""
    UV_h = put_one(mapper, (U, V), broadcast=True)
    out = mapper.map(_unpack_residuals, [(p, UV_h, lam) for p in user_parts], name="gammli-residuals")
    return tuple(np.concatenate(x) for x in zip(*out))


def _unpack_residuals(p, UV, lam):
    return _training_residuals(p, UV[0], UV[1], lam)


def _write_residuals(p, UV, lam, folder, n):
    return write_residuals_file(folder, n, *_training_residuals(p, UV[0], UV[1], lam))


def write_training_residuals(mapper, user_parts, U, V, lam, folder) -> int:
    """``training_residuals`` written by the tasks that hold the parts, one file each (``io.gammli_model``); the
    number of files."""
    UV_h = put_one(mapper, (U, V), broadcast=True)
    return len(
        mapper.map(
            _write_residuals,
            [(p, UV_h, lam, str(folder), n) for n, p in enumerate(user_parts)],
            name="gammli-write-residuals",
        )
    )


def _latent_moments(p, UV):
    own = np.repeat(np.arange(p["lo"], p["hi"]), np.diff(p["indptr"]))
    s = np.einsum("nk,nk->n", UV[0][own], UV[1][p["cols"]])
    return len(s), (s.mean() if len(s) else 0.0), float(((s - s.mean()) ** 2).sum()) if len(s) else 0.0


def _merge_moments(a, b):
    """Chan et al.'s pairwise update of (count, mean, sum of squared deviations)."""
    n = a[0] + b[0]
    if n == 0:
        return a
    d = b[1] - a[1]
    return n, a[1] + d * b[0] / n, a[2] + b[2] + d * d * a[0] * b[0] / n


def latent_variance(mapper, user_parts, U, V) -> float:
    """The sample variance of ⟨U_u, V_i⟩ over the training rows (the latent part's D in the IR), reduced
    over the parts rather than gathered."""
    UV_h = put_one(mapper, (U, V), broadcast=True)
    n, _, m2 = reduce_in_order(
        mapper.imap(_latent_moments, [(p, UV_h) for p in user_parts], name="gammli-latent-moments"), _merge_moments
    )
    return float(m2 / max(n - 1, 1))
