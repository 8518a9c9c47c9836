"""What the benchmark areas share: where the repository and the results are, the ``dxplain`` command line a
benchmark runs as a user would, a process's peak memory, and the pieces the areas' table renderers are made of."""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CACHE = Path.home() / ".cache" / "dxplain" / "bench"


def parser(doc: str) -> argparse.ArgumentParser:
    """A runner's argument parser; ``--help`` prints the runner's docstring (its commands) as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def cli_command(command: str, folder: Path, out: Path, *args: str) -> list[str]:
    """``python -m dxplain.cli <command> --dataset <folder> --out <out> <args>`` with this interpreter."""
    return [sys.executable, "-m", "dxplain.cli", command, "--dataset", str(folder), "--out", str(out), *args]


def peak_rss_gib() -> float:
    """VmHWM: this process's own peak RSS. (getrusage's ru_maxrss survives exec, so a spawned worker
    would report its parent's peak.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def load_result(path: str) -> dict:
    """``benchmarks/results/<path>``, a JSON file."""
    return json.loads((RESULTS / path).read_text())


def markdown(header: str, body: list[str]) -> str:
    """A Markdown table: ``header`` (``| a | b |``), the separator its column count implies, the rows."""
    return "\n".join([header, "|---" * (header.count("|") - 1) + "|", *body])


def include(path: str, shift: int = 0) -> Callable[[], str]:
    """A benchmark's own Markdown, headings moved ``shift`` levels down to fit the page."""

    def render() -> str:
        lines = (RESULTS / path).read_text().strip().splitlines()
        return "\n".join("#" * shift + line if line.startswith("#") else line for line in lines)

    return render


def concat(*parts: Callable[[], str]) -> Callable[[], str]:
    """The parts' renderings, one after another, a blank line between."""
    return lambda: "\n\n".join(p() for p in parts)
