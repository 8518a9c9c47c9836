"""Training's threads: numba's parallel row loops (``kernels/*_fused.py``) use every core the process has, and the BLAS
calls between them (Grams, k × k algebra, the rescaling, Anderson's combinations, iALS's shared solves) run on one
thread. A BLAS pool of several threads keeps spinning after each call and takes the cores the next numba loop needs
(``python -m benchmarks.als.blas_threads``). The trainers hold the limit in their own process, and the tasks that
mix the two on a worker hold it there.

threadpoolctl's limits are process-wide: two fits that overlap in threads of one process restore them in the order
they end, so the BLAS pool may stay at one thread after them (harmless for dxplain, which trains one model a time).
"""

from __future__ import annotations

from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None  # inspecting the loaded libraries once per process


def numba_owns_the_cores():
    """A context in which BLAS runs on one thread, for a trainer's sweeps or a task's kernels."""
    global _controller
    if _controller is None:
        _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="blas")
