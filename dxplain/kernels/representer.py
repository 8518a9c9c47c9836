"""High-dimensional representer kernels for low-rank models (METHODS.md §1, paper App. F).

For a target (i', j') and the nuclear-norm solution Θ̂ = ŨṼᵀ:
  item-based (the user's own items):  Θ̂_{i'j'} = Σ_{j:(i',j)∈D} α_{i'j} ⟨Ṽ_j, Ṽ_{j'}⟩
  user-based (other users of j'):     Θ̂_{i'j'} = Σ_{i:(i,j')∈D} α_{ij'} ⟨Ũ_i, Ũ_{i'}⟩
with α_ij = −ℓ'(y_ij, s_ij)/(λ|D|). Both sides have one shape — a *group* (a user's history, or an
item's raters) scored against the group's targets — so one batched routine serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

# Upper bound on floats in one padded (B, d, max(k, t)) block: ~64 MB of float64.
BLOCK_ELEMENTS = 1 << 23


def balance_transforms(U: np.ndarray, V: np.ndarray, rtol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """k×r matrices T_U, T_V with Ũ = U T_U, Ṽ = V T_V, ŨṼᵀ = UVᵀ and ŨᵀŨ = ṼᵀṼ = Σ₃ (Algorithm 1).

    Algorithm 1 takes thin SVDs Û = U₁Σ₁V₁ᵀ and V̂ᵀ = U₂Σ₂V₂ᵀ, then the k×k SVD
    Σ₁V₁ᵀU₂Σ₂ = U₃Σ₃V₃ᵀ, and sets Ũ = U₁U₃√Σ₃, Ṽ = V₂V₃√Σ₃. Since U₁ = U V₁ Σ₁⁻¹ (and likewise for V),
    the SVDs need only the k×k Gram matrices: the result is two k×k transforms that can be applied
    to any block of rows, so nothing of size n×k is decomposed. Directions whose squared singular
    value is below ``rtol``·max carry no part of UVᵀ worth keeping and are dropped (rank collapse).
    """

    def half(F):
        w, W = sla.eigh(F.T @ F)
        keep = w > rtol * max(w.max(), np.finfo(float).tiny)
        s = np.sqrt(w[keep])
        return W[:, keep], s

    W1, s1 = half(U)
    W2, s2 = half(V)
    M = (s1[:, None] * (W1.T @ W2)) * s2[None, :]  # Σ₁V₁ᵀU₂Σ₂ with V₁ = W1, U₂ = W2
    U3, s3, V3t = sla.svd(M)
    r = int(np.sum(s3 > np.sqrt(rtol) * max(s3.max(initial=0.0), np.finfo(float).tiny)))
    root = np.sqrt(s3[:r])
    T_U = (W1 / s1[None, :]) @ U3[:, :r] * root[None, :]
    T_V = (W2 / s2[None, :]) @ V3t[:r].T * root[None, :]
    return T_U, T_V


def global_importance_squared(y: np.ndarray, s: np.ndarray, lam: float | None, n: int) -> np.ndarray:
    """α = −ℓ'(y, s)/(λ|D|) for ℓ = (y − s)²: α = 2(y − s)/(λ|D|); without λ the factor 1/(λ|D|) is dropped."""
    alpha = 2.0 * (y - s)
    return alpha / (lam * n) if lam else alpha


@dataclass
class Groups:
    """Groups of history rows scored against groups of target rows.

    Group g has history positions ``hist[hist_ptr[g]:hist_ptr[g+1]]`` (rows of ``F_hist`` via
    ``hist_row``) and targets ``tgt[tgt_ptr[g]:tgt_ptr[g+1]]`` (rows of ``F_tgt`` via ``tgt_row``).
    ``hist`` indexes the training interactions (for α and for the output); ``tgt`` indexes targets.
    """

    hist_ptr: np.ndarray
    hist: np.ndarray
    hist_row: np.ndarray
    tgt_ptr: np.ndarray
    tgt: np.ndarray
    tgt_row: np.ndarray


@dataclass
class Attributions:
    """Selected attributions: target index, training-interaction index, α, local, α·local."""

    target: np.ndarray
    train: np.ndarray
    global_importance: np.ndarray
    local_importance: np.ndarray

    @property
    def importance(self) -> np.ndarray:
        return self.global_importance * self.local_importance

    @staticmethod
    def concat(parts: list["Attributions"]) -> "Attributions":
        if not parts:
            e = np.empty(0)
            return Attributions(e.astype(np.int64), e.astype(np.int64), e, e)
        return Attributions(*(np.concatenate([getattr(p, f) for p in parts])
                              for f in ("target", "train", "global_importance", "local_importance")))


