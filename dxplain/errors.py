"""Error types raised where input enters dxplain (io/, datasets/, the CLI).

Every message names the bad value and says how to fix it; kernels trust their inputs.
"""


class DxplainError(Exception):
    """Base class for errors a user can act on."""


class InputError(DxplainError, ValueError):
    """A file, table or argument handed to dxplain is not usable as given."""


class NotConvergedError(DxplainError, RuntimeError):
    """A solver stopped before reaching its tolerance."""


class DxplainWarning(UserWarning):
    """Warnings dxplain emits about its inputs or results (tests turn these into errors)."""
