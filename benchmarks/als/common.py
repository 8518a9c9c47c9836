"""What the ALS area's runners share: where their results go and the data sets they time."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import RESULTS
from dxplain.datasets import resolve_dataset
from dxplain.datasets.synthetic import generate

ALS = RESULTS / "als"
ML1M_SHAPE = {"n_interactions": 1_000_000, "n_users": 6040, "n_items": 3449}


def named_interactions(name: str, cache: Path):
    """A data set's interactions by name; ``synthetic-ml1m`` (ml-1m's shape) is generated once into ``cache``."""
    if name == "synthetic-ml1m":
        folder = cache / name
        if not (folder / "interactions.parquet").exists():
            generate(folder, ML1M_SHAPE["n_interactions"], ML1M_SHAPE["n_users"], ML1M_SHAPE["n_items"], seed=0)
        return resolve_dataset(str(folder)).interactions
    return resolve_dataset(name).interactions
