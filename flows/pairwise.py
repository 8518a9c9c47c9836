"""Prefect entrypoint (deploy/prefect.yaml): the flow itself is dxplain.flows.pairwise."""

from dxplain.flows.pairwise import pairwise_explain  # noqa: F401
