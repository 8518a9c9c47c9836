"""Representer explanations of biased MF (docs/methods.md §1, "Biased MF"), by the one explainer.

The score of a target (u, j) is s_uj = ⟨Ũ_u, Ṽ_j⟩ = b_u + c_j + ⟨U_u, V_j⟩ (the prediction minus μ;
``models.biased_mf``). With α_ui = 2 r_ui/(λ|D|) (r the residual), at a stationary point

  side ``item`` — u's own rows:   s_uj = Σ_{j'∈D_u} α_uj' (⟨V_j', V_j⟩ + κ²) + c_j
  side ``user`` — j's raters:     s_uj = Σ_{u'∋j} α_u'j (⟨U_u', U_u⟩ + κ²) + b_u

``explain.representer.RepresenterExplainer`` computes both from the model's factors (``explain.extra_rows``:
the training rows' factors with their own bias column zeroed, and one row of kind ``bias`` per target and side).
"""

from __future__ import annotations

from ..interactions import Interactions
from ..models.base import FactorModel
from ..models.biased_mf import check_biased
from .representer import RepresenterExplainer


def BiasedExplainer(model: FactorModel, data: Interactions) -> RepresenterExplainer:  # noqa: N802 - the old class
    """The explainer of a biased-mf ``model`` on its training table (``RepresenterExplainer.of``)."""
    check_biased(model)
    return RepresenterExplainer.of(model, data)
