"""Matrix factorisation trained by minibatch SGD, with a checkpoint per epoch (for TracInCP).

    loss per minibatch B: (1/|B|) Σ_{(i,j)∈B} (y_ij − μ − ⟨U_i,V_j⟩)²  (+ (λ/2)(‖U_i‖² + ‖V_j‖²) per sample)

The paper's SGD-MF (App. E: plain SGD, large learning rate, batches of 3000, 10 epochs). It is not
trained to a stationary point, so the representer identity does not hold exactly; explainers that need
λ drop the 1/(λ|D|) factor when λ = 0.

Deterministic for a seed: the initialisation and every epoch's batch order depend only on the seed
and |D|. ``fit(data, drop=rows)`` removes rows from their batches without changing any other sample's
batch or weight — the "same initialisation and solver" retraining of case deletion.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..interactions import Interactions
from ..kernels.als import pair_scores
from .base import FactorModel


@dataclass
class Checkpoint:
    U: np.ndarray
    V: np.ndarray
    lr: float  # the learning rate of the epoch that ended here


@dataclass
class SGDModel(FactorModel):
    checkpoints: list = field(default_factory=list)


def kept_ratings(data: Interactions, drop: np.ndarray | None) -> tuple[np.ndarray, float, np.ndarray]:
    """Row weights (0 for the dropped rows), the mean of the kept ratings, and the ratings minus it."""
    w = np.ones(len(data))
    if drop is not None:
        w[drop] = 0.0
    mu = float(np.average(data.rating, weights=w))
    return w, mu, data.rating - mu


def minibatches(rng: np.random.Generator, keep: np.ndarray, batch: int):
    """One epoch's minibatches of the kept rows. The order is drawn for every row, kept or not, so a
    deletion leaves every other row in the batch it had: the "same solver" of case deletion."""
    order = rng.permutation(len(keep))
    for a in range(0, len(order), batch):
        b = order[a : a + batch]
        b = b[keep[b]]
        if len(b):
            yield b


class SGDMF:
    def __init__(
        self,
        k: int = 32,
        lr: float = 2.0,
        batch: int = 3000,
        epochs: int = 10,
        lam: float = 0.0,
        seed: int = 0,
        init_scale: float = 0.1,
    ):
        self.k, self.lr, self.batch, self.epochs, self.lam = k, lr, batch, epochs, lam
        self.seed, self.init_scale = seed, init_scale

    def fit(self, data: Interactions, drop: np.ndarray | None = None) -> SGDModel:
        t0 = time.perf_counter()
        rng = np.random.default_rng(self.seed)
        U = rng.normal(scale=self.init_scale, size=(data.n_users, self.k))
        V = rng.normal(scale=self.init_scale, size=(data.n_items, self.k))
        u, i = data.user.astype(np.intp), data.item.astype(np.intp)
        w, mu, y = kept_ratings(data, drop)
        checkpoints = []
        for _ in range(self.epochs):
            for b in minibatches(rng, w > 0, self.batch):
                ub, ib = u[b], i[b]
                r = y[b] - np.einsum("nk,nk->n", U[ub], V[ib])
                scale = 2.0 / self.batch  # a fixed denominator: a deleted row changes no other row's weight
                gU = -scale * r[:, None] * V[ib] + self.lam * U[ub] / self.batch
                gV = -scale * r[:, None] * U[ub] + self.lam * V[ib] / self.batch
                np.add.at(U, ub, -self.lr * gU)
                np.add.at(V, ib, -self.lr * gV)
            checkpoints.append(Checkpoint(U.copy(), V.copy(), self.lr))
        r = y - pair_scores(U, V, u, i)
        return SGDModel(
            U,
            V,
            mu,
            self.lam or None,
            int(w.sum()),
            kind="sgd-mf",
            info={
                "epochs": self.epochs,
                "lr": self.lr,
                "batch": self.batch,
                "train_rmse": float(np.sqrt(np.average(r**2, weights=w))),
                "seconds": time.perf_counter() - t0,
            },
            checkpoints=checkpoints,
        )


def tracin_cp(
    checkpoints: list[Checkpoint], data: Interactions, rows: np.ndarray, mu: float, target_user: int, target_item: int
) -> np.ndarray:
    """TracInCP importance of training rows for the prediction at (u, j): Σ_c η_c · 2 r_z(θ_c) ∇ŷ_z(θ_c)·∇ŷ_{uj}(θ_c).

    A step on z moves θ by −η∇ℓ_z = 2η r_z ∇ŷ_z, so the prediction moves by 2η r_z ∇ŷ_z·∇ŷ_{uj}:
    positive means z pushed the prediction up. ∇ŷ_z·∇ŷ_{uj} = ⟨V_k, V_j⟩ for a rating (u, k) of the same
    user and ⟨U_i, U_u⟩ for a rating (i, j) of the same item (0 otherwise)."""
    uz, iz = data.user[rows].astype(np.intp), data.item[rows].astype(np.intp)
    own = uz == target_user
    score = np.zeros(len(rows))
    for c in checkpoints:
        r = data.rating[rows] - mu - np.einsum("nk,nk->n", c.U[uz], c.V[iz])
        dot = np.where(own, c.V[iz] @ c.V[target_item], 0.0) + np.where(
            iz == target_item, c.U[uz] @ c.U[target_user], 0.0
        )
        score += c.lr * 2 * r * dot
    return score
