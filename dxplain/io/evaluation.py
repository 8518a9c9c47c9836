"""Outputs of a case-deletion evaluation.

    <out>/evaluations/<UTC timestamp>-<id>/deletions.csv   trial, target, method, side, fraction, k, delta
    <out>/evaluations/<...>/auc_del.md                     AUC-DEL± per method with 95% CIs, ms per explanation
    <out>/evaluations/<...>/deletion_curves.png            mean DEL± against the share removed (with matplotlib)
    <out>/evaluations/<...>/summary.json

Written whole, then renamed into place. Finished trials are cached by Prefect under
``<out>/evaluations/.cache`` so an interrupted evaluation resumes where it stopped.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from .atomic import write_result_folder


def cache_dir(out: str | Path) -> Path:
    return Path(out) / "evaluations" / ".cache"


def write_evaluation(out: str | Path, deletions: pa.Table, markdown: str, summary: dict,
                     png: bytes | None = None) -> Path:
    buf = io.BytesIO()
    pacsv.write_csv(deletions, buf)
    files = {"deletions.csv": buf.getvalue(), "auc_del.md": markdown}
    if png is not None:
        files["deletion_curves.png"] = png
    return write_result_folder(out, "evaluations", {}, summary, files=files)
