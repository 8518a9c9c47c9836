"""``BlockHalfSteps``: the ALS half-steps with the factors in row-block files where the parts are
(``models.blocks.Blocks``), never whole in any process, and the task functions they map.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...interactions import Interactions
from ...io import spill
from ...io.row_blocks import Ref, RowSource, Scratch, call_loaded, take_rows
from ...kernels import als, anderson
from ..blocks import Blocks, BlockVectors, PerBlock
from .half_steps import BalancedBound
from .losses import SQUARED
from .part_half_steps import MappedHalfSteps, load_part, stationarity_part, stationarity_total, stationarity_triple


def _read_compact(part: str, F: RowSource):
    a = spill.load_arrays(part)
    return (a["indptr"], a["cols"], a["y"]), take_rows(F, a["need"])


def _compact_part(parts, side: str, p: int, mu: float, out: str) -> str:
    """Part p of ``side`` as one file (``io.spill.save_arrays``): (indptr, columns as positions 0..c−1 in
    ``need``, y − μ) and ``need``, the c distinct columns, sorted: what a half-step's task reads."""
    indptr, cols, y = load_part(parts, side, p, mu)
    need, local = np.unique(cols, return_inverse=True)
    return spill.save_arrays(out, indptr=indptr, cols=local.astype(np.int32), y=y, need=need)


def _solve_compact(part: str, F: RowSource, ridge, loss, X0, basis=None):
    view, F_cols = _read_compact(part, F)
    return loss.solve(view, F_cols, ridge, X0, basis)


def _solve_measured(part: str, F: RowSource, ridge, loss, X0, n, lam, out: str):
    """``_solve_compact``'s rows written to ``out``, and the part's ``stationarity_part`` triple at them
    (no transforms) from the same rows of F: (path, triple)."""
    view, F_cols = _read_compact(part, F)
    X = loss.solve(view, F_cols, ridge, X0)
    return spill.save_file(out, X), stationarity_part(view, 0, X, F_cols, n, lam, None, loss)


def _solve_with_gradient(part: str, F: RowSource, ridge, loss, X0, n, out: str, out_gradient: str):
    """An exact half-step's rows written to ``out`` and their rows of ∇f (from the solve's Grams, k² a row:
    ``SquaredRows.solve_with_gradient``) to ``out_gradient``: (the two paths)."""
    view, F_cols = _read_compact(part, F)
    X, G = loss.solve_with_gradient(view, F_cols, ridge, n)
    return spill.save_file(out, X), spill.save_file(out_gradient, G)


def _gradient_block_triple(F, G, lam, rule) -> tuple[float, float, float]:
    """A part's ``stationarity_part`` triple from its rows and their rows of ∇f, kept in block files: no pass
    over its entries. Σ of the loss terms is the by-user parts' (``stationarity_total``), so 0 here."""
    return stationarity_triple(F, G, 0.0, lam, rule)


def _stationarity_compact(part: str, F_rows, F: RowSource, n, lam, rule, loss):
    view, F_cols = _read_compact(part, F)
    return stationarity_part(view, 0, F_rows, F_cols, n, lam, rule, loss)


