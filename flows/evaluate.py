"""Prefect entrypoint (deploy/prefect.yaml): the flow itself is dxplain.flows.evaluate."""

from dxplain.flows.evaluate import evaluate  # noqa: F401
