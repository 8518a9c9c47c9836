"""Stages 1 and 2: main effects and manifest interactions, each a penalised (I)RLS whose normal equations are
a map-reduce of Gram blocks over the interaction parts (the table is never gathered).

Each stage fits all its candidate terms, ranks them by D(h) = Σ_Ω h²/(|Ω|−1) (the numerator of the IR,
eq. 5), keeps the prefix of that ranking with the lowest validation loss (s₁, s₂ chosen on the
validation rows, as the paper does), and refits the kept terms. Squared loss is one pass; the logistic
link is IRLS, each pass a map-reduce of XᵀWX and XᵀWz with the working response z = Xc + (y − p)/w and
w = p(1 − p), the earlier stages entering as a fixed offset (the working residuals of the paper's §3).

A part is ``{"u", "i", "y", "val"}`` (indices into the feature tables, label, validation flag); ``use``
chooses its rows: ``fit`` (not validation), ``val``, or ``all``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from ..errors import InputError
from ..kernels import gammli as G
from .terms import Additive, Term

IRLS_MAX = 30
IRLS_TOL = 1e-9
GRAM_BYTES = 1 << 26  # the design rows formed at once in a Gram pass (64 MB)
RIDGE = 1e-9  # keeps a basis function with no training rows solvable (its coefficient is then 0)


def put_one(mapper, obj, broadcast: bool = False):
    """``mapper.put`` of one object, whatever its type: a scatter would send a dict's values as separate
    futures keyed by the dict's keys, so two parts' ``"u"`` would collide on the cluster."""
    return mapper.put([obj], broadcast)[0]


def rows(part: dict, use: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u, i, y) of the part's rows in ``use``."""
    sel = slice(None) if use == "all" else (part["val"] if use == "val" else ~part["val"])
    return part["u"][sel], part["i"][sel], part["y"][sel]


def n_validation(part: dict) -> int:
    """How many of the part's rows are validation rows."""
    return int(np.count_nonzero(part["val"]))


