"""GAMMLI: the eq. 6 simulation, MovieLens-100k with features (one split and several), and scale."""
