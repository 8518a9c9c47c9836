"""Reading a Kolmogorov model: the rules of Proposition 1, influence β_i, the maximal set M, a prediction's "why".

Adjacency (A.1): a_ij = 1 iff supp(ψ_j) ⊆ supp(ψ_i), i ≠ j; the paper reads it as the rule "whoever likes i
likes j" (7) and "whoever dislikes j dislikes i" (8). Influence (A.2): β_i = (1/|I|) Σ_{j≠i} a_ij.
M = {i : ψ_i = 1} (Corollary 1).

Items with the same ψ share a bit mask, and there are at most min(|I|, 2^D) masks, so subset tests run
over distinct masks (m_j & ~m_i == 0) and β comes from mask counts; item pairs are only spelled out for
the rules written to Parquet.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..interactions import Interactions


def masks(psi: np.ndarray) -> np.ndarray:
    """ψ_i as an integer bit mask (bit d = ψ_id), D ≤ 63."""
    return (psi.astype(np.int64) << np.arange(psi.shape[1], dtype=np.int64)).sum(axis=1)


# Up to this D the subset sums run over the whole lattice of 2^D masks (8 MiB of counts at D = 20);
# above it, over the distinct masks in row chunks (quadratic in their number, but never m × m at once).
LATTICE_MAX_D = 20
SUBSET_CHUNK = 1024


def subset_sums(unique: np.ndarray, counts: np.ndarray, D: int) -> np.ndarray:
    """Σ_{b ⊆ a} counts[b] for every distinct mask a of ``unique`` (b over ``unique`` too).

    At D ≤ ``LATTICE_MAX_D`` by the sum-over-subsets recursion (Yates's zeta transform): D passes over 2^D
    entries, instead of a test of every pair of the up to 2^D distinct masks (at 10M interactions and
    D = 16 that pair matrix was tens of GiB).
    """
    if D <= LATTICE_MAX_D:
        f = np.zeros(1 << D, np.int64)
        f[unique] = counts
        for d in range(D):
            g = f.reshape(-1, 2, 1 << d)  # index = high·2^(d+1) + bit_d·2^d + low
            g[:, 1, :] += g[:, 0, :]
        return f[unique]
    out = np.empty(len(unique), np.int64)
    for lo in range(0, len(unique), SUBSET_CHUNK):
        a = unique[lo : lo + SUBSET_CHUNK]
        out[lo : lo + SUBSET_CHUNK] = ((unique[None, :] & ~a[:, None]) == 0) @ counts
    return out


def influence(psi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(β_i per item (A.2), maximal flag ψ_i = 1 (Corollary 1))."""
    m = masks(psi)
    unique, inv, counts = np.unique(m, return_inverse=True, return_counts=True)
    below = subset_sums(unique, counts, psi.shape[1])  # items j (including i itself) with supp ψ_j ⊆ supp ψ_i
    beta = (below[inv] - 1) / len(psi)
    return beta, psi.all(axis=1)


def adjacency(psi: np.ndarray, skip_empty: bool = True, antecedents: np.ndarray | None = None) -> sp.csr_array:
    """A of (A.1) as a sparse boolean matrix; with ``skip_empty`` consequents with ψ_j = 0 are dropped
    (supp ∅ is a subset of everything: "likes j" then has probability 0 and the rule says nothing).
    ``antecedents`` (item indices) keeps only those rows.

    Per distinct antecedent mask, its subset masks are found by one vectorised test against the distinct
    masks; the items of each mask come from one sort, not a scan per mask.
    """
    m = masks(psi)
    unique, inv, counts = np.unique(m, return_inverse=True, return_counts=True)
    by_mask = np.argsort(inv, kind="stable")
    members = np.split(by_mask, np.cumsum(counts)[:-1])
    is_head = np.ones(len(psi), bool)
    if antecedents is not None:
        is_head[:] = False
        is_head[antecedents] = True
    rows, cols = [], []
    for a in np.unique(inv[is_head]):
        heads = members[a][is_head[members[a]]]
        below = np.flatnonzero((unique & ~unique[a]) == 0)
        if skip_empty:
            below = below[unique[below] != 0]
        if len(below) == 0:
            continue
        tails = np.concatenate([members[b] for b in below])
        ii, jj = np.repeat(heads, len(tails)), np.tile(tails, len(heads))
        keep = ii != jj
        rows.append(ii[keep])
        cols.append(jj[keep])
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    return sp.csr_array((np.ones(len(r), bool), (r, c)), shape=(len(psi),) * 2)


def rules_per_item(psi: np.ndarray) -> np.ndarray:
    """How many rules (non-empty consequents) each item heads: Σ_j a_ij from mask counts alone."""
    m = masks(psi)
    unique, inv, counts = np.unique(m, return_inverse=True, return_counts=True)
    counts = np.where(unique == 0, 0, counts)
    return subset_sums(unique, counts, psi.shape[1])[inv] - (m != 0)


def capped_antecedents(psi: np.ndarray, popularity: np.ndarray, max_rules: int) -> np.ndarray | None:
    """None when all rules fit in ``max_rules``; else antecedents taken by decreasing popularity, each whose
    rules fit in what is left of the budget (one that heads more than that is skipped, not a stop: at 10M
    interactions the most popular item alone headed more rules than the cap, and a prefix took nothing)."""
    n = rules_per_item(psi)
    if n.sum() <= max_rules:
        return None
    order = np.lexsort((np.arange(len(psi)), -popularity))
    take, left = [], max_rules
    for i in order[(n[order] > 0) & (n[order] <= max_rules)]:
        if n[i] <= left:
            take.append(i)
            left -= n[i]
            if left == 0:
                break
    return np.sort(np.asarray(take, dtype=np.int64))


def likes(data: Interactions, threshold: float) -> sp.csr_array:
    """Items × users 0/1 matrix of ratings ≥ ``threshold``."""
    keep = data.rating >= threshold
    return sp.csr_array(
        (np.ones(int(keep.sum())), (data.item[keep], data.user[keep])), shape=(data.n_items, data.n_users)
    )


def co_likes(L: sp.csr_array, i: np.ndarray, j: np.ndarray, chunk: int = 200_000) -> np.ndarray:
    """Users who like both i and j, per pair (row-wise sparse dot products, in chunks)."""
    out = np.zeros(len(i), np.int64)
    for lo in range(0, len(i), chunk):
        a, b = i[lo : lo + chunk], j[lo : lo + chunk]
        out[lo : lo + chunk] = np.asarray(L[a].multiply(L[b]).sum(axis=1)).ravel()
    return out


def mine_rules(
    psi: np.ndarray, train: Interactions, like_threshold: float, max_rules: int = 2_000_000
) -> dict[str, np.ndarray]:
    """Every rule (antecedent i, consequent j) with a_ij = 1, with ``support`` = training users who like
    both (rating ≥ ``like_threshold``), sorted by support (descending), then antecedent, consequent.

    Over ``max_rules`` rules, only the most popular antecedents' rules are spelled out (``total`` says how
    many there are).
    """
    heads = capped_antecedents(psi, train.item_degree(), max_rules)
    A = adjacency(psi, antecedents=heads).tocoo()
    i, j = A.row.astype(np.int64), A.col.astype(np.int64)
    support = co_likes(likes(train, like_threshold), i, j)
    order = np.lexsort((j, i, -support))
    return {
        "antecedent": i[order],
        "consequent": j[order],
        "support": support[order],
        "total": int(rules_per_item(psi).sum()),
    }


def rule_precision(i: np.ndarray, j: np.ndarray, held: Interactions, like_threshold: float) -> dict:
    """On held-out data: among users who like i there, the share who also like j (both directions)."""
    L = likes(held, like_threshold)
    both = co_likes(L, i, j)
    n_i, n_j = np.asarray(L.sum(axis=1)).ravel()[i], np.asarray(L.sum(axis=1)).ravel()[j]
    return {
        "pairs_with_support": int(np.sum(n_i > 0)),
        "precision_i_to_j": float(both.sum() / max(1, n_i.sum())),
        "precision_j_to_i": float(both.sum() / max(1, n_j.sum())),
    }


def popularity_matched(
    i: np.ndarray, j: np.ndarray, popularity: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Random pairs with the same popularity profile: each item replaced by a random item of the same
    popularity decile (so a baseline pair is as popular as the rule pair it stands for)."""
    rng = np.random.default_rng(seed)
    edges = np.quantile(popularity, np.linspace(0, 1, 11)[1:-1])
    bucket = np.searchsorted(edges, popularity, side="right")
    pools = [np.flatnonzero(bucket == b) for b in range(10)]

    def draw(x):
        out = np.empty_like(x)
        for b in range(10):
            sel = bucket[x] == b
            if sel.any():
                out[sel] = rng.choice(pools[b], size=int(sel.sum()))
        return out

    ri, rj = draw(i), draw(j)
    same = ri == rj
    while same.any():  # a pair of one item is no rule
        rj[same] = draw(j[same])
        same = ri == rj
    return ri, rj


def why(theta_u: np.ndarray, psi: np.ndarray, i: int, popularity: np.ndarray | None = None, top: int = 3) -> list[dict]:
    """p_ui = Σ_d θ_ud ψ_id as its elementary events, largest share first, each with its most typical items:
    liked in event d, in few other events and often rated (score log(1 + popularity) / |supp ψ_j|; without
    ``popularity``, fewest events first)."""
    size = psi.sum(axis=1)
    pop = np.ones(len(psi)) if popularity is None else np.log1p(popularity)
    events = [d for d in np.flatnonzero(psi[i]) if theta_u[d] > 0]
    out = []
    for d in sorted(events, key=lambda d: -theta_u[d]):
        members = np.flatnonzero(psi[:, d])
        typical = members[np.lexsort((members, -pop[members] / size[members]))][:top]
        out.append({"event": int(d), "share": float(theta_u[d]), "typical_items": typical.tolist()})
    return out
