"""The only layer that imports dask/distributed: maps kernels over shards on a client passed in."""
