"""The only layer that touches files: Parquet interactions, the Zarr model store, run folders."""
