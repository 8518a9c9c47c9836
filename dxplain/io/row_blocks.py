"""Row-block files: a factor matrix's rows cut into blocks, one ``.npy`` file a block, in a scratch folder the
workers share (``spill.scratch_folder``).

This module holds what touches those files: naming them (``Scratch``), what a task reads and writes
(``Ref``, ``call_loaded``, ``write_result``) and reading some rows of a matrix from its blocks
(``RowSource``). ``models.blocks.Blocks`` keeps a matrix's block files and maps tasks over them.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import spill
from .atomic import join


class Scratch:
    """A private folder for block files under a shared root (``spill.scratch_folder``), removed when
    collected; names its files uniquely."""

    def __init__(self, root):
        self.folder = spill.scratch_folder(root)
        self._next = itertools.count()
        weakref.finalize(self, spill.remove_folder, self.folder)

    def names(self, label: str, n: int) -> list[str]:
        stamp = next(self._next)
        return [str(join(self.folder, f"{label}-{stamp:06d}-{p:05d}.npy")) for p in range(n)]


class Ref(str):
    """A block file's name as a task argument: the task gets the array (``call_loaded``)."""


def _loaded(x):
    return spill.load(x) if type(x) is Ref else [_loaded(v) for v in x] if type(x) is list else x


def call_loaded(fn, *args):
    """``fn(*args)`` with every ``Ref`` (also inside a list argument) replaced by its block."""
    return fn(*(_loaded(a) for a in args))


def write_result(fn, out: str, *args) -> str:
    """Write ``call_loaded(fn, *args)`` to the block file ``out``; returns its name."""
    return spill.save_file(out, call_loaded(fn, *args))


def write_slices(outs: list[str], F: np.ndarray, cuts: np.ndarray) -> list[str]:
    """Rows cuts[p]:cuts[p + 1] of a matrix held here to the block file ``outs[p]``, from here."""
    return [spill.save_file(out, F[a:b]) for out, a, b in zip(outs, cuts[:-1], cuts[1:])]


def read_in_turn(paths, cuts: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, block) of every block file in order, read one at a time: to write, not to hold."""
    for a, path in zip(cuts[:-1], paths):
        yield int(a), spill.load(path)


def own_files(owner, paths) -> None:
    """Delete the block files ``paths`` when ``owner`` is collected."""
    weakref.finalize(owner, spill.remove, list(paths))


def block_ranges(index: np.ndarray, cuts: np.ndarray):
    """(b, lo, hi) for each block b that holds some of ``index`` (sorted): index[lo:hi] are its rows."""
    edges = np.searchsorted(index, cuts)
    for b in np.flatnonzero(np.diff(edges)):
        yield int(b), int(edges[b]), int(edges[b + 1])


@dataclass(frozen=True)
class RowSource:
    """The files of a matrix's blocks, to read rows from inside a task."""

    paths: tuple
    cuts: np.ndarray
    k: int


def take_rows(source: RowSource, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` (sorted, distinct) of the matrix in ``source``'s files: each block that holds some is
    mapped in turn and its rows copied out, so at most one block's touched pages are resident at once."""
    if len(index) and (index[0] < 0 or index[-1] >= source.cuts[-1]):
        raise IndexError(f"rows {index[0]}..{index[-1]} of a matrix of {source.cuts[-1]}")
    out = np.empty((len(index), source.k))
    for b, lo, hi in block_ranges(index, source.cuts):
        block = spill.load(source.paths[b], mmap=True)
        np.take(block, index[lo:hi] - source.cuts[b], axis=0, out=out[lo:hi])  # into place: no second copy
        del block
    return out


def rows_at(source: RowSource, index) -> np.ndarray:
    """``take_rows`` for any row list: rows ``index`` in the given order, repeats allowed."""
    distinct, inverse = np.unique(np.asarray(index, np.int64), return_inverse=True)
    return take_rows(source, distinct)[inverse]
