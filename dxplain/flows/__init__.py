"""Prefect flows: config → io → mapper → io. No maths here; shared tasks live in ``common``.

The top-level ``flows/`` package holds only the entrypoints that deployments point at; each imports
its flow from here.
"""

import os

# Send dxplain's own module logs to Prefect's run logs as well (must be set before prefect loads).
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "dxplain")