def split_heavy_groups(g: Groups, budget: int = BLOCK_ELEMENTS) -> Groups:
    """Split the targets of groups whose d×t block would exceed ``budget`` (selection is per target, so exact)."""
    d = np.diff(g.hist_ptr)
    t = np.diff(g.tgt_ptr)
    per = np.maximum(1, budget // np.maximum(d, 1))
    pieces = np.where(t > 0, -(-t // per), 0)
    if np.all(pieces <= 1):
        return g
    gid = np.repeat(np.arange(len(d)), np.maximum(pieces, 0))
    first = np.concatenate([[0], np.cumsum(pieces)[:-1]])
    piece = np.arange(len(gid)) - np.repeat(first, np.maximum(pieces, 0))
    starts = g.tgt_ptr[gid] + piece * per[gid]
    stops = np.minimum(starts + per[gid], g.tgt_ptr[gid + 1])
    tgt_idx = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) if len(gid) else np.empty(0, np.int64)
    hist_idx = np.concatenate([np.arange(g.hist_ptr[x], g.hist_ptr[x + 1]) for x in gid]) if len(gid) else np.empty(0, np.int64)
    new_hist_ptr = np.concatenate([[0], np.cumsum(d[gid])])
    new_tgt_ptr = np.concatenate([[0], np.cumsum(stops - starts)])
    return Groups(new_hist_ptr, g.hist[hist_idx], g.hist_row[hist_idx], new_tgt_ptr, g.tgt[tgt_idx], g.tgt_row[tgt_idx])


def _select(imp: np.ndarray, valid: np.ndarray, top_k: int) -> np.ndarray:
    """Boolean mask over (B, d, t): the top_k largest positive and top_k most negative per (b, ·, t)."""
    if top_k <= 0:
        return valid
    d = imp.shape[1]
    if d <= top_k:
        return valid & (imp != 0)
    keep = np.zeros(imp.shape, dtype=bool)
    for sign in (1.0, -1.0):
        score = np.where(valid, sign * imp, -np.inf)
        idx = np.argpartition(-score, top_k - 1, axis=1)[:, :top_k, :]
        chosen = np.take_along_axis(score, idx, axis=1) > 0
        np.put_along_axis(keep, idx, chosen | np.take_along_axis(keep, idx, axis=1), axis=1)
    return keep


def grouped_attributions(g: Groups, alpha: np.ndarray, F_hist: np.ndarray, F_tgt: np.ndarray,
                         top_k: int) -> Attributions:
    """Score every group's history against its targets: L = F_hist[hist] F_tgt[tgt]ᵀ, I = α ⊙ L.

    Groups are bucketed by history length (powers of two bound padding at 2x) and each bucket is
    one stacked matmul (B, d, k) @ (B, k, t); the top_k positive and top_k negative attributions per
    target are picked by argpartition (``top_k=0`` keeps all).
    """
    g = split_heavy_groups(g)
    k = F_hist.shape[1]
    d_all = np.diff(g.hist_ptr)
    t_all = np.diff(g.tgt_ptr)
    live = np.flatnonzero((d_all > 0) & (t_all > 0))
    F_hist_pad = np.vstack([F_hist, np.zeros((1, k))])
    F_tgt_pad = np.vstack([F_tgt, np.zeros((1, k))])
    hist_row = g.hist_row.astype(np.intp)
    tgt_row = g.tgt_row.astype(np.intp)
    level = np.ceil(np.log2(np.maximum(d_all, 1))).astype(np.int64) * 64 + \
        np.ceil(np.log2(np.maximum(t_all, 1))).astype(np.int64)
    parts = []
    for lv in np.unique(level[live]):
        members = live[level[live] == lv]
        d, t = int(d_all[members].max()), int(t_all[members].max())
        step = max(1, BLOCK_ELEMENTS // (d * max(k, t)))
        od, ot = np.arange(d), np.arange(t)
        for a in range(0, len(members), step):
            b = members[a:a + step]
            hv = od[None, :] < d_all[b][:, None]  # (B, d)
            tv = ot[None, :] < t_all[b][:, None]  # (B, t)
            hpos = np.where(hv, g.hist_ptr[b][:, None] + od[None, :], 0)
            tpos = np.where(tv, g.tgt_ptr[b][:, None] + ot[None, :], 0)
            H = F_hist_pad[np.where(hv, hist_row[hpos], len(F_hist))]  # (B, d, k)
            T = F_tgt_pad[np.where(tv, tgt_row[tpos], len(F_tgt))]  # (B, t, k)
            L = np.matmul(H, T.transpose(0, 2, 1))  # (B, d, t)
            a_b = np.where(hv, alpha[g.hist[hpos]], 0.0)  # (B, d)
            imp = a_b[:, :, None] * L
            valid = hv[:, :, None] & tv[:, None, :]
            bb, dd, tt = np.nonzero(_select(imp, valid, top_k))
            parts.append(Attributions(g.tgt[tpos[bb, tt]], g.hist[hpos[bb, dd]], a_b[bb, dd], L[bb, dd, tt]))
    return Attributions.concat(parts)


def top_n_unseen(U_block: np.ndarray, V: np.ndarray, seen_indptr: np.ndarray, seen_items: np.ndarray,
                 n: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-n items by ⟨U_i, V_j⟩ among items the block's users have not rated, best first.

    ``seen_indptr``/``seen_items`` is the CSR of the block's rated items. Returns (items, scores),
    each (block, n); where fewer than n items are unseen the tail holds -1 and -inf.
    """
    S = U_block @ V.T  # (block, n_items): the caller sizes the block from a memory budget
    rows = np.repeat(np.arange(len(U_block)), np.diff(seen_indptr))
    S[rows, seen_items] = -np.inf
    n_eff = min(n, S.shape[1])
    idx = np.argpartition(-S, n_eff - 1, axis=1)[:, :n_eff]
    sc = np.take_along_axis(S, idx, axis=1)
    order = np.argsort(-sc, axis=1, kind="stable")
    idx, sc = np.take_along_axis(idx, order, axis=1), np.take_along_axis(sc, order, axis=1)
    idx = np.where(np.isfinite(sc), idx, -1)
    if n_eff < n:
        idx = np.pad(idx, ((0, 0), (0, n - n_eff)), constant_values=-1)
        sc = np.pad(sc, ((0, 0), (0, n - n_eff)), constant_values=-np.inf)
    return idx, sc
