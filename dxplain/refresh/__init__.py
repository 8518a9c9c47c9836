"""The nightly refresh engine: the plan (``plan``) and the three passes that run it on a mapper (``passes``)."""

from .passes import RefreshJob, run_passes
from .plan import shard_count, shard_users, summarize

__all__ = ["RefreshJob", "run_passes", "shard_count", "shard_users", "summarize"]
