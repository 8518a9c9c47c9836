"""The ``dxplain`` command: argument parsing and printing only; defaults come from the flows.

Each command lives in a module of this package with a ``register(subparsers)`` function; a new model
family adds its module to ``COMMANDS`` (docs/architecture.md, "How to add a model family").
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from ..errors import DxplainError

COMMANDS = ("refresh", "data", "negatives", "prototypes", "evaluate", "gammli", "kolmogorov", "pairwise", "report")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dxplain", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    # Cluster chatter at INFO hides dxplain's progress lines; dask reads this before distributed loads.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    # Prefect's ephemeral server otherwise sends a telemetry heartbeat that, offline or when it races the
    # flow for the local SQLite file, prints a traceback ("database is locked") in the middle of a good run.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect's own telemetry, off by default here as well (set DO_NOT_TRACK=0 to send it).
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # The ephemeral server's 20 s start-up limit failed a first run on a busy 2-core machine: give it 120 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    a = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "asyncio"):  # request chatter hides the progress lines
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return a.func(a)
    except DxplainError as exc:
        if a.debug:
            raise
        print(f"dxplain: error: {exc}", file=sys.stderr)
        return 2


