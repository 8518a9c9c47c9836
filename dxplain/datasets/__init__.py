"""Dataset loaders and generators: MovieLens-100k, synthetic Zipf ratings, generic import."""

from .registry import resolve_dataset  # noqa: F401
