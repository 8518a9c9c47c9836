"""Prefect entrypoint (deploy/prefect.yaml): the flow itself is dxplain.flows.refresh."""

from dxplain.flows.refresh import refresh  # noqa: F401
