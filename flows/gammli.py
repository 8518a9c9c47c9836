"""Prefect entrypoint (deploy/prefect.yaml): the flows themselves are dxplain.flows.gammli."""

from dxplain.flows.gammli import gammli_explain, gammli_fit  # noqa: F401
