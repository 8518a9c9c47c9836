"""Predictions and recommendations of a stored factor model, for ids it may not know.

``dxplain predict`` and ``dxplain recommend`` (issue 53's CLI contract) call these: no files here, the CLI
reads the model and the pairs and writes the tables (``io.targets``).

A prediction of a pair whose user and item the model knows is what the model's loss makes of its score s
(``explain.representer.predictions``: μ + s for squared loss, σ(s) for BCE, s for iALS). Where it lacks
one of them the prediction falls back to what it does know: μ plus the known side's bias (a biased model),
else μ; ``known`` says which rows fell back.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .explain.run_rows import predictions
from .explain.targets import recommend
from .interactions import Interactions
from .models.base import FactorModel
from .models.factor_rows import factor_rows
from .vocabulary import Vocabulary


def side_bias(model: FactorModel, side: str) -> np.ndarray | None:
    """A biased model's user (``side="user"``) or item biases, b = κ·Ũ[:, k] and c = κ·Ṽ[:, k+1] with
    κ = √(λ/λ_b) (``settings["bias_columns"]`` names the columns); None for a model without biases."""
    columns = model.settings.get("bias_columns")
    if not columns:
        return None
    kappa = np.sqrt(model.lam / model.settings["lam_bias"])
    F = factor_rows(model.U if side == "user" else model.V)
    return kappa * F.gather()[:, columns[side]]


def predict_pairs(model: FactorModel, u: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(prediction, known) for user and item rows ``u``, ``i`` of ``model`` (−1 where it lacks the id)."""
    u, i = np.asarray(u, np.int64), np.asarray(i, np.int64)
    known = (u >= 0) & (i >= 0)
    s = np.zeros(len(u))
    if known.any():
        s[known] = model.predict(u[known], i[known]) - model.mu
    for side, rows in (("user", u), ("item", i)):  # the unknown pairs: the known side's bias, if any
        bias = side_bias(model, side)
        lone = ~known & (rows >= 0)
        if bias is not None and lone.any():
            s[lone] = bias[rows[lone]]
    return predictions(model.loss, model.mu, s), known


def model_rows(vocabulary: Vocabulary, ids: pa.Array | pa.ChunkedArray, what: str, source: str) -> np.ndarray:
    """Rows of ``ids`` in a model's id list, −1 where the model lacks them."""
    return vocabulary.positions(vocabulary.cast(ids, what, source)).astype(np.int64)


def seen_in_model_rows(model_ids: tuple[pa.Array, pa.Array], data: Interactions) -> Interactions:
    """``data``'s interactions re-indexed by the model's user and item rows (the pairs whose ids the model
    knows): the seen items ``recommend`` excludes, in the model's index space."""
    users, items = (Vocabulary(ids) for ids in model_ids)
    u = model_rows(users, data.user_ids, "user", "the dataset")[data.user]
    i = model_rows(items, data.item_ids, "item", "the dataset")[data.item]
    keep = (u >= 0) & (i >= 0)
    return Interactions.from_indices(u[keep], i[keep], data.rating[keep], model_ids[0], model_ids[1])


def recommend_rows(model: FactorModel, seen: Interactions, users: np.ndarray, n: int) -> pa.Table:
    """Every given user's top-``n`` items by the model's prediction, none of the user's ``seen`` items:
    (user, item, rank, score) in the model's rows, rank 1-based, ties by item."""
    U, V = factor_rows(model.U).gather(), factor_rows(model.V).gather()
    t = recommend(U, V, seen, users, n)
    s = np.einsum("ij,ij->i", U[t.user], V[t.item])
    return pa.table(
        {
            "user": t.user.astype(np.int64),
            "item": t.item.astype(np.int64),
            "rank": np.asarray(t.rec_rank, np.int32),
            "score": predictions(model.loss, model.mu, s),
        }
    )
