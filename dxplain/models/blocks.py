"""Factor matrices kept in row blocks in files where the parts are: never whole in any process.

At Amazon scale a factor matrix is more than a process may hold: U is users × k floats, 2.5 GB at 50M
interactions (9.8M users, k = 32), and training keeps three or four of them alive, against 1.5 GiB for
the flow's process and 4 GiB a worker. ``Blocks`` holds, in the flow's process, a file name per part
(``.npy``, one per block of rows, in a scratch folder the workers share: the parts' own; the files
themselves are ``io.row_blocks``'s) and the rows each covers. It is the row-block-files implementation of
``models.factor_rows.FactorRows``. Every operation training needs is a map whose tasks read their blocks,
write a new block and return its name, or return a few numbers:

* a part's task reads only the rows of the other side its part touches (``io.row_blocks.take_rows``: each
  block's file mapped in turn, the wanted rows copied out), never the whole matrix;
* inner products and Gram matrices are sums of the blocks' (``vdot``, ``gram``), in block order;
* Anderson's vectors (``BlockVectors``) are blocks too, its differences in float32.

A worker keeps nothing of training between tasks (only the parts' id lists, read once:
``io.partitions``), so a worker lost mid-training loses nothing: the scheduler reruns its task, which
reads the same files. What a task holds at once is bounded by its part: the part's rows and the rows of
the other side they touch (``io.partitions.ROWS_PER_PART`` sets both). Blocks are immutable and each
owns its files, deleted when it is collected in the flow's process; the scratch folder goes when the
last ``Blocks`` using it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import singledispatch

import numpy as np

from ..io import model_store
from ..io.row_blocks import (
    Ref,
    RowSource,
    Scratch,
    call_loaded,
    own_files,
    read_in_turn,
    rows_at,
    write_result,
    write_slices,
)
from ..kernels.anderson import combine, dots
from .factor_rows import FactorRows


class PerBlock(tuple):
    """One value per block (``Blocks.map`` gives task p entry p)."""


def _normal(seed: int, side: int, p: int, rows: int, k: int) -> np.ndarray:
    return np.random.default_rng([seed, side, p]).normal(scale=0.1, size=(rows, k))


def _vdot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.vdot(a, b))


def _max_row_sqnorm(a: np.ndarray) -> float:
    return float(np.max(np.einsum("ij,ij->i", a, a), initial=0.0))


def _gram(F: np.ndarray) -> np.ndarray:
    return F.T @ F


def _subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a - b


def _difference32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a - b).astype(np.float32)


def _columns(items: list) -> PerBlock:
    """Per block p, every item's block p: how a task gets its rows of the whole history."""
    return PerBlock([Ref(p) for p in paths] for paths in zip(*(x.paths for x in items)))


@singledispatch
def _entry(o, p: int):
    """What task p of a map over blocks gets of argument ``o``: every task the same, by default."""
    return o


@_entry.register
def _(o: PerBlock, p: int):
    return o[p]


