"""Prefect entrypoint: the flow itself is dxplain.flows.kolmogorov."""

from dxplain.flows.kolmogorov import kolmogorov_fit  # noqa: F401
