"""Kolmogorov models: P[u likes i] = θ_uᵀψ_i (θ_u a PMF, ψ_i binary), fitted by IKM, read as rules."""

from .fit import KolmogorovModel, fit_ikm, select_regularisers  # noqa: F401
