"""Shapley feature importance for pairwise models (Huai et al., AAAI 2020): ASIPair and RAIPair."""
