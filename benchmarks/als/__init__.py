"""ALS-MF: the default λ, the sweep against implicit, the time to a converged fit."""