@dataclass
class BlockHalfSteps(MappedHalfSteps):
    """Half-steps with the factors themselves kept in row-block files where the parts are, never whole in
    any process: U in blocks of the by-user parts' rows, V in blocks of the by-item parts'
    (``models.blocks.Blocks``).

    Each part is written once as a compact file: its rows' (indptr, columns renumbered 0..c−1, y) and the c
    distinct columns it touches. A half-step's task reads it, reads just those c rows of the fixed side
    (``io.row_blocks.take_rows``), solves its rows and writes its block. The stopping rule's passes send back
    three numbers a part (a by-item part's come with its half-step, from the rows of U it read: ``items``'
    ``measure``, one read of U's rows a part and sweep fewer); the objective's norms and the balancing
    transforms' Grams are sums of the blocks'; Anderson's vectors are blocks too
    (``models.blocks.BlockVectors``). At 50M Amazon-like interactions (k = 32), whole factors are 2.5 GB (U) and
    0.8 GB (V): neither the flow's process nor a worker holds one, and a lost worker's task is rerun from the
    same files. The Newton polish needs the factors whole, so it is not offered here: training stops on the
    sweeps.
    """

    in_process = False

    def __init__(self, mapper, parts, data: Interactions, mu: float, ridge: float, loss=SQUARED):
        super().__init__(mapper, parts, data, ridge, loss)
        self.scratch = Scratch(parts.root)
        # ((V's paths, U's paths, λ), ∇_V f's blocks or None, the by-item parts' triples or None): the last
        # items(measure=λ)
        self._measured = None
        self.parts = {}
        for side, cuts in self.cuts.items():
            names = self.scratch.names(f"part-{side}", len(cuts) - 1)
            self.parts[side] = mapper.map(
                _compact_part, [(parts, side, p, mu, out) for p, out in enumerate(names)], name=f"als-compact-{side}"
            )

    def initial(self, n_users, n_items, k, seed):
        # One generator per block (seed, side, part): the same start for the same parts, wherever it is drawn.
        return (
            Blocks.random(self.mapper, self.scratch, self.cuts["user"], k, seed, 0),
            Blocks.random(self.mapper, self.scratch, self.cuts["item"], k, seed, 1),
        )

    def start(self, U, V):
        return (
            Blocks.split(self.mapper, self.scratch, U, self.cuts["user"]),
            Blocks.split(self.mapper, self.scratch, V, self.cuts["item"]),
        )

    def sqnorm(self, F: Blocks) -> float:
        return F.vdot()

    def bound_rules(self, U: Blocks, V: Blocks):
        return BalancedBound.of_grams(U.gram(), V.gram())  # the Grams summed over the blocks

    def accelerator(self, m, store):
        return anderson.Anderson(m, vectors=BlockVectors())  # the history is block files: no ``store``

    def close(self):
        for side in self.parts.values():
            spill.remove(side)

    def _half(self, side: str, F: Blocks, X0: Blocks | None) -> Blocks:
        basis = self._users_basis(F, X0) if side == "user" else None
        return Blocks.made_by(
            self.mapper,
            self.scratch,
            _solve_compact,
            [(*a, basis) for a in self._solve_args(side, F, X0)],
            self.cuts[side],
            F.k,
            f"als-{side}",
        )

    def _solve_args(self, side: str, F: Blocks, X0: Blocks | None) -> list:
        warm = X0 is not None and self.loss.warm_start
        return [
            (part, F.source, self.ridge, self.loss, Ref(X0.paths[p]) if warm else None)
            for p, part in enumerate(self.parts[side])
        ]

    def _degree_gram(self, V: Blocks) -> np.ndarray:
        """Σ_j deg_j V_j V_jᵀ summed over V's blocks (a k × k from each)."""
        cuts = self.cuts["item"]
        degree = PerBlock(self.item_degree[a:b] for a, b in zip(cuts[:-1], cuts[1:]))
        return V.reduce(als.degree_gram, degree, name="als-cg-basis")

    def users(self, V, U0=None):
        return self._half("user", V, U0)

    def items(self, U, V0=None, measure=None):
        """Every item's half-step; with ``measure`` = λ the measure of (U, V_new) that follows need not read
        the rows of U again (at 50M Amazon-like interactions a by-item part touches 1.5M users' rows: 370 MB
        read per part and pass). An exact half-step (the squared loss) writes its rows of ∇_V f beside V's,
        from its Grams, and the measure takes the items' side from those files, with the identity bound or
        without; otherwise each task returns its part's bound-free triple, from the rows of U it read."""
        if measure is None:
            return self._half("item", U, V0)
        args = self._solve_args("item", U, V0)
        if self.loss.exact and self._ridge_is_for(measure):
            outs, grads = self.scratch.names("als-item", len(args)), self.scratch.names("als-item-gradient", len(args))
            done = self.mapper.map(
                call_loaded,
                [(_solve_with_gradient, *a, self.n, out, g) for a, out, g in zip(args, outs, grads)],
                name="als-item",
            )
            V, gV = (
                Blocks(self.mapper, self.scratch, tuple(paths), np.asarray(self.cuts["item"]), U.k)
                for paths in zip(*done)
            )
            self._measured = (V.paths, U.paths, measure), gV, None
            return V
        outs = self.scratch.names("als-item", len(args))
        done = self.mapper.map(
            call_loaded, [(_solve_measured, *a, self.n, measure, out) for a, out in zip(args, outs)], name="als-item"
        )
        V = Blocks(self.mapper, self.scratch, tuple(path for path, _ in done), np.asarray(self.cuts["item"]), U.k)
        self._measured = (V.paths, U.paths, measure), None, [triple for _, triple in done]
        return V

    def stationarity(self, U: Blocks, V: Blocks, lam, bound):
        rule_U, rule_V = self.bound_rules(U, V) if bound else (None, None)
        # What the last items' half-step kept for this (V, U, λ): ∇_V f's blocks (an exact half-step) or the
        # items' stationarity triples (a measured one).
        key, gV, item_triples = self._measured or (None, None, None)
        if key != (V.paths, U.paths, lam):
            gV = item_triples = None
        if bound:
            item_triples = None
        sides = (("user", U, V, rule_U),)
        if item_triples is None and gV is None:
            sides += (("item", V, U, rule_V),)
        tasks = [
            (_stationarity_compact, part, Ref(B.paths[p]), other.source, self.n, lam, rule, self.loss)
            for side, B, other, rule in sides
            for p, part in enumerate(self.parts[side])
        ]
        if gV is not None:  # the items' side from V's and ∇_V f's blocks: no pass over the by-item parts
            tasks += [(_gradient_block_triple, Ref(v), Ref(g), lam, rule_V) for v, g in zip(V.paths, gV.paths)]
        out = self.mapper.map(call_loaded, tasks, name="als-stationarity")
        n_user = len(self.parts["user"])
        return stationarity_total(out[:n_user], out[n_user:] if item_triples is None else item_triples, bound)

    def gradient(self, U, V, lam):
        raise NotImplementedError(
            "the factors are kept in blocks: the gradient is never gathered "
            "(``stationarity`` reduces it where the parts are)"
        )
