"""Factor matrices kept where their parts are: one block of rows per part, on the mapper's workers.

At Amazon scale a factor matrix is more than the flow's process may hold: U is users × k floats, 2.5 GB
at 50M interactions (9.8M users, k = 32), and training keeps three or four of them alive. ``Blocks``
holds, in the flow's process, only a handle per part (a future on a cluster, the array itself in
process) and the rows each covers; every operation training needs is a map over the blocks that
returns blocks (kept on the workers) or a few numbers:

* the blocks of one side are stacked on a worker when the other side's half-step needs them whole
  (``whole``): every by-user part's users rate items anywhere in the catalogue;
* inner products and Gram matrices are sums of the blocks' (``vdot``, ``gram``): the objective, the
  stopping rule and the balancing transforms need nothing bigger;
* Anderson's history (``AndersonBlocks``) is a file per block and difference, written and read by the
  tasks, so neither the flow nor the workers hold its m pairs of factor-sized arrays.

Blocks are immutable: an operation returns new handles and the old ones are freed when dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..io import model_store, spill
from ..kernels.anderson import dot


class PerBlock(tuple):
    """One value per block (``Blocks.map`` gives task p entry p)."""


@dataclass(frozen=True)
class Blocks:
    """Row blocks of an (n, k) matrix: block p holds rows cuts[p]:cuts[p + 1], at ``handles[p]``."""

    mapper: object  # dxplain.mapper.Mapper
    handles: tuple
    cuts: np.ndarray
    k: int

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.cuts[-1]), self.k

    def __len__(self) -> int:
        return int(self.cuts[-1])

    def _args(self, others) -> list:
        return [(h, *(o.handles[p] if isinstance(o, Blocks) else o[p] if isinstance(o, PerBlock) else o
                      for o in others)) for p, h in enumerate(self.handles)]

    def map(self, fn, *others, name: str) -> "Blocks":
        """Blocks of ``fn(block, others…)``, block by block, kept where computed: of an argument that is
        ``Blocks`` or ``PerBlock`` each task takes its block's entry, any other is passed to every task."""
        return self.like(self.mapper.persist(fn, self._args(others), name=name))

    def like(self, handles) -> "Blocks":
        return Blocks(self.mapper, tuple(handles), self.cuts, self.k)

    def reduce(self, fn, *others, name: str):
        """Σ over the blocks of ``fn(block, others…)`` (numbers or small arrays), summed here in block order:
        the same rounding on any mapper and in any run."""
        return _sum(self.mapper.map(fn, self._args(others), name=name))

    def whole(self):
        """A handle to the stacked matrix, built on a worker (never here): what the other side's tasks take."""
        return self.mapper.persist(_stack, [(list(self.handles),)], name="blocks-stack")[0]

    def vdot(self, other: "Blocks | None" = None) -> float:
        """⟨self, other⟩ (⟨self, self⟩ by default), summed in float64 over the blocks."""
        return float(self.reduce(_vdot, self if other is None else other, name="blocks-dot"))

    def gram(self) -> np.ndarray:
        """FᵀF (k × k)."""
        return self.reduce(_gram, name="blocks-gram")

    def rows(self):
        """(first row, block) of every block in order, fetched one at a time: to write, not to hold."""
        for a, h in zip(self.cuts[:-1], self.handles):
            yield int(a), self.mapper.get(h)

    def gather(self) -> np.ndarray:
        """The whole matrix in this process: for tests and small models."""
        out = np.empty(self.shape)
        for a, block in self.rows():
            out[a:a + len(block)] = block
        return out

    @classmethod
    def random(cls, mapper, cuts: np.ndarray, k: int, seed: int, side: int) -> "Blocks":
        """N(0, 0.1²) entries, block p drawn from the seed (seed, side, p): the same for the same cuts."""
        args = [(seed, side, p, int(cuts[p + 1] - cuts[p]), k) for p in range(len(cuts) - 1)]
        return cls(mapper, tuple(mapper.persist(_normal, args, name="blocks-init")), np.asarray(cuts), k)

    @classmethod
    def from_store(cls, mapper, path, side: str, cuts: np.ndarray, k: int) -> "Blocks":
        """A stored model's user or item factors (``io.model_store``), each block read by its task."""
        args = [(path, side, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
        return cls(mapper, tuple(mapper.persist(model_store.read_factor_rows, args, name="blocks-read")),
                   np.asarray(cuts), int(k))

    @classmethod
    def split(cls, mapper, F: np.ndarray, cuts: np.ndarray) -> "Blocks":
        """Blocks of a matrix held here (a given start, a test), sent block by block."""
        return cls(mapper, tuple(mapper.put(np.ascontiguousarray(F[a:b])) for a, b in zip(cuts[:-1], cuts[1:])),
                   np.asarray(cuts), F.shape[1])


def _sum(values: list):
    total = values[0]
    for x in values[1:]:
        total = total + x
    return total


def _normal(seed: int, side: int, p: int, rows: int, k: int) -> np.ndarray:
    return np.random.default_rng([seed, side, p]).normal(scale=0.1, size=(rows, k))


def _stack(blocks: list) -> np.ndarray:
    return np.concatenate(blocks) if blocks else np.empty((0, 0))


def _vdot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.vdot(a, b))


def _gram(F: np.ndarray) -> np.ndarray:
    return F.T @ F


def _subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a - b


def _spill_difference(a: np.ndarray, b: np.ndarray, folder, name: str) -> object:
    """(a − b) in float32 (Anderson's history precision): a file under ``folder`` when given, else the
    array, kept on the worker."""
    d = (a - b).astype(np.float32)
    return d if folder is None else spill.save(folder, name, d)


def _dots(d, items: list) -> np.ndarray:
    d = spill.load(d) if isinstance(d, str) else d
    return np.array([dot(spill.load(x) if isinstance(x, str) else x, d) for x in items])


def _combine(g: np.ndarray, gamma: np.ndarray, items: list) -> np.ndarray:
    x = g.copy()
    for c, d in zip(gamma, items):
        x -= c * (spill.load(d) if isinstance(d, str) else d)
    return x


class BlockVectors:
    """``kernels.anderson.Anderson``'s vector operations on ``Blocks``: the residual and the combination are
    blocks kept on the workers; each stored difference is one float32 file per block under ``folder``
    (a local folder the workers share, e.g. the parts' own), or a float32 block on its worker when
    ``folder`` is None. The flow's process keeps the file names and ΔFᵀΔF."""

    def __init__(self, folder=None):
        self.folder, self._next = folder, 0

    def residual(self, image: Blocks, iterate: Blocks) -> Blocks:
        return image.map(_subtract, iterate, name="anderson-residual")

    def difference(self, a: Blocks, b: Blocks) -> Blocks:
        name, self._next = f"d{self._next:06d}", self._next + 1
        names = PerBlock(f"{name}-{p:05d}" for p in range(len(a.handles)))
        if self.folder is None:
            return a.map(_spill_difference, b, None, names, name="anderson-difference")
        return a.like(a.mapper.map(_spill_difference, a._args((b, self.folder, names)), name="anderson-difference"))

    def dots(self, items, d: Blocks) -> np.ndarray:
        items = list(items)
        if not items:
            return np.zeros(0)
        return d.reduce(_dots, _columns(items), name="anderson-dots")

    def combine(self, g: Blocks, gamma: np.ndarray, items) -> Blocks:
        return g.map(_combine, gamma, _columns(list(items)), name="anderson-combine")

    def copy(self, g: Blocks) -> Blocks:
        return g  # immutable

    def history(self):
        return _History()


def _columns(items: list) -> PerBlock:
    """Per block p, every item's block p: how a task gets its rows of the whole history."""
    return PerBlock(list(hs) for hs in zip(*(x.handles for x in items)))


class _History(list):
    """Anderson's stored differences: dropping one deletes its files (blocks on workers are freed with it)."""

    def pop(self, index: int = -1):
        item = super().pop(index)
        spill.remove([h for h in item.handles if isinstance(h, str)])
