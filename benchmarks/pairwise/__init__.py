"""Pairwise explanations: the paper's Figs. 1–4 on UCI sets and digits, RAIPair against ASIPair, a cluster run."""
