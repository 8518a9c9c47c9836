"""The docs' tables of the faithfulness area (case deletion), from ``benchmarks/results/faithfulness/``."""

from __future__ import annotations

from benchmarks.common import RESULTS, concat

COMMON = "AUC-DEL over the curves every method has"


def rows(table: str) -> dict[str, tuple[str, ...]]:
    """A Markdown table's body as method → (AUC-DEL₊, AUC-DEL₋, curves)."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("|")]
    return {c[0]: tuple(c[1:4]) for c in cells[2:]}


def without_repeat(text: str) -> str:
    """The benchmark's Markdown, without the common-curves table when every method has every curve: it then
    repeats the first table's numbers."""
    head, sep, common = text.partition("\n\n" + COMMON)
    return head if sep and rows(head) == rows(common) else text


def include(path: str):
    return lambda: without_repeat((RESULTS / path).read_text().strip())


def case_deletion(*names: str):
    return concat(*(include(f"faithfulness/{n}.md") for n in names))
