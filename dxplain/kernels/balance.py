"""Balancing a factorisation, two ways that keep UVᵀ.

- For explaining (Algorithm 1 of the representer paper, docs/methods.md §1; ``balance_transforms``): Ũ = U T_U,
  Ṽ = V T_V with ŨṼᵀ = UVᵀ and ŨᵀŨ = ṼᵀṼ diagonal, the factors whose rows the representer's inner products compare.
- For training (``balancing_transform``, ``rescaling``): the symmetric P, without a rotation, for which (U P, V P⁻¹)
  has the least (weighted) penalty: the trainers' rescaling between sweeps, identity at a stationary point."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla


def balanced_norm(G: np.ndarray, T: np.ndarray) -> float:
    """‖F T‖₂ from F's Gram G = FᵀF and a ``balance_transforms`` transform T: no row of the balanced factor
    F T is longer, and both balanced factors have this norm (ŨᵀŨ = ṼᵀṼ = Σ₃), so no score exceeds
    ‖Ũ_i‖ times it. Only for T from ``balance_transforms``: TᵀGT = Σ₃ is diagonal, so its largest diagonal
    entry is its largest eigenvalue."""
    return float(np.sqrt(max(np.max(np.diag(T.T @ G @ T), initial=0.0), 0.0)))


def balance_transforms(U: np.ndarray, V: np.ndarray, rtol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """k×r matrices T_U, T_V with Ũ = U T_U, Ṽ = V T_V, ŨṼᵀ = UVᵀ and ŨᵀŨ = ṼᵀṼ = Σ₃ (Algorithm 1).

    Algorithm 1 takes thin SVDs Û = U₁Σ₁V₁ᵀ and V̂ᵀ = U₂Σ₂V₂ᵀ, then the k×k SVD
    Σ₁V₁ᵀU₂Σ₂ = U₃Σ₃V₃ᵀ, and sets Ũ = U₁U₃√Σ₃, Ṽ = V₂V₃√Σ₃. Since U₁ = U V₁ Σ₁⁻¹ (and likewise for V),
    the SVDs need only the k×k Gram matrices: the result is two k×k transforms that can be applied
    to any block of rows, so nothing of size n×k is decomposed. Directions whose squared singular
    value is below ``rtol``·max carry no part of UVᵀ worth keeping and are dropped (rank collapse).
    """

    return balance_transforms_from_grams(U.T @ U, V.T @ V, rtol)


def balance_transforms_from_grams(
    G_U: np.ndarray, G_V: np.ndarray, rtol: float = 1e-12
) -> tuple[np.ndarray, np.ndarray]:
    """``balance_transforms`` from the Grams UᵀU and VᵀV alone: factors kept in row blocks elsewhere
    (``models.blocks``) send k×k sums, not rows."""

    def half(G):
        w, W = sla.eigh(G)
        keep = w > rtol * max(w.max(), np.finfo(float).tiny)
        s = np.sqrt(w[keep])
        return W[:, keep], s

    W1, s1 = half(G_U)
    W2, s2 = half(G_V)
    M = (s1[:, None] * (W1.T @ W2)) * s2[None, :]  # Σ₁V₁ᵀU₂Σ₂ with V₁ = W1, U₂ = W2
    U3, s3, V3t = sla.svd(M)
    r = int(np.sum(s3 > np.sqrt(rtol) * max(s3.max(initial=0.0), np.finfo(float).tiny)))
    root = np.sqrt(s3[:r])
    T_U = (W1 / s1[None, :]) @ U3[:, :r] * root[None, :]
    T_V = (W2 / s2[None, :]) @ V3t[:r].T * root[None, :]
    return T_U, T_V


def _spd_eigh(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w, Q) of the symmetrised M, w clipped at 0."""
    w, Q = np.linalg.eigh((M + M.T) / 2)
    return np.maximum(w, 0.0), Q


def _power(eig: tuple[np.ndarray, np.ndarray], power: float) -> np.ndarray:
    w, Q = eig
    return (Q * w**power) @ Q.T


def _spd_power(M: np.ndarray, power: float) -> np.ndarray:
    return _power(_spd_eigh(M), power)


def _balancing_pair(eig_A: tuple[np.ndarray, np.ndarray], B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, P⁻¹) of ``balancing_transform`` from A's eigendecomposition: both from one decomposition of P²."""
    A_half, A_inv_half = _power(eig_A, 0.5), _power(eig_A, -0.5)
    eig_X = _spd_eigh(A_inv_half @ _spd_power(A_half @ B @ A_half, 0.5) @ A_inv_half)
    return _power(eig_X, 0.5), _power(eig_X, -0.5)


def balancing_transform(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The symmetric positive definite P for which (U P, V P⁻¹) has the least penalty tr(PᵀAP) + tr(P⁻¹BP⁻ᵀ), with
    A = Σ_u w_u U_u U_uᵀ and B = Σ_i w_i V_i V_iᵀ (both positive definite). UVᵀ, and so f's data term, stays.

    Every minimiser R satisfies RᵀAR = R⁻¹BR⁻ᵀ (the weighted Grams balanced; stationary points are); the minimisers
    are R = P·Q, Q orthogonal, and P is the one without a rotation: P² = A⁻¹ # B (the matrix geometric mean,
    X A X = B), so P = I at a balanced pair and the transform moves factors continuously, as an accelerated
    iteration needs.
    """
    return _balancing_pair(_spd_eigh(A), B)[0]


# The rescaling is skipped when a side's Gram has λ_min ≤ this × λ_max (``rescaling``).
RESCALE_CONDITION = 1e-8


def rescaling(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(P, P⁻¹) of ``balancing_transform(A, B)`` for an iteration that rescales its factors as it goes, or None
    when there is no well-conditioned one: a Gram near rank-deficient (a large λ keeps few components), whose
    square roots would amplify rounding past the factors themselves, or a transform that is not finite; None for
    0 × 0 Grams too (nothing to rescale)."""
    if not len(A):
        return None
    try:
        eig_A = np.linalg.eigh((A + A.T) / 2)
        ends = [eig_A[0][[0, -1]], np.linalg.eigvalsh(B)[[0, -1]]]
        if any(not lo > RESCALE_CONDITION * hi for lo, hi in ends):
            return None
        P, P_inv = _balancing_pair((np.maximum(eig_A[0], 0.0), eig_A[1]), B)
    except np.linalg.LinAlgError:
        return None
    return (P, P_inv) if np.all(np.isfinite(P)) and np.all(np.isfinite(P_inv)) else None
