"""Error types raised where input enters dxplain (io/, datasets/, the CLI).

Every message names the bad value and says how to fix it; kernels trust their inputs.
"""

from __future__ import annotations

from collections.abc import Callable


class DxplainError(Exception):
    """Base class for errors a user can act on."""


class InputError(DxplainError, ValueError):
    """A file, table or argument handed to dxplain is not usable as given."""


class NotConvergedError(DxplainError, RuntimeError):
    """A solver stopped before reaching its tolerance."""


class DxplainWarning(UserWarning):
    """Warnings dxplain emits about its inputs or results (tests turn these into errors)."""


class UnsupportedModelError(DxplainError, ValueError):
    """A model the explainer has no formula for (an unknown loss), or data it was not trained on: refused,
    never explained with the wrong formula."""


class DegenerateError(DxplainError, RuntimeError):
    """A fit or a run that produced nothing meaningful (all-zero factors, constant predictions, no
    attributions): refused with the reason, and nothing is published."""


class ConvergenceWarning(DxplainWarning):
    """A solver stopped short of its tolerance: the achieved value is in the message."""


def raise_if_nonfinite(X, message: Callable[[int, int, int], str]) -> None:
    """Raise ``InputError(message(count, row, column))`` if the 2-D array ``X`` holds a NaN or an infinity:
    how many it holds, and where the first one (in row order) stands."""
    import numpy as np  # here, not at the top: the CLI imports this module before it needs numpy

    bad = ~np.isfinite(X)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputError(message(int(bad.sum()), r, c))


# Object-store clients (fsspec's S3, GCS, Azure back ends and their HTTP layers), by top-level module, and their
# errors for a store that does not answer: raised after the client's own retries with backoff are spent.
_STORE_CLIENTS = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "fsspec")
NO_ANSWER = (
    "EndpointConnectionError",
    "ConnectionClosedError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyConnectionError",
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ClientOSError",
    "FSTimeoutError",
)


def store_unreachable(exc: BaseException | None) -> str | None:
    """One line saying that an object store stopped answering, when ``exc`` (or an exception it was raised from or
    while handling) is such a client's no-answer error; ``None`` for anything else."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kind = type(exc)
        if kind.__module__.split(".")[0] in _STORE_CLIENTS and kind.__name__ in NO_ANSWER:
            return f"the object store did not answer, after retries with backoff ({kind.__name__}: {exc})"
        exc = exc.__cause__ or exc.__context__
    return None
