"""The nightly refresh engine: how a run is cut (``plan``), its α pass (``alpha``), the three passes that
explain and write on a mapper (``passes``) and the run's summary (``summary``)."""

from .alpha import alpha_from_table, alpha_pass
from .passes import PassResults, RefreshJob, run_passes
from .plan import shard_count, shard_users
from .summary import RunSummary, run_summary

__all__ = [
    "PassResults",
    "RefreshJob",
    "RunSummary",
    "alpha_from_table",
    "alpha_pass",
    "run_passes",
    "run_summary",
    "shard_count",
    "shard_users",
]
