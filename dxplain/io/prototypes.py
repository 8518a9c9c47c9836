"""Outputs of a prototype selection (SBQ).

    <out>/prototypes/<UTC timestamp>-<id>/prototypes.parquet   rank, user, item, rating, weight, objective
    <out>/prototypes/<...>/targets.parquet                     the predictions being explained
    <out>/prototypes/<...>/summary.json                        what was run and what it found

The folder is written whole, then renamed into place.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from .atomic import write_result_folder


def write_prototypes_run(out: str | Path, prototypes: pa.Table, targets: pa.Table, summary: dict) -> Path:
    return write_result_folder(out, "prototypes", {"prototypes": prototypes, "targets": targets}, summary)
