"""Prefect entrypoint (deploy/prefect.yaml): the flow itself is dxplain.flows.prototypes."""

from dxplain.flows.prototypes import prototypes  # noqa: F401
