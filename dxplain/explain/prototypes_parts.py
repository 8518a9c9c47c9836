"""Exact greedy SBQ for a factor model with the candidates where the by-user parts are: no Φ, no whole
Fisher matrix and no O(n) state in the flow's process (docs/prototypes.md, "At scale").

What makes it possible (``kernels.pair_halves.PairHalves``):

* φ_x = [a_x = W_u r_x V_j in user u's k columns, b_x = W_j r_x U_u in item j's], with each owner o's
  whitener W_o = L_o⁻¹, F_o + δI = L_o L_oᵀ, so k(x, y) = [u_x = u_y]⟨a_x, a_y⟩ + [j_x = j_y]⟨b_x, b_y⟩;
* z_x = ⟨φ_x, μ_T⟩ is zero unless x shares a target's user or item, and a row sharing no user or item with
  a selected point keeps c_x = 0 and r_x = z_x: a row that is neither has gain 0, and greedy never takes it.

So each by-user part is a shard (``explain.part_shard.PartShard``) that computes z and k_xx only for its
*live* rows (those sharing a user or an item with a target or a selected point), keeps its scalars for
those alone, and recomputes a_x, b_x when a kernel column needs them. A user's whitener needs only the user's own rows,
all in its part. An item's needs all its raters, spread over the parts: the few items a step needs (the
targets' and the selected points' items) have their F_j summed over the parts, a map per ITEM_CHUNK
items, and inverted here.

The factors are ``models.factor_rows.FactorRows``: row-block files, or a small model held here that goes
to every worker whole. A shard reads only the rows of U and V a pass or a step touches, and recomputes a
row's residual and Fisher weight from them rather than keep a float per row. The flow's process holds the
factors' file names, μ_T (O(targets·k)), the item whiteners sent, L and β; a shard, its rows' ids (13
bytes each) and its live rows' scalars. The selection equals ``kernels.sbq.greedy`` over
``mf_fisher_rows``.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np

from ..interactions import Targets
from ..kernels import fisher
from ..kernels.pair_halves import HalvesMean, PairHalves
from ..kernels.sbq import Candidate, Selection, greedy_select
from ..mapper import Mapper
from ..models.factor_rows import factor_rows
from .part_shard import PartShard
from .prototypes import Progress

log = logging.getLogger(__name__)

ITEM_CHUNK = 256  # items whose F_j are summed at once: 256·k² floats (2 MB at k = 32), a part's result, held
# on its worker until the flow takes it


def _call(state, method: str, *args):
    return getattr(state, method)(*args)


def _best(state: PartShard):
    c = state.best()
    return (c, None) if c is None else (c, state.user_items(int(c.phi.user[0])))


def _add(state: PartShard, W_items: fisher.ItemWhiteners, cand: Candidate, d: float, beta_t: float) -> PartShard:
    return state.with_items(W_items).add(cand, d, beta_t)


class PartShards:
    """The by-user parts as SBQ shards on ``mapper`` (``kernels.sbq.greedy_select``'s ``best``/``add``);
    ``start`` computes the damping, the targets' item whiteners and μ_T from the parts."""

    def __init__(self, mapper: Mapper, parts, model, kind: str, damping: float, offsets: np.ndarray):
        self.mapper, self.kind = mapper, kind
        n_parts = len(parts.user_cuts) - 1
        t0 = time.perf_counter()
        # Factors in row-block files (U cut as the by-user parts are): a shard reads the rows it needs,
        # and nothing holds them whole. A model held here (a small table) goes to every worker whole.
        self.U = factor_rows(model.U).cut_at(parts.user_cuts)
        self.V = factor_rows(model.V).cut_at(parts.item_cuts)
        self.k = model.U.shape[1]
        sources = [rows.task_source(mapper) for rows in (self.U, self.V)]
        head = dataclasses.replace(model, U=np.empty((0, self.k)), V=np.empty((0, self.k)))  # the loss's terms
        head_h = mapper.put(head, broadcast=True)
        self.states = mapper.persist(
            PartShard, [(parts, p, head_h, *sources, kind, int(offsets[p])) for p in range(n_parts)], name="sbq-parts"
        )
        # Everything the states were built from stays referenced until the selection ends (the factors'
        # files too): a state lost with its worker is recomputed from this lineage.
        self.inputs = [head_h, *sources]
        sums = self._map("sums")
        n, rss = sum(c for c, _ in sums), sum(s for _, s in sums)
        if n != parts.n_interactions:
            raise ValueError(f"the parts hold {n} rows, their index {parts.n_interactions}")
        self.states = mapper.persist(
            _call, [(st, "weighted", n, rss / n) for st in self.states], name="sbq-weights", near_first=True
        )
        self.delta_U = self.delta_V = 0.0
        if kind != "identity":
            traces = self._map("traces")
            self.delta_U = damping * sum(t for t, _ in traces) / self.U.shape[0] / self.k
            self.delta_V = damping * sum(t for _, t in traces) / self.V.shape[0] / self.k
        self.known: set[int] = set()
        self.user_items: dict[int, np.ndarray] = {}
        log.info(
            "SBQ over %d by-user parts: %d candidates read and weighted (δ_U = %.3g, δ_V = %.3g) in %.1fs",
            n_parts,
            n,
            self.delta_U,
            self.delta_V,
            time.perf_counter() - t0,
        )

    def _map(self, method: str, *args) -> list:
        return self.mapper.map(
            _call, [(st, method, *args) for st in self.states], name=f"sbq-{method}", near_first=True
        )

    def item_whiteners(self, items: np.ndarray) -> fisher.ItemWhiteners:
        """W_j for ``items`` not sent before: F_j summed over the parts as they finish, inverted here,
        ITEM_CHUNK items at a time (a part's share of F_j is a dense (items, k, k) array)."""
        k = self.k
        items = np.array(sorted(set(items.tolist()) - self.known), np.int64)
        if self.kind == "identity" or not len(items):
            return fisher.ItemWhiteners(np.empty(0, np.int64), np.empty((0, k, k)))
        W = np.empty((len(items), k, k))
        for c in range(0, len(items), ITEM_CHUNK):
            chunk = items[c : c + ITEM_CHUNK]
            Fj, pending, next_part = np.zeros((len(chunk), k, k)), {}, 0
            # Summed in part order, whatever order the parts finish in: the same rounding on any mapper.
            V_chunk = self.V.take(chunk)
            for p, part in self.mapper.imap(
                _call, [(st, "item_grams", chunk, V_chunk) for st in self.states], name="sbq-items", near_first=True
            ):
                pending[p] = part
                while next_part in pending:
                    Fj += pending.pop(next_part)
                    next_part += 1
            W[c : c + len(chunk)] = fisher.damped_inverse_factor(Fj, self.delta_V)
        self.known.update(items.tolist())
        return fisher.ItemWhiteners(items, W)

    def start(self, T: Targets, m: int) -> float:
        """Live rows and μ_T; returns ‖μ_T‖²."""
        t0 = time.perf_counter()
        users = np.unique(T.user)
        their_items = np.unique(np.concatenate([*self._map("items_of", users), T.item.astype(np.int64)]))
        whiteners = self.item_whiteners(their_items)
        # A target user with no training row has F_u = 0, so W_u = I/√δ (the whole-table embedding's value).
        scale = 1.0 if self.kind == "identity" else np.sqrt(max(self.delta_U, np.finfo(float).tiny))
        a = self.V.take(T.item) / scale
        for at, rows in self._map("target_user_halves", T, self.delta_U):
            a[at] = rows
        gV = self.U.take(T.user)
        b = (
            gV
            if self.kind == "identity"
            else fisher.apply_per_owner(whiteners.W, np.searchsorted(whiteners.items, T.item), gV)
        )
        mu = HalvesMean.of(PairHalves(T.user.astype(np.int64), T.item.astype(np.int64), a, b))
        mu_h, whiteners_h = self.mapper.put(mu, broadcast=True), self.mapper.put(whiteners, broadcast=True)
        self.inputs += [mu_h, whiteners_h]
        self.states = self.mapper.persist(
            _call,
            [(st, "start", mu_h, whiteners_h, self.delta_U, m) for st in self.states],
            name="sbq-start",
            near_first=True,
        )
        log.info(
            "SBQ start: %d live candidates (sharing a user or an item with a target), %d item whiteners, %.1fs",
            sum(self._map("n_live")),
            len(self.known),
            time.perf_counter() - t0,
        )
        return mu.inner(mu)

    def best(self):
        found = self.mapper.map(_best, [(st,) for st in self.states], name="sbq-best", near_first=True)
        for c, items in found:
            if c is not None:
                self.user_items[c.index] = items
        return [c for c, _ in found]

    def add(self, cand: Candidate, d: float, beta_t: float):
        # Every row of the chosen user and of the chosen item turns live: their item whiteners go out first.
        whiteners = self.item_whiteners(np.append(self.user_items[cand.index], cand.phi.item[0]))
        self.user_items.clear()
        W_h = self.mapper.put(whiteners)  # fetched once by each worker: the tasks run where their states are
        self.inputs.append(W_h)
        self.states = self.mapper.persist(
            _add, [(st, W_h, cand, d, beta_t) for st in self.states], name="sbq-add", near_first=True
        )


def select_from_parts(
    mapper: Mapper,
    parts,
    model,
    targets: Targets,
    m: int,
    kind: str = "empirical",
    damping: float = fisher.DEFAULT_DAMPING,
    offsets: np.ndarray | None = None,
) -> Selection:
    """Greedy SBQ (the paper's Algorithm 1) for ``model``'s targets with the training pairs in ``parts``'s
    by-user parts as candidates, indexed in the training table's (user, item) order. ``offsets``: the
    first row of each by-user part (default: from the parts' files)."""
    t0 = time.perf_counter()
    if offsets is None:
        offsets = parts.user_part_offsets()
    shards = PartShards(mapper, parts, model, kind, damping, offsets)
    c = shards.start(targets, m)
    m = min(m, parts.n_interactions)
    sel = greedy_select(Progress(shards, m, "SBQ greedy (parts)"), m, c)
    log.info(
        "SBQ over %d by-user parts: %d prototypes, %d item whiteners sent, %.1fs",
        len(shards.states),
        len(sel.index),
        len(shards.known),
        time.perf_counter() - t0,
    )
    return sel
