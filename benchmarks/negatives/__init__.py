"""Negatives: the paper's App. C on ml-100k and the all-unobserved scan at scale."""
