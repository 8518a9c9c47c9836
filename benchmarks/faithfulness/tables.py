"""The docs' tables of the faithfulness area (case deletion), from ``benchmarks/results/faithfulness/``."""

from __future__ import annotations

from benchmarks.common import concat, include


def case_deletion(*names: str):
    return concat(*(include(f"faithfulness/{n}.md") for n in names))
