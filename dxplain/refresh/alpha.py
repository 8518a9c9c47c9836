"""The refresh's α pass: α = −c·ℓ'(y, s)/(λ|D|) per training row, written beside the parts it belongs to.

α is all that changes with the model, so it is keyed: the same model on the same data reuses the α already
written, any other rewrites it. ``alpha_pass`` computes it where the parts are (one task per part, which also
returns an item part's rows of B); ``alpha_from_table`` writes the α of a table held whole in memory. Both
return the parts that read α back and the factors a ``passes.RefreshJob`` carries (Ũ, Ṽ and B).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from ..explain.representer import Preprocessed, balanced_factors, global_importance_of, item_embedding_rows
from ..interactions import Interactions
from ..io.partitions import Partitions, alpha_reusable, finish_alpha, write_alpha, write_alpha_part
from ..mapper import Mapper


def model_key(model) -> str:
    """What α depends on besides the data (whose parts live in a store of their own): the factors, μ, λ,
    |D|, the loss and its negative weight."""
    h = hashlib.sha256()
    for a in (model.U, model.V):
        h.update(memoryview(np.ascontiguousarray(a, np.float64)))  # no copy of the factors
    h.update(repr((model.mu, model.lam, model.n_train, model.loss, getattr(model, "neg_weight", None))).encode())
    return h.hexdigest()[:16]


def alpha_part(model, parts: Partitions, side: str, p: int, write: bool, Ut: np.ndarray) -> np.ndarray | None:
    """α of part p's rows (written beside it when ``write``); for an item part, its items' rows of B.

    Returns
    -------
    (hi - lo, r) float64 rows B[lo:hi] of the item part's items, or None for a user part.
    """
    part = parts.read_part(side, p)
    alpha = global_importance_of(model, part.data, parts.n_interactions)
    if write:
        write_alpha_part(parts, side, p, alpha)
    if side == "user":
        return None
    lo, hi = parts.item_range(p)
    return item_embedding_rows(alpha, part.data, lo, hi, Ut)


def alpha_pass(model, parts: Partitions, mapper: Mapper) -> tuple[Partitions, Preprocessed]:
    """α and B computed where the parts are: one task per part computes α of its rows and writes it beside
    them, and an item part's task also returns its items' rows of B. The same α and B as
    ``Preprocessed.from_model``; this process holds Ũ, Ṽ and B, O(users + items).

    Returns
    -------
    parts : the parts, reading α back with each part
    factors : ``Preprocessed`` with Ũ (n_users, r), Ṽ (n_items, r) and B (n_items, r); no α, no A
    """
    Ut, Vt = balanced_factors(model)
    key = model_key(model)
    parts = dataclasses.replace(parts, with_alpha=False)  # the tasks read the data parts alone
    write = not alpha_reusable(parts, key)  # the same model on the same data: α is already there
    model_h, Ut_h = mapper.put(model), mapper.put(Ut)
    # B needs every item part; the user parts only when their α is (re)written.
    sides = (("user", parts.user_cuts), ("item", parts.item_cuts)) if write else (("item", parts.item_cuts),)
    tasks = [(model_h, parts, side, p, write, Ut_h) for side, cuts in sides for p in range(len(cuts) - 1)]
    B = np.empty((model.V.shape[0], Ut.shape[1]))
    for t, rows in mapper.imap(alpha_part, tasks, name="alpha"):  # an item part's rows of B into place
        if rows is not None:
            lo, hi = parts.item_range(tasks[t][3])
            B[lo:hi] = rows
    parts = finish_alpha(parts, key) if write else dataclasses.replace(parts, with_alpha=True)
    return parts, Preprocessed(Ut, Vt, None, model.mu, None, B, model.loss)


def alpha_from_table(data: Interactions, pre: Preprocessed, parts: Partitions) -> tuple[Partitions, Preprocessed]:
    """Write (or reuse) the α of ``pre``, computed on the whole table ``data``, beside the parts.

    Returns
    -------
    parts : the parts, reading α back with each part
    factors : ``pre.factors()``: Ũ, Ṽ and B
    """
    key = f"{data.fingerprint()}-{hashlib.sha256(np.ascontiguousarray(pre.alpha).tobytes()).hexdigest()[:16]}"
    return write_alpha(parts, data, pre.alpha, key), pre.factors()
