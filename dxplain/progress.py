"""Progress of long loops: one live line per stage on a terminal, and nothing extra anywhere else.

Loops call ``update(stage, done, total, note)`` as they go (training sweeps with ‖∇f‖, shards as their
tasks finish, retrainings in ``evaluate``). By default that does nothing: a library call or a Prefect
deployment is told what happened by its logs. The ``dxplain`` command installs ``TerminalLine`` when
stderr is a terminal (``use``). Updates come from the driver process only (a mapper reports task results
as they arrive), so one global reporter is enough.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

Reporter = Callable[[str, int, "int | None", str], None]
_reporter: Reporter | None = None


def update(stage: str, done: int, total: int | None = None, note: str = "") -> None:
    """Report that ``done`` of ``total`` steps of ``stage`` are finished (``note``: e.g. the gradient norm)."""
    if _reporter is not None:
        _reporter(stage, done, total, note)


def use(reporter: Reporter | None) -> Reporter | None:
    """Install ``reporter`` (None: report nothing); return the one it replaces."""
    global _reporter
    previous, _reporter = _reporter, reporter
    return previous


def newton_progress(maxiter: int) -> Callable[[int, float], None]:
    """A ``newton_pcg`` callback reporting its steps and gradient norm."""
    return lambda steps, gnorm: update("train: Newton steps", steps, maxiter, f"‖∇f‖={gnorm:.1e}")


def lbfgs_progress(maxiter: int) -> Callable:
    """A ``scipy.optimize.minimize`` callback counting L-BFGS iterations."""
    count = [0]

    def callback(*_):
        count[0] += 1
        update("train: L-BFGS iterations", count[0], maxiter)

    return callback


class TerminalLine:
    """Redraw one line per stage in place; a new stage leaves the previous one's last state on screen.

    Log lines printed in between only push the bar down: it is redrawn at the next update. Redraws are
    limited to ``fps`` per second so that a fast loop does not spend its time printing.
    """

    def __init__(self, stream: TextIO | None = None, width: int = 24, fps: float = 10.0):
        self.stream, self.width, self.interval = stream or sys.stderr, width, 1.0 / fps
        self.stage, self.t0, self.last, self.latest = None, 0.0, 0.0, None

    def __call__(self, stage: str, done: int, total: int | None, note: str) -> None:
        now = time.monotonic()
        if stage != self.stage:
            self.close()
            self.stage, self.t0, self.last = stage, now, float("-inf")  # a new stage is drawn at once
        self.latest = (done, total, note, now)
        if now - self.last >= self.interval or done == total:
            self._draw()

    def _draw(self) -> None:
        done, total, note, now = self.latest
        self.last = time.monotonic()
        if total:
            filled = int(self.width * min(done, total) / total)
            bar = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
        else:
            bar = f"{done}"
        self.stream.write(f"\r\x1b[2K{self.stage} {bar} {note} {now - self.t0:.0f}s")
        self.stream.flush()
        self.latest = None

    def close(self) -> None:
        """End the current stage's line, showing its last state (a skipped redraw included)."""
        if self.stage is not None:
            if self.latest is not None:
                self._draw()
            self.stream.write("\n")
            self.stream.flush()
            self.stage = None
