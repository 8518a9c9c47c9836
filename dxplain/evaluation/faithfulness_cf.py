"""Case-deletion trials for matrix factorisation: the high-dimensional representer against Fast Influence
Analysis (Cheng et al., KDD 2019), TracInCP (SGD-MF only: it needs training checkpoints) and random, on
ml-100k with ratings mapped to [−1, 1]. Models: ALS-MF (trained to a stationary point), SoftImpute
(nuclear norm), SGD-MF (App. G) or a YoutubeNet-style two-tower model (explained through its final
embeddings, §5.3).

One trial = a random 90/10 split, ALS-MF fitted on the 90% (seeded initialisation), T random held-out
pairs as targets. A target (u, j)'s candidates are the training ratings that share its user or its item
(every other rating has zero importance under all three methods); N = their number.

    representer  α_uk ⟨Ṽ_k, Ṽ_j⟩ for the user's ratings (u, k); α_ij ⟨Ũ_i, Ũ_u⟩ for the item's ratings (i, j)
    FIA          the influence function restricted to the target's own parameters (U_u, V_j): for a
                 squared loss (1/n)Σ(y − ŷ)² + (λ/2)‖θ‖², upweighting z moves ŷ(u, j) by
                 (2 r_z / n) · V_jᵀ H_U⁻¹ V_k (user side) or (2 r_z / n) · U_uᵀ H_V⁻¹ U_i (item side), with
                 H_U = (2/n) Σ_{k ∈ D_u} V_k V_kᵀ + λI and H_V the mirror (the exact Hessian blocks: the
                 target is not a training pair, so there is no cross term)
                 (SGD-MF and two-tower have no λ: H gets a small damping, 10⁻³ of its mean diagonal; for the
                 two-tower model U_u is the user tower's output, as for the representer)
    tracin       Σ over epoch checkpoints of η · 2 r_z ∇ŷ_z·∇ŷ_{uj} (``models.sgd_mf.tracin_cp``)
    random       independent normal scores over the candidates

Retraining after a deletion: ALS-MF starts from the trained factors and runs the same Newton-CG polish
to the same gradient tolerance (far cheaper than a cold start; docs/faithfulness.md).
SGD-MF reruns from the same initialisation with the same batches, minus the deleted rows. SoftImpute
restarts its iterations from the trained SVD. The two-tower model, like SGD-MF, reruns Adam from the same
initialisation with the same batches, minus the deleted rows, which also leave the users' history inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..explain.representer import Preprocessed
from ..interactions import Interactions, Targets
from ..kernels.als import Pattern, curvature_grams
from ..models.als.trainer import ALSMF, default_lam
from ..models.base import FactorModel
from ..models.sgd_mf import SGDMF, tracin_cp
from ..models.softimpute import SoftImpute
from ..models.two_tower import TwoTower
from .deletion import FRACTIONS, Job, plan_jobs

CF_METHODS = ("representer", "fia", "random")
SGD_METHODS = ("representer", "fia", "tracin", "random")


def normalised(data: Interactions) -> Interactions:
    """Ratings 1…5 mapped to [−1, 1], as in the paper."""
    lo, hi = float(data.rating.min()), float(data.rating.max())
    return Interactions.from_indices(
        data.user, data.item, 2 * (data.rating - lo) / (hi - lo) - 1, data.user_ids, data.item_ids
    )


@dataclass
class MFCase:
    data: Interactions  # training ratings
    targets: Targets  # held-out (user, item) pairs
    model: FactorModel
    tol: float = 1e-7
    sgd: SGDMF | None = None  # the trainer of an SGD-MF model, reused for retraining
    softimpute: SoftImpute | None = None  # likewise for a SoftImpute model (warm-started from its SVD)
    two_tower: TwoTower | None = None  # likewise for a two-tower model

    @property
    def n_targets(self) -> int:
        return len(self.targets)

    def prediction(self, target: int, without: np.ndarray | None = None) -> float:
        model = self.model if without is None else self.retrain_without(without)
        return float(model.predict(self.targets.user[[target]], self.targets.item[[target]])[0])

    def retrain_without(self, rows: np.ndarray) -> FactorModel:
        """The same solver from the same start, on the training ratings minus ``rows``."""
        if self.sgd is not None or self.two_tower is not None:  # every other row keeps its original batch
            return (self.sgd or self.two_tower).fit(self.data, drop=rows)
        keep = np.ones(len(self.data), dtype=bool)
        keep[rows] = False
        data, m = self.data.subset(keep), self.model
        if self.softimpute is not None:
            return self.softimpute.fit(data, init=m)
        return ALSMF(k=m.k, lam=m.lam, tol=self.tol, max_sweeps=0).fit(data, init=(m.U, m.V))

    def candidates(self, target: int) -> np.ndarray:
        u, j = self.targets.user[target], self.targets.item[target]
        return np.flatnonzero((self.data.user == u) | (self.data.item == j))


def cf_importances(
    case: MFCase, method: str, pre: Preprocessed | None = None, grams=None, rng: np.random.Generator | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per target: (candidate rows, their importance)."""
    d, m = case.data, case.model
    out = []
    for t in range(len(case.targets)):
        u, j = case.targets.user[t], case.targets.item[t]
        rows = case.candidates(t)
        own = d.user[rows] == u  # the user's ratings; the rest are the item's
        if method == "representer":
            s = np.where(
                own,
                pre.alpha[rows] * (pre.Vt[d.item[rows]] @ pre.Vt[j]),
                pre.alpha[rows] * (pre.Ut[d.user[rows]] @ pre.Ut[u]),
            )
        elif method == "fia":
            HU, HV = grams
            eye = (m.lam or 1e-3 * float(np.trace(HU, axis1=1, axis2=2).mean()) / m.k) * np.eye(m.k)
            xU = np.linalg.solve(HU[u] + eye, m.V[j])  # H_U⁻¹ V_j
            xV = np.linalg.solve(HV[j] + eye, m.U[u])  # H_V⁻¹ U_u
            r = d.rating[rows] - m.predict(d.user[rows], d.item[rows])
            s = (2 * r / len(d)) * np.where(own, m.V[d.item[rows]] @ xU, m.U[d.user[rows]] @ xV)
        elif method == "tracin":
            s = tracin_cp(m.checkpoints, d, rows, m.mu, u, j)
        elif method == "random":
            s = rng.normal(size=len(rows))
        else:
            raise ValueError(f"unknown method {method!r}; choose from {CF_METHODS}")
        out.append((rows, s))
    return out


