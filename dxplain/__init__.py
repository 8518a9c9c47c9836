"""dxplain: explain recommendations and low-rank models in terms of their training data."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dxplain")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
