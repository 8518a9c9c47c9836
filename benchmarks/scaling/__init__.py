"""The refresh end to end at 1M–50M interactions, its explanation kernels, its own top-n, and the Amazon-like sets'
prototypes and negatives runs."""
