"""Prefect flows: config → io → distributed → io. No maths here."""

import os

# Send dxplain's own module logs to Prefect's run logs as well (must be set before prefect loads).
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "dxplain")
