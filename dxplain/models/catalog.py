"""The models ``dxplain train`` (and ``refresh --model-kind``) can fit, by name, with one vocabulary of settings.

- ``mf``: ALS-MF, squared loss on centred ratings, ℓ2 on the factors (``models.als.trainer.ALSMF``);
- ``biased``: biased MF, μ + b_u + c_i + ⟨U_u, V_i⟩ (``models.biased_mf.BiasedMF``);
- ``ials``: confidence-weighted ALS in the ``implicit`` or ``spark`` convention (``models.ials.IALS``);
- ``bce``: BCE MF on the positives and sampled negatives (``models.implicit_mf.ImplicitMF``).

``select`` chooses λ (and λ_b for ``biased``, α for ``ials``) on a seeded validation split carved from the data,
then refits on all of it; the chosen values are in the model's ``settings["selected"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import DegenerateError, InputError
from ..interactions import Interactions
from .base import FactorModel

MODELS = ("mf", "biased", "ials", "bce")
# ``mf --select``'s grid, as ridges λ|D|/2 around the default 15 (``models.als.trainer.DEFAULT_RIDGE``)
SELECT_RIDGES = (5.0, 10.0, 15.0, 20.0, 30.0)
VALIDATION_SHARE = 0.1


@dataclass(frozen=True)
class TrainSettings:
    """What ``dxplain train`` passes; None = the model's own default."""

    model: str = "mf"
    k: int | None = None
    lam: float | None = None
    lam_bias: float | None = None
    convention: str | None = None
    alpha: float | None = None
    select: bool = False
    seed: int = 0
    neg_samples: int = 4
    neg_weight: float = 1.0

    def check(self, flag: str = "--model") -> None:
        """Refuse settings the named model has no meaning for (InputError); ``flag``: the option naming the model
        (``dxplain train --model``, ``dxplain refresh --model-kind``)."""
        if self.model not in MODELS:
            raise InputError(f"{flag} {self.model!r}: give one of {', '.join(MODELS)}")
        if self.model != "ials" and (self.convention is not None or self.alpha is not None):
            raise InputError(
                f"--convention and --alpha are iALS's settings; {flag} {self.model} has neither: drop them, "
                f"or pass {flag} ials"
            )
        if self.model != "biased" and self.lam_bias is not None:
            raise InputError(
                f"--lam-bias is biased MF's setting; {flag} {self.model} has none: drop it, or pass {flag} biased"
            )
        if self.select and self.model == "bce":
            raise InputError("--select chooses λ for mf, biased and ials; for bce give --lam")


def train(data: Interactions, s: TrainSettings) -> tuple[FactorModel, Interactions]:
    """Fit the named model on ``data``; returns it and the table it was fitted on (``bce``: the positives with
    their sampled negatives, which its explanation sums over; otherwise ``data``)."""
    s.check()
    if s.model == "mf":
        from .als.trainer import ALSMF, DEFAULT_K

        trainer = ALSMF(k=s.k or DEFAULT_K, lam=s.lam, seed=s.seed)
        return (select_mf(data, trainer, s.seed) if s.select else trainer.fit(data)), data
    if s.model == "biased":
        from .biased_mf import DEFAULT_K, BiasedMF
        from .biased_select import select

        trainer = BiasedMF(k=s.k or DEFAULT_K, lam=s.lam, lam_bias=s.lam_bias, seed=s.seed)
        if s.select:
            lams = None if s.lam is None else (s.lam,)
            biases = None if s.lam_bias is None else (s.lam_bias,)
            return select(data, ks=(trainer.k,), lams=lams, lam_biases=biases, seed=s.seed, trainer=trainer), data
        return trainer.fit(data), data
    if s.model == "ials":
        from .ials import DEFAULT_ALPHA, DEFAULT_K, IALS, check_settings

        convention = s.convention or "implicit"
        check_settings(convention, s.alpha if s.alpha is not None else DEFAULT_ALPHA, s.lam)
        trainer = IALS(
            k=s.k or DEFAULT_K, lam=s.lam, alpha=s.alpha or DEFAULT_ALPHA, convention=convention, seed=s.seed
        )
        if s.select:
            from .ials_select import select as select_ials

            lams = None if s.lam is None else (s.lam,)
            alphas = None if s.alpha is None else (s.alpha,)
            return select_ials(data, trainer, lams=lams, alphas=alphas, seed=s.seed), data
        return trainer.fit(data), data
    from .implicit_mf import ImplicitMF, sample_negatives, terms_of, training_table
    from .policy import IDENTITY_RTOL

    nu, ni = sample_negatives(data, s.neg_samples, s.seed)
    table = training_table(data, nu, ni)
    trainer = ImplicitMF(k=s.k or 32, lam=s.lam, neg_weight=s.neg_weight, rtol=IDENTITY_RTOL, seed=s.seed)
    return trainer.fit(terms_of(table, s.neg_weight)), table


def select_mf(data: Interactions, trainer, seed: int, share: float = VALIDATION_SHARE) -> FactorModel:
    """ALS-MF's λ by validation RMSE on a seeded ``share`` of the rows (the ridge λ|D|/2 held in the grid, so
    a fit on the remaining rows regularises a user's rows as the refit does), then refitted on all of ``data``."""
    n = len(data)
    held = np.random.default_rng(seed).random(n) < share
    fit_part, val = data.subset(~held), data.subset(held)
    grid = []
    for ridge in SELECT_RIDGES:
        try:
            m = replace(trainer, lam=2.0 * ridge / len(fit_part)).fit(fit_part)
        except DegenerateError as e:  # this λ outweighs the data: a grid point that lost, not an error
            grid.append({"lam": 2.0 * ridge / n, "ridge": ridge, "val_rmse": None, "failed": str(e)})
            continue
        rmse = float(np.sqrt(np.mean((m.predict(val.user, val.item) - val.rating) ** 2)))
        grid.append({"lam": 2.0 * ridge / n, "ridge": ridge, "val_rmse": rmse, "sweeps": m.info["sweeps"]})
    fitted = [row for row in grid if row["val_rmse"] is not None]
    if not fitted:
        raise DegenerateError(f"every λ of --select's grid collapsed the factors on this data: {grid[0]['failed']}")
    best = min(fitted, key=lambda row: row["val_rmse"])
    model = replace(trainer, lam=best["lam"]).fit(data)
    model.settings["selected"] = {
        "k": trainer.k,
        "lam": best["lam"],
        "val_rmse": best["val_rmse"],
        "validation": {"rows": int(held.sum()), "share": share, "seed": seed},
        "grid": grid,
    }
    return model
