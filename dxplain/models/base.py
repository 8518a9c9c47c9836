"""The common shape of every factor model: U, V, an offset μ, and what explaining them needs to know.

The model store (``io.model_store``) reads and writes arrays and a flat dictionary of attributes; this
class turns those into a model and back, so io never knows a model class.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np

from ..kernels.als import pair_scores
from .factor_rows import FactorRows, factor_rows

# Factors whose every score is below this times the ratings' spread have collapsed (``check_not_degenerate``).
COLLAPSED = 1e-6

# Attribute names the store keeps beside the factors (everything but U and V).
_META = ("mu", "lam", "n_train", "loss", "kind", "grad_norm", "info", "settings")


@dataclass
class FactorModel:
    """Trained (or imported) factors and everything needed to explain them.

    ``loss`` names the training loss (``squared``, ``bce``, …): the representer's α is −ℓ′ of that loss,
    so an explainer refuses a loss it does not know rather than explain it with the wrong formula.
    """

    U: np.ndarray | FactorRows  # (n_users, k): an array, or rows kept elsewhere (``models.factor_rows``)
    V: np.ndarray | FactorRows  # (n_items, k)
    mu: float  # global offset added to every score (the mean removed before fitting)
    lam: float | None  # λ; None for factors imported without one
    n_train: int  # |D|
    loss: str = "squared"
    kind: str = "als-mf"
    grad_norm: float | None = None
    info: dict = field(default_factory=dict)
    # the loss's own settings beside λ, as its trainer and explainer read them (iALS: convention, alpha;
    # biased MF: lam_bias and its bias columns); empty for the plain squared and BCE models
    settings: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return self.U.shape[1]

    def predict(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        U, u_at = factor_rows(self.U).indexed(u)
        V, i_at = factor_rows(self.V).indexed(i)
        return self.mu + pair_scores(U, V, u_at, i_at)

    def whole(self) -> FactorModel:
        """This model with its factors as arrays here: gathered from their row-block files, if kept so."""
        return replace(self, U=factor_rows(self.U).gather(), V=factor_rows(self.V).gather())

    def check_not_degenerate(self, data) -> None:
        """Refuse factors that are zero, or so near it that every score is below ``COLLAPSED`` times the
        ratings' spread (every recommendation then a tie broken by rounding), naming why. The longest
        rows' norms bound every |score|, wherever the factors are kept (``FactorRows.max_row_norm``).

        Squared loss on ratings of a single value is a cause (centring makes every target 0); a λ large
        enough that the optimum is UVᵀ = 0 is the other, and ALS only approaches that zero."""
        scale = factor_rows(self.U).max_row_norm() * factor_rows(self.V).max_row_norm()
        lo, hi = data.rating_range()
        if scale > 0 and (lo == hi or scale > COLLAPSED * (hi - lo)):
            return
        from ..errors import DegenerateError

        if self.kind == "imported" or self.lam is None:
            why = "check the factor files and their scale (were they exported from the model that scores?)"
        elif len(data) and lo == hi:
            why = (
                f"the data has a single rating value ({lo:g}), which centring turns into "
                "all-zero targets: use --implicit (BCE with sampled negatives; refresh and prototypes detect "
                "such data by themselves)"
            )
        else:
            why = f"λ = {self.lam:g} outweighs the data: lower --lam"
        state = (
            "are all zero"
            if scale == 0
            else (f"shrank to nearly zero (every |score| ≤ {scale:.1e}, for ratings from {lo:g} to {hi:g})")
        )
        fitted = "" if self.kind == "imported" else "fitted "
        raise DegenerateError(f"the {fitted}{self.kind} factors {state}: {why}")

    def metadata(self) -> dict:
        """What the store writes beside U and V."""
        meta = {name: getattr(self, name) for name in _META}
        meta["regulariser"] = "l2"  # (λ/2)(‖U‖² + ‖V‖²): what the representer's 1/(λ|D|) assumes
        meta["objective_scaling"] = self.settings.get(  # a loss with settings names its own objective
            "objective", getattr(self, "objective_scaling", "(1/|D|) Σ (y − μ − ⟨U_i,V_j⟩)² + (λ/2)(‖U‖² + ‖V‖²)")
        )
        return meta

    def save(self, path, data):
        """Write the model to a Zarr store at ``path`` (atomically), tied to ``data`` by its fingerprint."""
        from ..io import model_store

        U, V = factor_rows(self.U), factor_rows(self.V)
        return model_store.write_model_rows(
            path, (U.shape, U.dtype, U.rows()), (V.shape, V.dtype, V.rows()), self.metadata(), data
        )

    @classmethod
    def load(cls, path, data=None, blocks: tuple | None = None) -> FactorModel:
        """Read a stored model; with ``data``, check it was fitted on exactly these interactions and ids.
        ``blocks=(mapper, parts)`` leaves the factors in row-block files beside the parts, each block
        read by a task (``models.blocks.Blocks``), never whole here."""
        from ..io import model_store

        U, V, attrs = model_store.read_model(path, data, factors=blocks is None)
        if blocks is not None:
            from ..io.row_blocks import Scratch
            from .blocks import Blocks

            mapper, parts = blocks
            scratch = Scratch(parts.root)
            U = Blocks.from_store(mapper, scratch, path, "user", parts.user_cuts, attrs["k"])
            V = Blocks.from_store(mapper, scratch, path, "item", parts.item_cuts, attrs["k"])
        known = {f.name for f in fields(FactorModel)}
        return FactorModel(U=U, V=V, **{k: v for k, v in attrs.items() if k in known})