@dataclass(frozen=True, eq=False)
class Blocks(FactorRows):
    """Row blocks of an (n, k) matrix: block p holds rows cuts[p]:cuts[p + 1], in file ``paths[p]``."""

    mapper: object  # dxplain.mapper.Mapper
    scratch: Scratch
    paths: tuple
    cuts: np.ndarray
    k: int

    def __post_init__(self):
        own_files(self, self.paths)  # this Blocks owns its files

    def __copy__(self):
        return self  # immutable, and the owner of its files: a copy would delete them when collected

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError(
            "Blocks stay in the flow's process, which owns their files: send a task "
            "``.source`` (the file names) or ``.refs``"
        )

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.cuts[-1]), self.k

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64)

    def __len__(self) -> int:
        return int(self.cuts[-1])

    @property
    def refs(self) -> PerBlock:
        return PerBlock(Ref(p) for p in self.paths)

    @property
    def source(self) -> RowSource:
        """What a task needs to read any rows of this matrix (``io.row_blocks.take_rows``)."""
        return RowSource(self.paths, self.cuts, self.k)

    def _args(self, others) -> list:
        return [(Ref(path), *(_entry(o, p) for o in others)) for p, path in enumerate(self.paths)]

    def map(self, fn, *others, name: str, k: int | None = None) -> Blocks:
        """Blocks of ``fn(block, others…)``, a task per block writing its result: of an argument that is
        ``Blocks`` or ``PerBlock`` each task takes its block's entry, any other is passed to every task.
        ``k``: the result's columns, when not this matrix's (a k × r transform)."""
        outs = self.scratch.names(name, len(self.paths))
        args = [(fn, out, *a) for out, a in zip(outs, self._args(others))]
        paths = self.mapper.map(write_result, args, name=name)
        return Blocks(self.mapper, self.scratch, tuple(paths), self.cuts, self.k if k is None else int(k))

    def apply(self, fn, *others, name: str) -> list:
        """``fn(block, others…)`` of every block, in block order (small results: they come here)."""
        return self.mapper.map(call_loaded, [(fn, *a) for a in self._args(others)], name=name)

    def reduce(self, fn, *others, name: str):
        """Σ over the blocks of ``fn(block, others…)`` (numbers or small arrays), summed here in block order:
        the same rounding on any mapper and in any run."""
        values = self.apply(fn, *others, name=name)
        total = values[0]
        for x in values[1:]:
            total = total + x
        return total

    def max_row_norm(self) -> float:
        """The longest row's norm, over the blocks."""
        return float(np.sqrt(max(self.apply(_max_row_sqnorm, name="blocks-max-row"))))

    def vdot(self, other: Blocks | None = None) -> float:
        """⟨self, other⟩ (⟨self, self⟩ by default), summed in float64 over the blocks."""
        return float(self.reduce(_vdot, self if other is None else other, name="blocks-dot"))

    def gram(self) -> np.ndarray:
        """FᵀF (k × k), summed over the blocks."""
        return self.reduce(_gram, name="blocks-gram")

    def rows(self):
        """(first row, block) of every block in order, read one at a time: to write, not to hold."""
        return read_in_turn(self.paths, self.cuts)

    def take(self, index) -> np.ndarray:
        """Rows ``index`` (any order, repeats allowed) read here: a few rows (targets), not the matrix."""
        return rows_at(self.source, index)

    def indexed(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.take(index), np.arange(len(index))  # only these rows are read

    def gather(self) -> np.ndarray:
        """The whole matrix in this process: for tests and small models."""
        out = np.empty(self.shape)
        for a, block in self.rows():
            out[a : a + len(block)] = block
        return out

    def task_source(self, mapper) -> RowSource:
        return self.source

    def cut_at(self, cuts: np.ndarray) -> Blocks:
        if not np.array_equal(self.cuts, np.asarray(cuts)):
            raise ValueError(
                f"the factor's blocks are cut at {len(self.cuts) - 1} other row ranges than the parts' {len(cuts) - 1}"
            )
        return self

    def visit(self, in_memory, in_files):
        return in_files(self)

    @classmethod
    def made_by(cls, mapper, scratch: Scratch, fn, args: list, cuts, k: int, name: str) -> Blocks:
        """Blocks whose block p is ``fn(*args[p])``, written by its task."""
        outs = scratch.names(name, len(args))
        paths = mapper.map(write_result, [(fn, out, *a) for out, a in zip(outs, args)], name=name)
        return cls(mapper, scratch, tuple(paths), np.asarray(cuts), int(k))

    @classmethod
    def random(cls, mapper, scratch: Scratch, cuts: np.ndarray, k: int, seed: int, side: int) -> Blocks:
        """N(0, 0.1²) entries, block p drawn from the seed (seed, side, p): the same for the same cuts."""
        args = [(seed, side, p, int(cuts[p + 1] - cuts[p]), k) for p in range(len(cuts) - 1)]
        return cls.made_by(mapper, scratch, _normal, args, cuts, k, "init")

    @classmethod
    def from_store(cls, mapper, scratch: Scratch, path, side: str, cuts: np.ndarray, k: int) -> Blocks:
        """A stored model's user or item factors (``io.model_store``), each block read by its task."""
        args = [(path, side, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
        return cls.made_by(mapper, scratch, model_store.read_factor_rows, args, cuts, k, f"stored-{side}")

    @classmethod
    def split(cls, mapper, scratch: Scratch, F: np.ndarray, cuts: np.ndarray) -> Blocks:
        """Blocks of a matrix held here (a given start, a test), written from here."""
        paths = write_slices(scratch.names("given", len(cuts) - 1), F, cuts)
        return cls(mapper, scratch, tuple(paths), np.asarray(cuts), F.shape[1])


@_entry.register
def _(o: Blocks, p: int):
    return o.refs[p]


class BlockVectors:
    """``kernels.anderson.Anderson``'s vector operations on ``Blocks``, with its ``dots`` and ``combine``
    run block by block: every vector, the stored float32 differences included, is a set of block files;
    the flow's process keeps their names and ΔFᵀΔF."""

    def residual(self, image: Blocks, iterate: Blocks) -> Blocks:
        return image.map(_subtract, iterate, name="anderson-residual")

    def difference(self, a: Blocks, b: Blocks) -> Blocks:
        return a.map(_difference32, b, name="anderson-difference")

    def dots(self, items, d: Blocks) -> np.ndarray:
        items = list(items)
        return d.reduce(dots, _columns(items), name="anderson-dots") if items else np.zeros(0)

    def combine(self, g: Blocks, gamma: np.ndarray, items) -> Blocks:
        return g.map(combine, gamma, _columns(list(items)), name="anderson-combine")

    def copy(self, g: Blocks) -> Blocks:
        return g  # immutable

    def history(self):
        return []  # a dropped difference's files go with its Blocks
