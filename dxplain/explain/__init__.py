"""Explainers built on the kernels, behind one interface."""