def cf_trial_case(
    data: Interactions,
    trial: int,
    n_targets: int,
    k: int = 32,
    model: str = "als",
    user_features: np.ndarray | None = None,
) -> MFCase:
    """Trial ``trial``: its own 90/10 split, the model with seed ``trial``, ``n_targets`` random held-out
    pairs. ALS-MF's λ is the refresh default for the [−1, 1] scale (the same model up to a factor);
    SGD-MF follows App. E (learning rate 2, batches of 3000, 10 epochs); SoftImpute is Mazumder et al.'s
    nuclear-norm solver, explained through its SVD (Cor. 4); the two-tower model follows App. E's
    YoutubeNet (Adam, learning rate 10⁻³, batches of 3000, 20 epochs) over ``user_features``."""
    rng = np.random.default_rng(trial)
    data = normalised(data)
    test = rng.random(len(data)) < 0.1
    train = data.subset(~test)
    pick = np.sort(rng.choice(np.flatnonzero(test), n_targets, replace=False))
    targets = Targets.from_pairs(data.user[pick], data.item[pick])
    if model == "sgd":
        sgd = SGDMF(k=k, seed=trial)
        return MFCase(train, targets, sgd.fit(train), sgd=sgd)
    if model == "two-tower":
        tt = TwoTower(user_features, k=k, seed=trial)
        return MFCase(train, targets, tt.fit(train), two_tower=tt)
    if model == "softimpute":  # λ = 3e-4 gives rank ~7 on ml-100k (the paper: rank 12 on ML-1M)
        si = SoftImpute(lam=3e-4, max_rank=48, tol=1e-6)
        return MFCase(train, targets, si.fit(train), softimpute=si)
    return MFCase(train, targets, ALSMF(k=k, lam=default_lam(len(train)) / 2, seed=trial).fit(train))


def cf_plan(case: MFCase, methods=None, seed: int = 0, fractions=FRACTIONS) -> tuple[list[Job], dict]:
    methods = methods or (SGD_METHODS if case.sgd is not None else CF_METHODS)
    d, m = case.data, case.model

    def scores_of(method):
        pre = Preprocessed.from_model(m, d) if method == "representer" else None
        grams = (
            curvature_grams(m.U, m.V, Pattern(d.user, d.item, d.user_indptr, d.n_users, d.n_items), len(d))
            if method == "fia"
            else None
        )
        return cf_importances(case, method, pre, grams, np.random.default_rng(seed))

    return plan_jobs(methods, len(case.targets), scores_of, fractions)