def working(task: str, y: np.ndarray, eta: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(weights, working residual): (None, y − η) for squared loss; IRLS's (p(1−p), (y − p)/w) for logistic."""
    if task == "regression":
        return None, y - eta
    p = G.sigmoid(eta)
    w = np.maximum(p * (1 - p), 1e-10)
    return w, (y - p) / w


def _normal_equations(part, groups, coefs, base, task, use, rhs_only=False):
    """This part's (XᵀWX, XᵀWz, XᵀX) for each independent group of terms, and its row count. ``rhs_only``
    (squared loss, Gram already known): only Xᵀz, O(rows·columns) instead of O(rows·columns²). X is formed
    ``GRAM_BYTES`` at a time: ten 8×8 interactions over a 1.25M-row part would be 6.4 GB at once."""
    u, i, y = rows(part, use)
    off = base.eta(u, i)
    out = []
    for terms, c in zip(groups, coefs):
        n_cols = sum(t.size for t in terms)
        step = max(1, GRAM_BYTES // (8 * n_cols))
        acc = None
        for a in range(0, max(len(y), 1), step):
            uc, ic = u[a : a + step], i[a : a + step]
            X = np.hstack([t.columns(uc, ic) for t in terms])
            f = X @ c
            w, r = working(task, y[a : a + step], off[a : a + step] + f)
            if rhs_only:
                sums = (0.0, X.T @ (f + r), 0.0)
            else:
                Gw, b = G.gram(X, f + r, w)
                sums = (Gw, b, Gw if w is None else X.T @ X)
            acc = sums if acc is None else tuple(p + q for p, q in zip(acc, sums))
        out.append(acc)
    return out, len(y)


def reduce_in_order(pairs, add):
    """Fold ``(index, result)`` pairs (any arrival order) in index order, so a sum has the same bits on every
    mapper; results that arrive early wait, so at most the out-of-order ones are held."""
    waiting, nxt, acc = {}, 0, None
    for n, res in pairs:
        waiting[n] = res
        while nxt in waiting:
            r = waiting.pop(nxt)
            acc = r if acc is None else add(acc, r)
            nxt += 1
    return acc


def _add(acc, new):
    out, n = acc
    return [tuple(a + b for a, b in zip(x, y)) for x, y in zip(out, new[0])], n + new[1]


def _blocks(terms: list[Term]) -> list[slice]:
    ends = np.cumsum([t.size for t in terms])
    return [slice(int(e - t.size), int(e)) for t, e in zip(terms, ends)]


def penalty_weight(smooth: float | tuple[float, float], t: Term) -> float:
    """The penalty per training row of term t: one value, or (main effects, interactions)."""
    if isinstance(smooth, tuple):
        return smooth[1] if t.kind == "pair" else smooth[0]
    return smooth


def fit_groups(
    mapper, parts, groups: list[list[Term]], base, task: str, smooth, use: str = "fit", grams: list | None = None
) -> tuple[list[Additive], list[np.ndarray]]:
    """Fit each group of terms jointly (groups independently of each other) on the residual of ``base``.

    Returns the fitted groups and, per group, D(h) of each of its terms over the ``use`` rows. ``smooth``
    is one penalty or a tuple of them (``penalty_weight``). ``grams``: squared loss only, a list that the
    first call on these groups and rows fills with their Gram matrices and later calls (another offset
    ``base``, another ``smooth``) reuse, so that those passes only form Xᵀz.
    """
    groups_h, base_h = put_one(mapper, groups, broadcast=True), put_one(mapper, base, broadcast=True)
    coefs = [np.zeros(sum(t.size for t in g)) for g in groups]
    reuse = task == "regression" and bool(grams)
    for _ in range(IRLS_MAX):
        sums, n = reduce_in_order(
            mapper.imap(
                _normal_equations, [(p, groups_h, coefs, base_h, task, use, reuse) for p in parts], name="gammli-gram"
            ),
            _add,
        )
        if reuse:
            sums = [(Gw, b, G1) for (Gw, G1), (_, b, _) in zip(grams, sums)]
        elif grams is not None and task == "regression":
            grams.extend((Gw, G1) for Gw, _, G1 in sums)
        if _ == 0:
            Zs, Ps = [], []
            for g, (_, _, G1) in zip(groups, sums):
                bl = _blocks(g)
                Zs.append(sla.block_diag(*[G.null_space_of(t.constraints(G1[s, s])) for t, s in zip(g, bl)]))
                Ps.append(
                    sla.block_diag(*[penalty_weight(smooth, t) * n * t.P for t in g]) + RIDGE * n * np.eye(G1.shape[0])
                )
        new = [G.penalised_solve(Gw, b, P, Z) for (Gw, b, _), P, Z in zip(sums, Ps, Zs)]
        step = max((float(np.max(np.abs(a - b))) for a, b in zip(new, coefs) if a.size), default=0.0)
        coefs = new
        if task == "regression" or step < IRLS_TOL:
            break
    fitted, D = [], []
    for g, c, (_, _, G1) in zip(groups, coefs, sums):
        bl = _blocks(g)
        fitted.append(Additive(list(g), [c[s].copy() for s in bl]))
        D.append(np.array([float(c[s] @ G1[s, s] @ c[s]) / max(n - 1, 1) for s in bl]))
    return fitted, D


def _prefix_losses(part, base, ordered, task):
    """Validation loss of base + the first s ordered terms, for s = 0..len(ordered): sums and count."""
    u, i, y = rows(part, "val")
    eta = base.eta(u, i)[:, None] + np.cumsum(np.column_stack([np.zeros(len(u)), ordered.contributions(u, i)]), axis=1)
    if task == "regression":
        loss = ((y[:, None] - eta) ** 2).sum(axis=0)
    else:
        loss = (np.logaddexp(0.0, eta) - y[:, None] * eta).sum(axis=0)
    return loss, len(y)


def choose_prefix(mapper, parts, base: Additive, ordered: Additive, task: str) -> tuple[int, np.ndarray]:
    """s minimising the mean validation loss of base + the first s terms (the smallest s within 1e-6 of it)."""
    base_h, ordered_h = put_one(mapper, base, broadcast=True), put_one(mapper, ordered, broadcast=True)
    total, n = reduce_in_order(
        mapper.imap(_prefix_losses, [(p, base_h, ordered_h, task) for p in parts], name="gammli-prefix"),
        lambda a, b: (a[0] + b[0], a[1] + b[1]),
    )
    if n == 0:
        raise InputError("the validation split is empty; raise --val-fraction (e.g. 0.1) or give more interactions")
    mean = total / n
    return int(np.flatnonzero(mean <= mean.min() * (1 + 1e-6) + 1e-12)[0]), mean


def select_terms(
    mapper,
    parts,
    candidates: list[Term],
    base: Additive,
    task: str,
    smooth: float,
    intercept: Term | None = None,
    grams: list | None = None,
) -> dict:
    """Fit the candidates jointly, rank them by D(h), keep the best prefix on validation, refit the kept ones.

    With ``intercept`` it is fitted with them and always kept (stage 1). ``grams``: as in ``fit_groups``, for the
    joint fit of ``intercept`` + ``candidates``. Returns ``fitted`` (the refit,
    intercept first), ``ranking`` (name → D of the joint fit, best first), ``kept`` names and ``val_loss``.
    """
    lead = [intercept] if intercept is not None else []
    (joint,), (D,) = fit_groups(mapper, parts, [lead + candidates], base, task, smooth, grams=grams)
    D = D[len(lead) :]
    order = np.argsort(-D, kind="stable")
    head = Additive(joint.terms[: len(lead)], joint.coefs[: len(lead)])
    ordered = Additive([joint.terms[len(lead) + k] for k in order], [joint.coefs[len(lead) + k] for k in order])
    s, val = choose_prefix(mapper, parts, base.plus(head), ordered, task)
    kept = ordered.terms[:s]
    fitted = fit_groups(mapper, parts, [lead + kept], base, task, smooth)[0][0] if lead + kept else Additive()
    return {
        "fitted": fitted,
        "ranking": {candidates[k].name: float(D[k]) for k in order},
        "kept": [t.name for t in kept],
        "val_loss": val.tolist(),
    }


def screen_pairs(
    mapper, parts, pairs: list[Term], base: Additive, task: str, smooth: float, max_pairs: int
) -> tuple[list[Term], dict]:
    """Fit every pair alone on the residual of ``base`` (one pass for all), keep the ``max_pairs`` largest D."""
    if not pairs or max_pairs == 0:
        return [], {}
    _, Ds = fit_groups(mapper, parts, [[t] for t in pairs], base, task, smooth)
    D = np.array([d[0] for d in Ds])
    order = np.argsort(-D, kind="stable")[:max_pairs]
    return [pairs[k] for k in order], {pairs[k].name: float(D[k]) for k in np.argsort(-D, kind="stable")}
