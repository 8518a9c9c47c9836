"""Factor rows: the rows of a factor matrix (U or V, n × k), held in this process or kept in row-block files.

A model's factors are arrays when they fit a process and row-block files beside the parts when they do
not (``models.blocks.Blocks``). What the layers above need of either is ``FactorRows``: some rows read
here (``take``, ``indexed``), the whole matrix (``gather``), its longest row and Gram matrix, its row
blocks in order to write them (``rows``), what a task reads rows from (``task_source``, then
``source_rows`` in the task), and, for an algorithm written once for each, ``visit``. ``factor_rows``
gives that interface for whatever a model holds (an array goes in ``ArrayRows``), so no other module
asks which of the two it has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np

from ..io.row_blocks import RowSource, rows_at


class FactorRows(ABC):
    """An (n, k) factor matrix's rows, wherever they are kept."""

    @property
    @abstractmethod
    def shape(self) -> tuple[int, int]: ...

    @property
    @abstractmethod
    def dtype(self) -> np.dtype: ...

    def __len__(self) -> int:
        return self.shape[0]

    @abstractmethod
    def take(self, index) -> np.ndarray:
        """Rows ``index`` (any order, repeats allowed) as an array here: a few rows, not the matrix."""

    @abstractmethod
    def indexed(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(M, at) with M[at] the rows ``index``: M is the matrix itself when it is held here (no copy), else
        just those rows, read here."""

    @abstractmethod
    def gather(self) -> np.ndarray:
        """The whole matrix as an array here."""

    @abstractmethod
    def max_row_norm(self) -> float:
        """max_i ‖F_i‖ (0 for no rows)."""

    @abstractmethod
    def gram(self) -> np.ndarray:
        """FᵀF (k × k)."""

    @abstractmethod
    def rows(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, block) of the matrix's row blocks in order, to write them one at a time."""

    @abstractmethod
    def task_source(self, mapper):
        """What a task on ``mapper`` reads rows from, with ``source_rows``: the matrix itself sent to every
        worker, or the names of its block files."""

    @abstractmethod
    def cut_at(self, cuts: np.ndarray) -> FactorRows:
        """These rows, refused if they are row blocks cut elsewhere than ``cuts``."""

    @abstractmethod
    def visit(self, in_memory, in_files):
        """``in_memory(array)`` for rows held here, ``in_files(rows)`` for rows kept in row-block files: for
        the few algorithms written once for each (a user's top-n, ``explain.targets``)."""


class ArrayRows(FactorRows):
    """``FactorRows`` of an array held in this process."""

    def __init__(self, array: np.ndarray):
        self.array = array

    @property
    def shape(self) -> tuple[int, int]:
        return self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    def take(self, index) -> np.ndarray:
        return self.array[np.asarray(index, np.int64)]

    def indexed(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.array, index

    def gather(self) -> np.ndarray:
        return self.array

    def max_row_norm(self) -> float:
        F = self.array
        return float(np.sqrt(np.max(np.einsum("ij,ij->i", F, F), initial=0.0)))

    def gram(self) -> np.ndarray:
        return self.array.T @ self.array

    def rows(self) -> Iterator[tuple[int, np.ndarray]]:
        yield 0, self.array

    def task_source(self, mapper):
        return mapper.put(self.array, broadcast=True)

    def cut_at(self, cuts: np.ndarray) -> ArrayRows:
        return self

    def visit(self, in_memory, in_files):
        return in_memory(self.array)


def factor_rows(F: np.ndarray | FactorRows) -> FactorRows:
    """``FactorRows`` of a model's U or V: an array (``ArrayRows``) or row-block files as they are."""
    return ArrayRows(F) if isinstance(F, np.ndarray) else F


def source_rows(source: np.ndarray | RowSource, index) -> np.ndarray:
    """Rows ``index`` (any order, repeats allowed) of a ``FactorRows.task_source``, inside the task."""
    return source[np.asarray(index, np.int64)] if isinstance(source, np.ndarray) else rows_at(source, index)
