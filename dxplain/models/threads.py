"""Training's threads: numba's parallel row loops (``kernels/*_fused.py``) use every core of the process, and the BLAS
calls between them (Grams, k × k algebra, the rescaling, Anderson's combinations) run on one thread. A BLAS pool of
several threads keeps spinning after each call and takes the cores the next numba loop needs
(``python -m benchmarks.als.blas_threads`` measures both)."""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def numba_owns_the_cores() -> threadpool_limits:
    """A context in which BLAS runs on one thread (threadpoolctl), for a trainer's sweeps."""
    return threadpool_limits(limits=1, user_api="blas")
