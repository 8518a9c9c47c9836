"""One-off studies kept to reproduce what the docs say about why (e.g. ALS's slow convergence); not how any table is
made."""
