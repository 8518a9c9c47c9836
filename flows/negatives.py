"""Prefect entrypoint (deploy/prefect.yaml): the flow itself is dxplain.flows.negatives."""

from dxplain.flows.negatives import negatives  # noqa: F401
