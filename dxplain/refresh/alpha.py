"""The refresh's α pass: α per training row, written beside the parts it belongs to.

α is −c·ℓ'(y, s)/(λ|D|), or iALS's c(p − s)/(λw) (``explain.representer.global_importance_of``). It is all that
changes with the model, so it is keyed: the same model on the same data reuses the α already written, any other
rewrites it. A by-user part's α serves the item side (a user's history) and a by-item part's the user side (an
item's raters): the same numbers, except iALS's with Spark's weights, whose w is the user's on one side and the
item's on the other. ``alpha_pass`` computes it where the parts are (one task per part, which also returns an item
part's rows of B and of the user side's extra-row embedding Bx); ``alpha_from_table`` writes the α of a table held
whole in memory. Both return the parts that read α back and the factors a ``passes.RefreshJob`` carries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from ..explain.extra_rows import score_floor
from ..explain.representer import Preprocessed, explanation_factors, global_importance_of, item_embedding_rows
from ..interactions import Interactions
from ..io.partitions import Partitions, alpha_reusable, finish_alpha, write_alpha, write_alpha_part
from ..mapper import Mapper

# The side of an explanation that a part's α serves: a by-user part's rows are histories (the item side).
EXPLAINED = {"user": "item", "item": "user"}


def model_key(model) -> str:
    """What α depends on besides the data (whose parts live in a store of their own): the factors, μ, λ,
    |D|, the loss, its negative weight, the model's kind and its loss's settings."""
    h = hashlib.sha256()
    for a in (model.U, model.V):
        h.update(memoryview(np.ascontiguousarray(a, np.float64)))  # no copy of the factors
    h.update(repr((model.mu, model.lam, model.n_train, model.loss, getattr(model, "neg_weight", None))).encode())
    if model.settings:  # only models with settings (biased MF, iALS): the plain models' keys stay as they were
        h.update(json.dumps([model.kind, model.settings], sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def alpha_part(model, factors: Preprocessed, parts: Partitions, side: str, p: int, write: bool):
    """α of part p's rows (written beside it when ``write``); for an item part, its items' rows of B and Bx.

    Returns
    -------
    None for a user part; for an item part (B rows, Bx rows or None), (hi - lo, r) float64 each.
    """
    part = parts.read_part(side, p)
    alpha = global_importance_of(model, part.data, parts.n_interactions, EXPLAINED[side])
    if write:
        write_alpha_part(parts, side, p, alpha)
    if side == "user":
        return None
    lo, hi = parts.item_range(p)
    B = item_embedding_rows(alpha, part.data, lo, hi, factors.Uh)
    x = factors.extra
    return B, None if x is None else x.embeddings(factors, part.data, "user", np.arange(lo, hi))


def alpha_pass(model, parts: Partitions, mapper: Mapper, data=None) -> tuple[Partitions, Preprocessed]:
    """α, B and Bx computed where the parts are: one task per part computes α of its rows and writes it beside
    them, and an item part's task also returns its items' rows of B (and of Bx). The same α, B and Bx as
    ``Preprocessed.from_model``; this process holds the factors, B and Bx, O(users + items). ``data`` (the table
    or its ``TableSummary``) gives a biased model's score floor (``extra_rows.score_floor``).

    Returns
    -------
    parts : the parts, reading α back with each part
    factors : ``Preprocessed`` with the factors, B (n_items, r) and Bx; no α, no A
    """
    Ut, Vt, Uh, Vh, extra = explanation_factors(model)
    factors = Preprocessed(Ut, Vt, None, model.mu, None, None, model.loss, Uh, Vh, None, extra)
    if data is not None:
        factors.score_floor = score_floor(model, data)
    key = model_key(model)
    parts = dataclasses.replace(parts, with_alpha=False)  # the tasks read the data parts alone
    write = not alpha_reusable(parts, key)  # the same model on the same data: α is already there
    model_h, factors_h = mapper.put(model), mapper.put(factors)
    # B needs every item part; the user parts only when their α is (re)written.
    sides = (("user", parts.user_cuts), ("item", parts.item_cuts)) if write else (("item", parts.item_cuts),)
    tasks = [(model_h, factors_h, parts, side, p, write) for side, cuts in sides for p in range(len(cuts) - 1)]
    n_items, r = model.V.shape[0], Uh.shape[1]
    B, Bx = np.empty((n_items, r)), (None if extra is None else np.empty((n_items, Ut.shape[1])))
    for t, rows in mapper.imap(alpha_part, tasks, name="alpha"):  # an item part's rows of B into place
        if rows is not None:
            lo, hi = parts.item_range(tasks[t][4])
            B[lo:hi] = rows[0]
            if Bx is not None:
                Bx[lo:hi] = rows[1]
    parts = finish_alpha(parts, key) if write else dataclasses.replace(parts, with_alpha=True)
    factors.B, factors.Bx = B, Bx
    return parts, factors


def alpha_from_table(data: Interactions, pre: Preprocessed, parts: Partitions) -> tuple[Partitions, Preprocessed]:
    """Write (or reuse) the α of ``pre``, computed on the whole table ``data``, beside the parts: ``pre.alpha``
    beside the by-user parts, ``pre.user_alpha`` beside the by-item parts.

    Returns
    -------
    parts : the parts, reading α back with each part
    factors : ``pre.factors()``: the factors, B and Bx
    """
    h = hashlib.sha256(np.ascontiguousarray(pre.alpha).tobytes())
    if pre.alpha_user is not None:
        h.update(np.ascontiguousarray(pre.alpha_user).tobytes())
    key = f"{data.fingerprint()}-{h.hexdigest()[:16]}"
    return write_alpha(parts, data, pre.alpha, key, pre.alpha_user), pre.factors()
