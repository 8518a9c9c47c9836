"""A two-tower model in the spirit of YoutubeNet (Covington et al. 2016), in numpy.

    user tower   f(u) = W₃ relu(W₂ relu(W₁ [x_u ; h_u] + b₁) + b₂) + b₃ ∈ ℝᵏ
                 x_u: the user's features (numeric standardised, categories one-hot)
                 h_u = (1/|D_u|) Σ_{j ∈ D_u} E_j, the mean of the history's input embeddings
    item tower   the item embedding V_j ∈ ℝᵏ (the paper's item encoder "contains only item embeddings")
    prediction   ŷ(u, j) = μ + ⟨f(u), V_j⟩, squared loss, Adam on minibatches (App. E)

It is explained as the paper does (§5.3): the final user embeddings U = [f(u₁); …] and the item
embeddings V are a bilinear MF model and the towers are fixed encoders, so ``fit`` returns an
``FactorModel`` whose U is every user's f(u). There is no λ, so explainers drop 1/(λ|D|).

Deterministic for a seed, like ``SGDMF``: the initialisation and every epoch's batch order depend only on
the seed and |D|. ``fit(data, drop=rows)`` removes the rows from their batches and from the users'
histories (a deleted rating is no longer part of the input either) — the "same initialisation and
solver" retraining of case deletion.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from ..interactions import Interactions
from .base import FactorModel
from .sgd_mf import kept_ratings, minibatches


def encode_features(table: pa.Table, max_categories: int = 64) -> np.ndarray:
    """Rows of ``table`` as a dense feature matrix: numeric columns standardised, string columns
    one-hot. Identifier-like columns (``id``, and strings with more than ``max_categories`` values,
    such as zip codes) are left out."""
    blocks = []
    for name in table.column_names:
        col = table.column(name)
        if name == "id":
            continue
        if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            x = col.to_numpy(zero_copy_only=False).astype(float)
            blocks.append(((x - x.mean()) / (x.std() or 1.0))[:, None])
        elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            codes = pc.dictionary_encode(col).combine_chunks()
            if len(codes.dictionary) <= max_categories:
                blocks.append(np.eye(len(codes.dictionary))[codes.indices.to_numpy(zero_copy_only=False)])
    return np.hstack(blocks) if blocks else np.zeros((table.num_rows, 0))


class _Adam:
    """Adam (Kingma & Ba 2015) over a list of parameter arrays, updated in place."""

    def __init__(self, params: list[np.ndarray], lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.params, self.lr, self.b1, self.b2, self.eps, self.t = params, lr, b1, b2, eps, 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def step(self, grads: list[np.ndarray]) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


class TwoTower:
    """YoutubeNet-style two-tower regression model (see the module docstring).

    Parameters
    ----------
    features : (n_users, p) user features (``encode_features``), rows in user index order
    k : embedding size; hidden : width of the user tower's hidden layers; layers : how many
    lr, batch, epochs : Adam's step size, minibatch size and passes over the data
    """

    def __init__(
        self,
        features: np.ndarray,
        k: int = 32,
        hidden: int = 64,
        layers: int = 2,
        lr: float = 1e-3,
        batch: int = 3000,
        epochs: int = 20,
        seed: int = 0,
    ):
        self.F = np.asarray(features, dtype=float)
        self.k, self.hidden, self.layers, self.lr = k, hidden, layers, lr
        self.batch, self.epochs, self.seed = batch, epochs, seed

    def _init(self, rng, n_items: int) -> list[np.ndarray]:
        """[E, V, W₁, b₁, …, W_L, b_L]: He-normal weights, small normal embeddings."""
        e = self.k
        E = rng.normal(scale=0.1, size=(n_items, e))
        V = rng.normal(scale=0.1, size=(n_items, self.k))
        sizes = [self.F.shape[1] + e] + [self.hidden] * self.layers + [self.k]
        params = [E, V]
        for a, b in zip(sizes[:-1], sizes[1:]):
            params += [rng.normal(scale=np.sqrt(2.0 / a), size=(a, b)), np.zeros(b)]
        return params

    def _tower(self, params, users: np.ndarray, H_users: sp.csr_array):
        """f(users) and the activations the backward pass needs; ``H_users`` = the users' rows of H."""
        E, Ws = params[0], params[2:]
        x = np.hstack([self.F[users], H_users @ E])
        acts = [x]
        for layer in range(0, len(Ws), 2):
            z = acts[-1] @ Ws[layer] + Ws[layer + 1]
            acts.append(np.maximum(z, 0.0) if layer + 2 < len(Ws) else z)
        return acts

    def _tower_grads(self, params, H_users, acts, g_f) -> tuple[np.ndarray, list[np.ndarray]]:
        """Back-propagate dL/df(users) = g_f through the tower: (dL/dE, [dL/dW₁, dL/db₁, …])."""
        Ws = params[2:]
        grads = [None] * len(Ws)
        g = g_f
        for layer in range(len(Ws) - 2, -1, -2):
            a = acts[layer // 2]
            grads[layer], grads[layer + 1] = a.T @ g, g.sum(axis=0)
            g = g @ Ws[layer].T
            if layer > 0:
                g = g * (a > 0)  # relu′ of the layer below (its activation is > 0 exactly where z > 0)
        g_h = g[:, self.F.shape[1] :]
        return H_users.T @ g_h, grads

    def fit(self, data: Interactions, drop: np.ndarray | None = None) -> FactorModel:
        t0 = time.perf_counter()
        rng = np.random.default_rng(self.seed)
        params = self._init(rng, data.n_items)
        V = params[1]  # the item embeddings (params[0] holds the history input embeddings E)
        u, i = data.user.astype(np.intp), data.item.astype(np.intp)
        w, mu, y = kept_ratings(data, drop)
        # H: each user's kept history, rows summing to 1 (h_u = H_u E)
        deg = np.bincount(u, weights=w, minlength=data.n_users)
        H = sp.csr_array((w / np.maximum(deg[u], 1.0), (u, i)), shape=(data.n_users, data.n_items))
        H.eliminate_zeros()
        adam = _Adam(params, self.lr)
        for _ in range(self.epochs):
            for b in minibatches(rng, w > 0, self.batch):
                users, pos = np.unique(u[b], return_inverse=True)
                H_users = H[users]  # sliced once for both passes
                acts = self._tower(params, users, H_users)
                f = acts[-1]
                r = y[b] - np.einsum("nk,nk->n", f[pos], V[i[b]])
                # d/dŷ of (1/batch) Σ r²; a fixed denominator, so a deleted row changes no other row's weight
                A = sp.csr_array((-2.0 * r / self.batch, (pos, i[b])), shape=(len(users), data.n_items))
                g_E, g_W = self._tower_grads(params, H_users, acts, A @ V)
                adam.step([g_E, A.T @ f] + g_W)
        U = self._tower(params, np.arange(data.n_users), H)[-1]
        r = (y - np.einsum("nk,nk->n", U[u], V[i])) * (w > 0)
        return FactorModel(
            U,
            V.copy(),
            mu,
            None,
            int(w.sum()),
            kind="two-tower",
            info={
                "epochs": self.epochs,
                "lr": self.lr,
                "batch": self.batch,
                "hidden": self.hidden,
                "layers": self.layers,
                "train_rmse": float(np.sqrt((r**2).sum() / w.sum())),
                "seconds": time.perf_counter() - t0,
            },
        )
