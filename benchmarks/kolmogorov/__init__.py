"""The Kolmogorov model: the paper's Tables 3 and 4, the θ- and ψ-steps, and a fit at scale."""
